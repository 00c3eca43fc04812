"""POST /shopify/webhooks: HMAC on the raw body (bad or missing: 401, nothing stored), dedup by
event id, persisted with its job before the 200; the compliance topics export and redact what
signoff holds, audited; outside staff actions reach the rollout report once."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import func, select

from bot.app import App, create_app
from bot.server import make_web_app
from bot.settings import load_settings
from shopify.webhooks import sign
from storage.mailbox import SentMail
from storage.models import AuditEventRow, ConversationRow, IdentityRow, InboundRow, JobRow, MessageRow
from storage.rollout import OutsideActions, RolloutFacts, StaffAction
from storage.steps import StepWrite
from tests.conftest import make_sqlite

SECRET = "shpss_webhook-test-secret"
SHOP = "signoff-test.myshopify.com"


@pytest.fixture
async def shop_app(tmp_path: Path) -> AsyncIterator[tuple[App, TestClient]]:
    path = tmp_path / "w.db"
    db = await make_sqlite(path)
    await db.dispose()
    settings = load_settings(
        {
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{path}",
            "SIGNOFF_LLM_PROVIDER": "scripted",
            "SIGNOFF_BACKEND": "shopify",
            "SIGNOFF_SHOPIFY_SHOP": SHOP,
            "SIGNOFF_SHOPIFY_CLIENT_ID": "cid",
            "SIGNOFF_SHOPIFY_CLIENT_SECRET": SECRET,
            "SIGNOFF_SHOPIFY_ADMIN_URL": "http://127.0.0.1:9",
        }
    )
    app = await create_app(settings)
    client = TestClient(TestServer(make_web_app(app)))
    await client.start_server()
    yield app, client
    await client.close()
    await app.close()


def _headers(
    body: bytes, *, topic: str = "refunds/create", event: str = "ev-1", hmac: str | None = None
) -> dict[str, str]:
    return {
        "X-Shopify-Hmac-Sha256": sign(SECRET, body) if hmac is None else hmac,
        "X-Shopify-Topic": topic,
        "X-Shopify-Event-Id": event,
        "X-Shopify-Shop-Domain": SHOP,
        "Content-Type": "application/json",
    }


async def _count(app: App, table: Any) -> int:
    async with app.db.reader() as s:
        return int((await s.execute(select(func.count()).select_from(table))).scalar_one())


async def test_a_bad_or_missing_hmac_is_401_and_nothing_is_stored(shop_app: tuple[App, TestClient]) -> None:
    app, client = shop_app
    body = json.dumps({"id": 1, "order_id": 5, "note": None}).encode()
    for headers in (
        _headers(body, hmac=sign("wrong", body)),
        _headers(body, hmac=""),
        {"X-Shopify-Topic": "refunds/create"},
    ):
        resp = await client.post("/shopify/webhooks", data=body, headers=headers)
        assert resp.status == 401
    tampered = _headers(body)
    resp = await client.post("/shopify/webhooks", data=body + b" ", headers=tampered)
    assert resp.status == 401
    assert await _count(app, InboundRow) == 0 and await _count(app, JobRow) == 0


async def test_a_good_delivery_is_persisted_with_its_job_before_the_200_and_a_redelivery_adds_nothing(
    shop_app: tuple[App, TestClient],
) -> None:
    app, client = shop_app
    body = json.dumps({"id": 1, "order_id": 5}).encode()
    first = await client.post("/shopify/webhooks", data=body, headers=_headers(body))
    assert first.status == 200 and (await first.json())["duplicate"] is False
    assert await _count(app, InboundRow) == 1 and await _count(app, JobRow) == 1
    again = await client.post("/shopify/webhooks", data=body, headers=_headers(body))
    assert again.status == 200 and (await again.json())["duplicate"] is True
    webhook_id_only = {k: v for k, v in _headers(body).items() if k != "X-Shopify-Event-Id"}
    other = await client.post(
        "/shopify/webhooks", data=body, headers={**webhook_id_only, "X-Shopify-Webhook-Id": "w-9"}
    )
    assert other.status == 200
    assert await _count(app, InboundRow) == 2


async def test_another_shop_or_no_event_id_is_refused(shop_app: tuple[App, TestClient]) -> None:
    app, client = shop_app
    body = b"{}"
    resp = await client.post(
        "/shopify/webhooks", data=body, headers={**_headers(body), "X-Shopify-Shop-Domain": "evil.myshopify.com"}
    )
    assert resp.status == 401
    headers = {k: v for k, v in _headers(body).items() if k != "X-Shopify-Event-Id"}
    assert (await client.post("/shopify/webhooks", data=body, headers=headers)).status == 400
    assert await _count(app, InboundRow) == 0


async def _customer_conversation(app: App, customer: str, text: str) -> str:
    conv = await app.runtime.s.conversations.create(
        id=f"conv_{customer[-3:]}", channel="api", external_ref=None, principal_kind="customer",
        principal_id=customer, customer_id=customer, model="m", prompt_version="p", loaded_groups=[],
    )  # fmt: skip
    await app.runtime.s.conversations.create_run(
        id=f"run_{conv.id}", conversation_id=conv.id, model="m", prompt_version="p", policy_version="v1", trace_id="t"
    )
    await app.runtime.s.conversations.commit(
        StepWrite(
            conversation_id=conv.id, run_id=f"run_{conv.id}", messages=[("user", [{"type": "text", "text": text}])]
        )
    )
    return conv.id


async def _deliver_and_work(
    app: App, client: TestClient, topic: str, body: dict[str, Any], event: str
) -> dict[str, Any]:
    raw = json.dumps(body).encode()
    resp = await client.post("/shopify/webhooks", data=raw, headers=_headers(raw, topic=topic, event=event))
    assert resp.status == 200
    item = (await app.runtime.s.inbox.owed())[0]
    await app.inbound["shopify"](item)
    done = await app.runtime.s.inbox.get(item.id)
    assert done is not None and done.status == "delivered"
    return done.result or {}


async def test_compliance_data_request_exports_and_redact_anonymises_audited(shop_app: tuple[App, TestClient]) -> None:
    app, client = shop_app
    mine = await _customer_conversation(app, "gid://shopify/Customer/7", "my address is 1 Secret Lane")
    other = await _customer_conversation(app, "gid://shopify/Customer/8", "someone else's words")
    sent = SentMail(app.db)  # the shop messages sent to each (send_message, outside a conversation)
    for n in (7, 8):
        await sent.record(
            f"<m{n}@shop>", conversation_id="shop-message", principal=f"customer:gid://shopify/Customer/{n}"
        )
    exported = await _deliver_and_work(app, client, "customers/data_request", {"customer": {"id": 7}}, "c-1")
    convs = exported["export"]["conversations"]
    assert [c["id"] for c in convs] == [mine]
    assert "1 Secret Lane" in json.dumps(convs)
    result = await _deliver_and_work(app, client, "customers/redact", {"customer": {"id": 7}}, "c-2")
    assert result["redacted"]["conversations"] == 1 and result["redacted"]["outbox"] == 1
    assert await sent.sent_at("<m7@shop>") is None and await sent.sent_at("<m8@shop>") is not None
    async with app.db.reader() as s:
        texts = {r.conversation_id: json.dumps(r.content) for r in (await s.execute(select(MessageRow))).scalars()}
        owner = {r.id: r.customer_id for r in (await s.execute(select(ConversationRow))).scalars()}
        kinds = [r.kind for r in (await s.execute(select(AuditEventRow))).scalars()]
    assert "Secret Lane" not in texts[mine] and "someone else" in texts[other]
    assert owner[mine] == "redacted" and owner[other] == "gid://shopify/Customer/8"
    assert kinds.count("compliance.export") == 1 and kinds.count("compliance.redact") == 1
    await _deliver_and_work(app, client, "shop/redact", {"shop_domain": SHOP}, "c-3")
    async with app.db.reader() as s:
        assert all("someone else" not in json.dumps(r.content) for r in (await s.execute(select(MessageRow))).scalars())
    assert await _count(app, IdentityRow) == 0 and await sent.sent_at("<m8@shop>") is None


async def test_outside_staff_actions_are_stored_once_and_reported(shop_app: tuple[App, TestClient]) -> None:
    app, _ = shop_app
    at = datetime(2026, 12, 1, 10, tzinfo=UTC)
    action = StaffAction(
        proposal_id="shopify:ev-7", tool="issue_refund", created_at=at, principal="rep:shopify-admin",
        arguments={"order_id": "#1001", "amount_minor": 500, "currency": "USD"}, customer_id="gid://shopify/Customer/7",
    )  # fmt: skip
    repo = OutsideActions(app.db)
    assert await repo.record(action, source="shopify") is True
    assert await repo.record(action, source="shopify") is False
    facts = RolloutFacts(app.db)
    assert await facts.outside_counts(since=at - timedelta(hours=1), until=at + timedelta(hours=1)) == {
        "issue_refund": 1
    }
    staff = await facts.staff_actions({"issue_refund"}, since=at - timedelta(hours=1), until=at + timedelta(hours=1))
    assert [s.proposal_id for s in staff] == ["shopify:ev-7"]
