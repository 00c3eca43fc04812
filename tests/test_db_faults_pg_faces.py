"""The outage answer of the faces the main 503 test (``test_db_faults_pg.py``) does not reach: the
widget's ``POST /widget/api/messages``, Shopify's ``POST /shopify/webhooks`` and a Slack click
(interactivity on ``/slack/events``). With the test's own PostgreSQL server stopped each answers
503 with ``Retry-After`` and stores nothing; sent again once it is back, each is taken once."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import text

from bot.app import create_app
from bot.server import make_web_app
from bot.settings import load_settings
from sandbox.dataset import parse_dataset
from sandbox.io import load_dataset
from shopify.webhooks import sign
from storage.db import Database, create_database
from tests import slack_kit
from tests.fakes.slack_api import FakeSlackApi
from tests.gatekeeper_kit import base_dataset
from tests.pg_fault_kit import fresh
from tests.pg_server import PgServer, available, make_server, remove

pytestmark = [
    pytest.mark.skipif(available() is not None, reason=available() or ""),
    pytest.mark.asyncio(loop_scope="module"),
]

ORIGIN = "https://shop.example"
SHOP, SHOP_SECRET = "signoff-test.myshopify.com", "shpss_outage-test-secret"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[PgServer]:
    s = await make_server()
    yield s
    await remove(s)


async def _unavailable(client: TestClient, path: str, body: Any, headers: dict[str, str]) -> None:
    response = await client.post(path, data=body, headers=headers)
    assert response.status == 503, (path, response.status, await response.text())
    assert response.headers.get("Retry-After", "").isdigit(), path
    assert (await response.json())["error"] == "unavailable"


async def test_widget_message_and_slack_click_answer_503_during_an_outage(server: PgServer) -> None:
    name, db = await fresh(server)
    await load_dataset(db, parse_dataset(base_dataset()))
    await db.dispose()
    async with FakeSlackApi() as slack:
        env = {
            "SIGNOFF_DATABASE_URL": server.url(name),
            "SIGNOFF_ENV": "development",
            "SIGNOFF_LLM_PROVIDER": "scripted",
            "SIGNOFF_WIDGET": "true",
            "SIGNOFF_WIDGET_ORIGINS": ORIGIN,
            "SLACK_BOT_TOKEN": slack_kit.BOT_TOKEN,
            "SLACK_SIGNING_SECRET": slack_kit.SIGNING_SECRET,
            "SIGNOFF_SLACK_API_URL": slack.base_url,
        }
        app = await create_app(load_settings(env))
        try:
            async with TestClient(TestServer(make_web_app(app))) as client:
                session = await client.post("/widget/api/session", json={}, headers={"Origin": ORIGIN})
                assert session.status < 300, await session.text()
                who = {"Origin": ORIGIN, "X-Signoff-Session": (await session.json())["session"]}
                message = json.dumps({"clientId": "outage-1", "text": "Where is my order O-1042?"})
                widget_headers = {**who, "Content-Type": "application/json"}
                click = slack_kit.click_body(
                    "U0MAYA", "signoff.confirm", "cnf_outage", channel="C0SUP", message_ts="1.1"
                )
                click_headers = {"Content-Type": "application/x-www-form-urlencoded", **slack_kit.signed_headers(click)}
                await server.stop()
                try:
                    await _unavailable(client, "/widget/api/messages", message, widget_headers)
                    await _unavailable(client, "/slack/events", click, click_headers)
                finally:
                    await server.start()
                again = await client.post("/widget/api/messages", data=message, headers=widget_headers)
                assert again.status == 202, await again.text()
        finally:
            await app.close()
    check = create_database(server.url(name))
    try:
        assert await _count(check, "inbound") == 1  # the widget's message, once
    finally:
        await check.dispose()


async def test_shopify_webhook_answers_503_during_an_outage(server: PgServer) -> None:
    name, db = await fresh(server)
    await db.dispose()
    env = {
        "SIGNOFF_DATABASE_URL": server.url(name),
        "SIGNOFF_LLM_PROVIDER": "scripted",
        "SIGNOFF_BACKEND": "shopify",
        "SIGNOFF_SHOPIFY_SHOP": SHOP,
        "SIGNOFF_SHOPIFY_CLIENT_ID": "cid",
        "SIGNOFF_SHOPIFY_CLIENT_SECRET": SHOP_SECRET,
        "SIGNOFF_SHOPIFY_ADMIN_URL": "http://127.0.0.1:9",
    }
    app = await create_app(load_settings(env))
    body = json.dumps({"id": 1, "order_id": 5}).encode()
    headers = {
        "X-Shopify-Hmac-Sha256": sign(SHOP_SECRET, body),
        "X-Shopify-Topic": "refunds/create",
        "X-Shopify-Event-Id": "ev-outage-1",
        "X-Shopify-Shop-Domain": SHOP,
        "Content-Type": "application/json",
    }
    try:
        async with TestClient(TestServer(make_web_app(app))) as client:
            await server.stop()
            try:
                await _unavailable(client, "/shopify/webhooks", body, headers)
            finally:
                await server.start()
            again = await client.post("/shopify/webhooks", data=body, headers=headers)
            assert again.status == 200 and (await again.json())["duplicate"] is False  # nothing was kept
    finally:
        await app.close()


async def _count(db: Database, table: str) -> int:
    async with db.engine.connect() as conn:
        return int((await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one())  # noqa: S608
