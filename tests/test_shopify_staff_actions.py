"""Staff actions in the Shopify admin reach `signoff rollout report` through signed webhooks from
the fake store: counted once however often delivered; signoff's own and badly signed ones not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import func, select

from agent.rollout import build_report
from agent.rollout_render import render
from bot.app import App, create_app
from bot.server import make_web_app
from bot.settings import load_settings
from sandbox.dataset import DEMO_DATASET_PATH, load_dataset_file
from storage.models import InboundRow
from storage.rollout import RolloutFacts
from tests.conftest import make_sqlite
from tests.fakes.shopify.seed import seed_shop
from tests.fakes.shopify_api import FakeShopifyAPI
from tests.shopify_backend_kit import CLIENT_ID, CLIENT_SECRET
from tools.catalogue import build_registry


@pytest.fixture
async def wired(tmp_path: Path) -> AsyncIterator[tuple[FakeShopifyAPI, App, str]]:
    path = tmp_path / "s.db"
    await (await make_sqlite(path)).dispose()
    shop = seed_shop(load_dataset_file(DEMO_DATASET_PATH), rebase_to=datetime.now(UTC))
    async with FakeShopifyAPI(shop, client_id=CLIENT_ID, client_secret=CLIENT_SECRET) as api:
        settings = load_settings(
            {
                "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{path}",
                "SIGNOFF_LLM_PROVIDER": "scripted",
                "SIGNOFF_BACKEND": "shopify",
                "SIGNOFF_SHOPIFY_SHOP": shop.domain,
                "SIGNOFF_SHOPIFY_CLIENT_ID": CLIENT_ID,
                "SIGNOFF_SHOPIFY_CLIENT_SECRET": CLIENT_SECRET,
                "SIGNOFF_SHOPIFY_ADMIN_URL": api.base_url,
            }
        )
        app = await create_app(settings)
        client = TestClient(TestServer(make_web_app(app)))
        await client.start_server()
        try:
            yield api, app, str(client.make_url("/shopify/webhooks"))
        finally:
            await client.close()
            await app.close()


async def _work(app: App) -> None:
    for item in await app.runtime.s.inbox.owed():
        await app.inbound["shopify"](item)


async def _stored(app: App) -> int:
    async with app.db.reader() as s:
        return int((await s.execute(select(func.count()).select_from(InboundRow))).scalar_one())


async def test_a_staff_refund_is_counted_once_by_the_rollout_report(wired: tuple[FakeShopifyAPI, App, str]) -> None:
    api, app, url = wired
    hook = api.staff_refund(1042, 1500)
    assert await api.send_webhook(url, hook) == 200
    assert await api.send_webhook(url, hook) == 200  # redelivered: same event id
    assert await api.send_webhook(url, hook, secret="not-the-secret") == 401
    assert await _stored(app) == 1
    await _work(app)
    ours = api.staff_refund(1042, 500, note="signoff:refund:#1042:500:USD:- reason:damaged")
    assert await api.send_webhook(url, ours) == 200
    await _work(app)
    now = datetime.now(UTC)
    facts = RolloutFacts(app.db)
    assert await facts.outside_counts(since=now - timedelta(hours=1), until=now + timedelta(hours=1)) == {
        "issue_refund": 1
    }
    staff = await facts.staff_actions({"issue_refund"}, since=now - timedelta(hours=1), until=now + timedelta(hours=1))
    assert [(s.arguments, s.customer_id) for s in staff] == [
        ({"order_id": "#1042", "amount_minor": 1500, "currency": "USD"}, "gid://shopify/Customer/7")
    ]
    assert app.policy is not None
    report = await build_report(
        facts, registry=build_registry(), policy=app.policy.policy, since=now - timedelta(days=1), until=now
    )
    assert "staff actions outside signoff (the shop's admin): issue_refund 1" in render(report)


async def test_staff_cancellations_and_returns_are_counted(wired: tuple[FakeShopifyAPI, App, str]) -> None:
    api, app, url = wired
    assert await api.send_webhook(url, api.staff_cancel(1009)) == 200
    assert await api.send_webhook(url, api.staff_return(1042)) == 200
    await _work(app)
    now = datetime.now(UTC)
    counts = await RolloutFacts(app.db).outside_counts(since=now - timedelta(hours=1), until=now + timedelta(hours=1))
    assert counts == {"cancel_order": 1, "create_return": 1}


async def test_a_return_signoff_requested_is_not_a_staff_action(wired: tuple[FakeShopifyAPI, App, str]) -> None:
    api, app, url = wired
    assert await api.send_webhook(url, api.staff_return(1042, note="signoff:return:#1042:BOOT-RDG-W8x1")) == 200
    await _work(app)
    now = datetime.now(UTC)
    assert (
        await RolloutFacts(app.db).outside_counts(since=now - timedelta(hours=1), until=now + timedelta(hours=1)) == {}
    )
