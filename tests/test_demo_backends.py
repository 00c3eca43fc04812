"""``signoff demo``'s scenarios give the same outcomes on the sandbox and on the Shopify backend:
the same tool calls with the same gate decisions, the same approvals, nothing of C-8's shown to
C-7, the same money moved, and a whole audit chain (issue 21)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from agent.notify import RecordingNotifier
from agent.planner import DemoPlanner
from agent.runtime import Runtime
from agent.services import Services, build_services
from bot.app import sandbox_services, shopify_backend
from bot.cli.demo import Demo, scenarios
from sandbox.dataset import DEMO_DATASET_PATH, load_dataset_file
from sandbox.io import load_dataset
from sandbox.schema import upgrade
from shopify.dataset_ids import DatasetIdBackend
from storage.db import Database, create_database
from tests.fakes.shopify.seed import seed_shop
from tests.fakes.shopify_api import FakeShopifyAPI
from tests.shopify_backend_kit import CLIENT_ID, CLIENT_SECRET, config

#: What the scenarios did, without the ids and times that differ from run to run.
_KEPT = re.compile(r"^\s*(tool_use|gate|== |audit:|tool results containing|refunded without approval)")
#: A new refund's id is the store's own (``R-4cd04a319b`` in the sandbox, ``R-900000005`` on Shopify).
_VOLATILE = re.compile(
    r"\bR-(?:[0-9a-f]{10}|9[0-9]{8})\b|\b(ap|conv|run|pr)_[0-9a-z]+\b|\d{4}-\d{2}-\d{2}[T ][0-9:.]+Z?"
)


async def _store(tmp_path: Path, name: str, now: datetime) -> Database:
    url = f"sqlite+aiosqlite:///{tmp_path / name}"
    await upgrade(url)
    db = create_database(url)
    await load_dataset(db, load_dataset_file(DEMO_DATASET_PATH), rebase_to=now)  # knowledge and staff too
    return db


async def _played(services: Services) -> tuple[list[str], list[tuple[str, str]], bool]:
    lines: list[str] = []
    await scenarios(Demo(Runtime(services), out=lines.append))
    kept = [_VOLATILE.sub("…", line.strip()) for line in lines if _KEPT.match(line)]
    approvals = sorted((a.tool, a.status) for a in await services.approvals.list_approvals(status=None))
    return kept, approvals, (await services.audit.verify()).ok


async def test_the_demo_scenarios_have_the_same_outcomes_on_both_backends(tmp_path: Path) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    sandbox_db = await _store(tmp_path, "sandbox.db", now)
    shopify_db = await _store(tmp_path, "shopify.db", now)
    shop = seed_shop(load_dataset_file(DEMO_DATASET_PATH), rebase_to=now)
    try:
        on_sandbox = await _played(sandbox_services(db=sandbox_db, model=DemoPlanner(), notifier=RecordingNotifier()))
        async with FakeShopifyAPI(shop, client_id=CLIENT_ID, client_secret=CLIENT_SECRET) as api:
            backend = shopify_backend(config(api.base_url))
            try:
                services = build_services(
                    db=shopify_db, model=DemoPlanner(), backend=DatasetIdBackend(backend), notifier=RecordingNotifier()
                )
                on_shopify = await _played(services)
            finally:
                await backend.client.close()
            assert api.operations_named("refundCreate")  # the money moved on the store
    finally:
        await sandbox_db.dispose()
        await shopify_db.dispose()
    assert on_shopify == on_sandbox
    kept, approvals, verified = on_shopify
    assert "tool results containing C-8's orders: none" in kept and verified
    assert any(line.startswith("refunded without approval") for line in kept) and approvals
    assert sum(len(o.refunds) for o in shop.orders.values()) > 39  # refunds were made in the shop
