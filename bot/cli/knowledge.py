"""``signoff knowledge import|list|sync``: signoff's own knowledge, whatever the shop.

``import PATH...`` reads Markdown or HTML files (or directories of them) and saves every
document or none (``storage.knowledge_files`` says how a file becomes sections); ``list`` prints
each document's newest version and its sections; ``sync`` imports the Shopify store's policies
and pages through the same importer (``Knowledge.import_documents``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from agent.errors import ConfigError
from bot.settings import Settings
from storage.db import create_database
from storage.knowledge import Imported, Knowledge
from storage.knowledge_files import HtmlSource, KnowledgeError, read_paths


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``knowledge import|list|sync``."""
    k = sub.add_parser("knowledge", help="signoff's own knowledge: help articles and policies, versioned")
    k_sub = k.add_subparsers(dest="knowledge_command", required=True)
    imp = k_sub.add_parser("import", help="Markdown/HTML files or directories; a changed document gets a new version")
    imp.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    k_sub.add_parser("list", help="documents, their newest versions and sections")
    k_sub.add_parser("sync", help="the Shopify store's policies and pages (SIGNOFF_BACKEND=shopify)")


async def shop_pages(settings: Settings) -> Iterable[HtmlSource]:
    """The shop's legal policies and Online Store pages, as :class:`HtmlSource` records
    (``shopify/pages.py``); ``knowledge sync`` needs ``SIGNOFF_BACKEND=shopify``."""
    if settings.signoff_backend != "shopify":
        raise ConfigError(
            "knowledge sync needs SIGNOFF_BACKEND=shopify (the sandbox's knowledge loads with its dataset)"
        )
    from bot.cli.shopify import shop_backend
    from shopify.client import ShopifyUnavailable
    from shopify.pages import fetch_documents

    backend = shop_backend(settings)
    try:
        return await fetch_documents(backend.client)
    except ShopifyUnavailable as exc:
        raise KnowledgeError(f"knowledge sync: {exc}") from None
    finally:
        await backend.client.close()


def _report(results: list[Imported]) -> None:
    for r in results:
        print(f"{r.doc_id}  v{r.version}  {r.outcome}")
    changed = sum(r.outcome != "unchanged" for r in results)
    plural = "s" * (len(results) != 1)
    print(f"{len(results)} document{plural}, {changed} new or changed, {len(results) - changed} unchanged")


async def run(settings: Settings, args: argparse.Namespace) -> int:
    """One ``knowledge`` command; a bad file or record: one line naming it, exit 1, nothing saved."""
    try:
        docs = read_paths(args.paths) if args.knowledge_command == "import" else None
        pages = list(await shop_pages(settings)) if args.knowledge_command == "sync" else None
    except KnowledgeError as exc:
        print(f"signoff: {exc}", file=sys.stderr)
        return 1
    db = create_database(settings.signoff_database_url)
    repo = Knowledge(db)
    try:
        if docs is not None:
            _report(await repo.save(docs))
        elif pages is not None:
            _report(await repo.import_documents(pages))
        else:
            for d in await repo.documents():
                print(f"{d.id}  v{d.version}  {d.kind}  {d.title}  ({d.versions} version{'s' * (d.versions != 1)})")
                print(f"    sections: {', '.join(s.id for s in d.sections)}")
        return 0
    except KnowledgeError as exc:
        print(f"signoff: {exc}", file=sys.stderr)
        return 1
    finally:
        await db.dispose()
