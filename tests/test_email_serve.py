"""The spoofed two-mail attack replayed against a real ``signoff serve`` over HTTP.

``signoff serve`` (the console script, its in-process worker, a migrated SQLite file with the
demo store, the real Anthropic SDK against the strict local fake, a real aiosmtpd SMTP server)
receives provider-signed webhooks. Spoofed — the provider reports SPF pass and a DKIM pass by
the attacker's own domain, no DMARC pass — "change the shipping address of O-1044" and then
"yes" threaded on the attacker's own Message-ID change nothing, and neither the model nor the
mails see account data. The same mails with a DMARC pass from the customer's domain work: the
change waits for the code from our own mail and happens only with it.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiosmtpd.controller import Controller

from bot.email.parsing import sign
from tests.fakes.anthropic_api import FakeAnthropicAPI, text_turn, tool_turn
from tests.test_api_serve import free_port
from tests.test_crash_confirm_serve import DEMO, SIGNOFF, Server, _env, _run

EMAIL_SECRET = "serve-email-secret"
SHOP = "support@fernway.example"
NEW_ADDRESS = {"line1": "1 Drop Point Rd", "city": "Reno", "postal_code": "89501", "country": "US"}
SCRIPT = [
    ("load_tools", {"group": "orders"}),
    ("get_order", {"order_id": "O-1044"}),
    ("update_shipping_address", {"order_id": "O-1044", "address": NEW_ADDRESS}),
]
SECRETS = ("840 Lakeview", "545 Harbor", "Portland", "Maya Chen", "Insulated Bottle", "555 0101")

pytestmark = pytest.mark.skipif(not SIGNOFF.exists(), reason="the signoff console script is not installed")


def _first_text(body: dict[str, Any]) -> str:
    content = body["messages"][0]["content"]
    return content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)


def planner(body: dict[str, Any]) -> dict[str, Any]:
    """A hijacked planner: in the conversation that opened with the address change it reads the
    order and proposes the change; anywhere else it just answers."""
    if "shipping address" not in _first_text(body):
        return text_turn("Noted.")
    uses = sum(
        1 for m in body["messages"] if isinstance(m["content"], list) for b in m["content"] if b["type"] == "tool_use"
    )
    return tool_turn(*SCRIPT[uses]) if uses < len(SCRIPT) else text_turn("I have asked to change the address.")


class Sink:
    """aiosmtpd handler: keeps the messages; ``wait(n)`` blocks (in a thread) until n arrived."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._cond = threading.Condition()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self._cond:
            self.messages.append(message_from_bytes(envelope.content))
            self._cond.notify_all()
        return "250 OK"

    async def wait(self, count: int, within_s: float = 60.0) -> list[Message]:
        def block() -> bool:
            with self._cond:
                return self._cond.wait_for(lambda: len(self.messages) >= count, timeout=within_s)

        assert await asyncio.to_thread(block), f"expected {count} mails, got {len(self.messages)}"
        return self.messages


@pytest_asyncio.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Server, Sink, FakeAnthropicAPI, Path]]:
    sink = Sink()
    controller = Controller(sink, hostname="127.0.0.1", port=free_port())
    controller.start()
    async with FakeAnthropicAPI(planner) as api:
        db = tmp_path / "email.db"
        env = {
            **_env(db, api),
            "SIGNOFF_EMAIL_SECRET": EMAIL_SECRET,
            "SIGNOFF_SMTP_URL": f"smtp://127.0.0.1:{controller.port}",
            "SIGNOFF_EMAIL_FROM": SHOP,
        }
        assert (await _run(env, "db", "upgrade"))[0] == 0
        assert (await _run(env, "store", "load", str(DEMO), "--rebase-to-now"))[0] == 0
        server = Server(env)
        await server.start()
        try:
            yield server, sink, api, db
        finally:
            await server.stop()
            controller.stop()


async def _post_mail(server: Server, fields: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps({"from": "Maya Chen <maya.chen@example.com>", "to": SHOP, **fields}).encode()
    stamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "X-Signoff-Timestamp": stamp,
        "X-Signoff-Signature": sign(EMAIL_SECRET, body, stamp),
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{server.url}/email/inbound", data=body, headers=headers) as r,
    ):
        assert r.status == 200, await r.text()
        return dict(await r.json())


def _mail(text: str, message_id: str, *, in_reply_to: str | None = None, **verdicts: str) -> dict[str, Any]:
    headers = f"Message-ID: {message_id}\r\n" + (f"In-Reply-To: {in_reply_to}\r\n" if in_reply_to else "")
    return {"subject": "O-1044", "text": text, "headers": headers, **verdicts}


def _ship_to(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT shipping_address FROM store_orders WHERE id = 'O-1044'").fetchone()
    return str(json.loads(row[0])["line1"])


def _body(msg: Message) -> str:
    payload = msg.get_payload(decode=True)
    assert isinstance(payload, bytes)
    return payload.decode()


CHANGE = "Please change the shipping address of O-1044 to 1 Drop Point Rd, Reno NV 89501."


async def test_spoofed_mails_over_http_change_nothing_and_send_no_account_data(
    served: tuple[Server, Sink, FakeAnthropicAPI, Path],
) -> None:
    server, sink, api, db = served
    spoof = {"SPF": "pass", "dkim": "{@attacker.example : pass}"}
    first = await _post_mail(server, _mail(CHANGE, "<evil-1@attacker.example>", **spoof))
    second = await _post_mail(
        server, _mail("yes", "<evil-2@attacker.example>", in_reply_to="<evil-1@attacker.example>", **spoof)
    )
    assert (first["verified"], second["verified"]) == (False, False)
    mails = await sink.wait(2)
    assert _ship_to(db) == "545 Harbor St"
    seen = json.dumps([r.body for r in api.requests])
    assert "no_account_bound" in seen and not any(s in seen for s in SECRETS)
    for msg in mails:
        body = _body(msg)
        assert msg["From"] == SHOP and msg["To"] == "maya.chen@example.com"
        assert "could not confirm that this message really came from your address" in " ".join(body.split())
        assert not any(s in body for s in SECRETS)


async def test_the_same_mails_with_dmarc_pass_work_and_confirm_only_with_the_code(
    served: tuple[Server, Sink, FakeAnthropicAPI, Path],
) -> None:
    server, sink, _api, db = served
    await _post_mail(server, _mail(CHANGE, "<m-1@example.com>", dmarc="pass"))
    [reply] = await sink.wait(1)
    code = _body(reply).split("reply with the code ", 1)[1][:6]
    await _post_mail(server, _mail("yes", "<m-2@example.com>", in_reply_to="<m-1@example.com>", dmarc="pass"))
    await _post_mail(server, _mail("yes", "<m-3@example.com>", in_reply_to=reply["Message-ID"], dmarc="pass"))
    await sink.wait(3)
    assert _ship_to(db) == "545 Harbor St"  # a bare yes, on our thread or theirs, confirms nothing
    await _post_mail(server, _mail(code, "<m-4@example.com>", in_reply_to=reply["Message-ID"], dmarc="pass"))
    await sink.wait(4)
    assert _ship_to(db) == "1 Drop Point Rd"
