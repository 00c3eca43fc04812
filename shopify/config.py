"""How signoff reaches one Shopify store: the shop, the API version, the credentials.

Secrets are :class:`pydantic.SecretStr`: their ``repr`` and ``str`` are masked, so no log line,
error or traceback that prints the config shows them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import SecretStr

DEFAULT_API_VERSION = "2026-10"
_SHOP = re.compile(r"^[a-z0-9][a-z0-9-]{0,60}\.myshopify\.com$")
_VERSION = re.compile(r"^(20[0-9]{2}-(01|04|07|10)|unstable)$")


@dataclass(frozen=True, kw_only=True)
class ShopifyConfig:
    """One store's Admin API address and credentials (a client secret or a static token)."""

    shop: str
    api_version: str = DEFAULT_API_VERSION
    #: Base of the Admin API: ``https://{shop}`` unless a proxy (or a test's fake) stands in.
    admin_url: str = ""
    client_id: str | None = None
    client_secret: SecretStr | None = None
    access_token: SecretStr | None = None
    webhook_secret: SecretStr | None = None
    #: How many calls to this shop may be in flight at once.
    max_concurrency: int = 4
    #: Seconds one HTTP attempt may take.
    timeout_s: float = 20.0

    @property
    def base(self) -> str:
        """The Admin API's base URL, without a trailing slash."""
        return (self.admin_url or f"https://{self.shop}").rstrip("/")

    @property
    def graphql_url(self) -> str:
        """``{base}/admin/api/{version}/graphql.json``."""
        return f"{self.base}/admin/api/{self.api_version}/graphql.json"

    @property
    def token_url(self) -> str:
        """``{base}/admin/oauth/access_token`` (the client credentials grant)."""
        return f"{self.base}/admin/oauth/access_token"


def shopify_config(
    *,
    shop: str | None,
    api_version: str | None,
    client_id: str | None,
    client_secret: str | None,
    access_token: str | None,
    webhook_secret: str | None,
    admin_url: str | None,
) -> ShopifyConfig:
    """The validated config; ``ValueError`` whose message starts with the variable at fault."""
    if not shop:
        raise ValueError("SIGNOFF_SHOPIFY_SHOP: required with SIGNOFF_BACKEND=shopify (my-store.myshopify.com)")
    if not _SHOP.match(shop):
        raise ValueError("SIGNOFF_SHOPIFY_SHOP: must be the store's permanent domain, my-store.myshopify.com")
    version = api_version or DEFAULT_API_VERSION
    if not _VERSION.match(version):
        raise ValueError("SIGNOFF_SHOPIFY_API_VERSION: must be a release like 2026-10")
    if access_token is None and not (client_id and client_secret):
        raise ValueError(
            "SIGNOFF_SHOPIFY_CLIENT_ID: set it and SIGNOFF_SHOPIFY_CLIENT_SECRET "
            "(or SIGNOFF_SHOPIFY_ACCESS_TOKEN) to reach the store"
        )
    if bool(client_id) != bool(client_secret):
        missing = "SIGNOFF_SHOPIFY_CLIENT_SECRET" if client_id else "SIGNOFF_SHOPIFY_CLIENT_ID"
        raise ValueError(f"{missing}: the client credentials grant needs both the client id and its secret")
    if admin_url is not None:
        parts = urlsplit(admin_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            raise ValueError("SIGNOFF_SHOPIFY_ADMIN_URL: must be an http(s) base URL with no path")
    hook = webhook_secret or client_secret
    return ShopifyConfig(
        shop=shop,
        api_version=version,
        admin_url=admin_url or "",
        client_id=client_id or None,
        client_secret=SecretStr(client_secret) if client_secret else None,
        access_token=SecretStr(access_token) if access_token else None,
        webhook_secret=SecretStr(hook) if hook else None,
    )
