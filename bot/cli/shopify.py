"""``signoff shopify check`` and ``signoff shopify webhooks install --url URL``.

Every ``signoff`` command builds this group's parser; the Shopify modules (the Admin schema's
GraphQL documents, ~5 MB) are imported only when a ``shopify`` command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from agent.errors import ConfigError
from bot.settings import Settings

if TYPE_CHECKING:
    from shopify.writes import ShopifyBackend


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``shopify`` command group."""
    shop = sub.add_parser("shopify", help="the Shopify store (SIGNOFF_BACKEND=shopify)")
    shop_sub = shop.add_subparsers(dest="shopify_command", required=True)
    shop_sub.add_parser("check", help="the store, API version, granted vs needed scopes, webhook subscriptions")
    hooks = shop_sub.add_parser("webhooks", help="webhook subscriptions")
    hooks_sub = hooks.add_subparsers(dest="webhooks_command", required=True)
    install = hooks_sub.add_parser("install", help="subscribe the topics signoff acts on")
    install.add_argument("--url", required=True, help="the public https URL of POST /shopify/webhooks")


def shop_backend(settings: Settings) -> ShopifyBackend:
    """The configured Shopify backend, or a ConfigError naming the bad setting."""
    from bot.app import shopify_backend

    try:
        return shopify_backend(settings.shopify_config())
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


async def run(settings: Settings, args: argparse.Namespace) -> int:
    """Dispatch ``signoff shopify …``."""
    from shopify.client import ShopifyUnavailable

    backend = shop_backend(settings)
    try:
        if args.shopify_command == "check":
            return await check(backend)
        return await install(backend, args.url)
    except ShopifyUnavailable as exc:
        print(f"signoff: {exc}", file=sys.stderr)
        return 1
    finally:
        await backend.client.close()


async def check(backend: ShopifyBackend) -> int:
    """Print the shop, the version, the scopes (granted vs needed) and the webhooks; 1 if a scope is missing."""
    from shopify import documents
    from shopify.webhooks import COMPLIANCE_TOPICS, TOPICS

    data = await backend.client.execute("ShopCheck")
    granted = {s["handle"] for s in data["currentAppInstallation"]["accessScopes"]}
    # A write scope implies its read scope (Shopify grants write_orders without listing read_orders).
    implied = granted | {h.replace("write_", "read_", 1) for h in granted if h.startswith("write_")}
    missing = [s for s in documents.NEEDED_SCOPES if s not in implied]
    cfg = backend.client.config
    print(f"shop: {data['shop']['name']} ({data['shop']['myshopifyDomain']})")
    print(f"API version: {cfg.api_version} (operations validated against {documents.SCHEMA_VERSION})")
    print(f"scopes granted: {', '.join(sorted(granted)) or 'none'}")
    print(f"scopes needed:  {', '.join(documents.NEEDED_SCOPES)}")
    print(f"scopes missing: {', '.join(missing) or 'none'}")
    subs = data["webhookSubscriptions"]["nodes"]
    print(f"webhook subscriptions: {len(subs)}")
    for s in subs:
        print(f"  {s['topic']} -> {s['uri']}")
    wanted = {t for t in (documents.webhook_topic(x) for x in TOPICS) if t is not None}
    absent = sorted(wanted - {s["topic"] for s in subs})
    if absent:
        print(
            f"webhooks not subscribed: {', '.join(str(a) for a in absent)} (signoff shopify webhooks install --url …)"
        )
    print(f"compliance topics ({', '.join(COMPLIANCE_TOPICS)}): set in the app's configuration (README)")
    return 1 if missing else 0


async def install(backend: ShopifyBackend, url: str) -> int:
    """Subscribe every topic of :data:`TOPICS` the schema's ``WebhookSubscriptionTopic`` has to ``url``."""
    from shopify import documents
    from shopify.webhooks import COMPLIANCE_TOPICS, TOPICS

    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        print("signoff: --url: must be the public https URL of /shopify/webhooks", file=sys.stderr)
        return 2
    existing = (await backend.client.execute("ShopCheck"))["webhookSubscriptions"]["nodes"]
    have = {(s["topic"], s["uri"]) for s in existing}
    failed = 0
    for topic in TOPICS:
        enum = documents.webhook_topic(topic)
        if enum is None:
            print(f"  {topic}: not a WebhookSubscriptionTopic in {documents.SCHEMA_VERSION}, skipped")
            continue
        if (enum, url) in have:
            print(f"  {topic}: already subscribed")
            continue
        payload = (await backend.client.execute("WebhookSubscriptionCreate", {"topic": enum, "uri": url}))[
            "webhookSubscriptionCreate"
        ]
        errors = payload.get("userErrors") or []
        failed += bool(errors)
        print(f"  {topic}: {'; '.join(e['message'] for e in errors) if errors else 'subscribed'}")
    print(
        f"the compliance topics ({', '.join(COMPLIANCE_TOPICS)}) are not WebhookSubscriptionTopics: set them in "
        "the app's configuration (shopify.app.toml [webhooks] compliance_topics, README)"
    )
    return 1 if failed else 0
