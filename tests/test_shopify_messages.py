"""``send_message`` on the Shopify backend: signoff's own SMTP (Shopify has no messaging API).

Against the strict fake Admin API (the address on file is read from the shop) and a local SMTP
server (aiosmtpd): the mail goes to the address on file once per ledger key, its Message-ID is
derived from the key (a resend after a crash carries the same one), the key is recorded after
the send and ``lookup_write`` answers from that record. Without SMTP the tool is not offered."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest
from aiosmtpd.controller import Controller

from bot.app import build_backend, shopify_backend
from bot.email.smtp import SmtpConfig, SmtpMailer
from bot.settings import Settings
from bot.shopify.messages import SmtpShopMessages
from sandbox.dataset import DEMO_DATASET_PATH, load_dataset_file
from shopify.dataset_ids import DatasetIdBackend
from shopify.messages import ShopMail, message_id
from shopify.writes import ShopifyBackend
from storage.db import Database
from storage.mailbox import SentMail
from tests.catalogue_harness import REGISTRY, call, make_ctx
from tests.fakes.shopify.seed import seed_shop
from tests.fakes.shopify_api import FakeShopifyAPI
from tests.shopify_backend_kit import C7, CLIENT_ID, CLIENT_SECRET, config
from tests.test_email_bridge import Inbox, free_port
from tools.backend import BackendError
from tools.catalogue import build_registry, supported_by

SHOP_FROM = "support@fernway.example"
ON_FILE = "maya.chen@example.com"  # C-7's email in the demo dataset
KEY = "message:order_update:gid://shopify/Customer/7:email:#1042:2026-12-05"


@dataclass
class Rig:
    api: FakeShopifyAPI
    backend: ShopifyBackend
    inbox: Inbox
    sender: SmtpShopMessages


@pytest.fixture
async def rig(db: Database) -> AsyncIterator[Rig]:
    """The demo shop on the fake Admin API, a local SMTP server, a backend sending through it."""
    inbox = Inbox()
    smtp = Controller(inbox, hostname="127.0.0.1", port=free_port())
    smtp.start()
    shop = seed_shop(load_dataset_file(DEMO_DATASET_PATH), rebase_to=datetime.now(UTC))
    try:
        async with FakeShopifyAPI(shop, client_id=CLIENT_ID, client_secret=CLIENT_SECRET) as api:
            mailer = SmtpMailer(SmtpConfig(host="127.0.0.1", port=smtp.port))
            sender = SmtpShopMessages(mailer=mailer, from_address=SHOP_FROM, sent=SentMail(db))
            backend = shopify_backend(config(api.base_url), sender=sender)
            try:
                yield Rig(api, backend, inbox, sender)
            finally:
                await backend.client.close()
            assert api.invalid_operations == []
    finally:
        smtp.stop()


async def _send(backend: Any, key: str = KEY, customer: str = C7, **over: Any) -> Any:
    args = {"channel": "email", "template": "order_update", "body": "Your order O-1042 was delivered."} | over
    return await backend.send_message(customer, idempotency_key=key, **args)


async def test_the_message_goes_to_the_address_on_file_once_and_lookup_write_finds_it(rig: Rig) -> None:
    """Sent from the shop's address to C-7's email read from the shop; the same key again sends
    nothing and answers the same message; ``lookup_write`` says it was sent."""
    assert await rig.backend.lookup_write(KEY) is None
    first = await _send(rig.backend)
    [(mail_from, rcpts, msg)] = rig.inbox.messages
    assert (mail_from, rcpts, msg["To"], msg["From"]) == (SHOP_FROM, [ON_FILE], ON_FILE, SHOP_FROM)
    assert msg["Message-ID"] == message_id(KEY, SHOP_FROM) and "delivered" in str(msg.get_payload(decode=True))
    assert (first.to, first.channel, first.template, first.customer_id) == (ON_FILE, "email", "order_update", C7)
    assert first.sent_at.tzinfo is not None
    again = await _send(rig.backend)
    assert len(rig.inbox.messages) == 1 and again == first
    record = await rig.backend.lookup_write(KEY)
    assert record is not None and record.operation == "send_message" and record.result == {"message_id": first.id}
    other = await _send(rig.backend, key=KEY.replace("order_update", "shipping_delay"))
    assert len(rig.inbox.messages) == 2 and other.id != first.id


class CrashAfterSend:
    """The process dies between the send and the record (once)."""

    def __init__(self, inner: SmtpShopMessages) -> None:
        self.inner, self.from_address, self.crashed = inner, inner.from_address, False

    async def send(self, mail: ShopMail) -> None:
        await self.inner.send(mail)

    async def record(self, message_id: str, *, customer_id: str) -> None:
        if not self.crashed:
            self.crashed = True
            raise SystemExit("killed after the send")
        await self.inner.record(message_id, customer_id=customer_id)

    async def sent_at(self, message_id: str) -> datetime | None:
        return await self.inner.sent_at(message_id)


async def test_a_crash_between_send_and_record_resends_with_the_same_message_id(rig: Rig) -> None:
    """Unrecorded, ``lookup_write`` truthfully says not done; the ledger's retry sends again under
    the same Message-ID (mail clients show one), then it is recorded and found."""
    backend = ShopifyBackend(rig.backend.client, sender=CrashAfterSend(rig.sender))
    with pytest.raises(SystemExit):
        await _send(backend)
    assert await backend.lookup_write(KEY) is None
    await _send(backend)
    ids = [m["Message-ID"] for _, _, m in rig.inbox.messages]
    assert ids == [message_id(KEY, SHOP_FROM)] * 2
    assert await backend.lookup_write(KEY) is not None
    await _send(backend)
    assert len(rig.inbox.messages) == 2


async def test_the_model_cannot_choose_the_recipient(rig: Rig) -> None:
    """The tool's schema takes no address, and the tool run on Shopify mails only the address
    on file, whatever the conversation said."""
    schema = jsonschema.Draft202012Validator(REGISTRY.tools["send_message"].input_schema)
    assert not schema.is_valid({"channel": "email", "template": "order_update", "to": "attacker@evil.example"})
    ctx = make_ctx(rig.backend, C7)  # type: ignore[arg-type]
    out = await call("send_message", {"channel": "email", "template": "order_update", "order_id": "#1042"}, ctx)
    assert out["to"] != ON_FILE and out["to"].endswith("@example.com") and "error" not in out
    assert [rcpts for _, rcpts, _ in rig.inbox.messages] == [[ON_FILE]]


async def test_sms_and_unknown_customers_send_nothing(rig: Rig) -> None:
    """Shopify messages go by email only; an unknown customer is not found; nothing is sent."""
    with pytest.raises(BackendError) as sms:
        await _send(rig.backend, channel="sms")
    with pytest.raises(BackendError) as nobody:
        await _send(rig.backend, customer="gid://shopify/Customer/999999")
    assert (sms.value.code, nobody.value.code) == ("channel_not_available", "not_found")
    assert rig.inbox.messages == [] and await rig.backend.lookup_write(KEY) is None


async def test_in_the_datasets_ids_the_message_and_its_record_read_back(rig: Rig) -> None:
    """The evaluation's view (``C-7``): the message names C-7 and ``lookup_write`` finds its key."""
    seen = DatasetIdBackend(rig.backend)
    key = "message:order_update:C-7:email:O-1042:2026-12-05"
    sent = await _send(seen, key=key, customer="C-7")
    assert sent.customer_id == "C-7" and sent.to == ON_FILE
    found = await seen.lookup_write(key)
    assert found is not None and found.operation == "send_message"


def _settings(**extra: Any) -> Settings:
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        signoff_backend="shopify",
        signoff_shopify_shop="fernway.myshopify.com",
        signoff_shopify_access_token="shpat_test",
        signoff_shopify_admin_url="http://127.0.0.1:9",
        **extra,
    )


async def test_send_message_is_offered_only_with_smtp_configured(db: Database) -> None:
    """Without SIGNOFF_SMTP_URL (or without the shop's address) the tool is not offered and the
    backend refuses; with both it is offered."""
    without = build_backend(_settings(), db, clock=lambda: datetime.now(UTC))
    smtp = build_backend(
        _settings(signoff_smtp_url="smtp://127.0.0.1:2525", signoff_email_from=SHOP_FROM),
        db,
        clock=lambda: datetime.now(UTC),
    )
    assert isinstance(without, ShopifyBackend) and isinstance(smtp, ShopifyBackend)
    try:
        assert "send_message" not in (supported_by(without) or ())
        assert "send_message" not in build_registry(supported_by(without)).tools
        assert "send_message" in build_registry(supported_by(smtp)).tools
        with pytest.raises(BackendError) as refused:
            await _send(without)
        assert refused.value.code == "not_supported"
    finally:
        await without.client.close()
        await smtp.client.close()
