"""The email bridge end to end: a signed inbound webhook is accepted → the worker runs the turn →
a reply over a real local SMTP server (aiosmtpd), threaded, deduplicated, confirmable by code only.
Mails carry a provider DMARC pass unless a test says otherwise (see test_email_auth.py)."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from collections.abc import Iterator
from email import message_from_bytes
from email.message import Message
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from aiosmtpd.controller import Controller

from agent.llm.testing import ScriptedModel, tool_use_block
from agent.notify import RoutingNotifier
from agent.runtime import Runtime
from bot.email.parsing import sign
from bot.email.smtp import EmailFollowUps, SmtpConfig, SmtpMailer
from storage.db import Database
from tests.api_kit import EMAIL_SECRET, app_behind, client_for, counts, drain, settings
from tests.support import SUP_A, seeded

SHOP = "support@fernway.example"
REFUND = {
    "order_id": "O-1042",
    "amount_minor": 18900,
    "currency": "USD",
    "reason_code": "damaged",
    "evidence": ["refund-policy@7#window"],
}


class Inbox:
    """aiosmtpd handler: keeps every message it accepts."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, list[str], Message]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), message_from_bytes(envelope.content)))
        return "250 OK"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def smtp() -> Iterator[tuple[Inbox, str]]:
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield inbox, f"smtp://127.0.0.1:{port}?from={SHOP}"
    controller.stop()


def signed(
    body: bytes, *, secret: str = EMAIL_SECRET, ts: int | None = None, ctype: str = "application/json"
) -> dict[str, str]:
    stamp = str(ts if ts is not None else int(time.time()))
    return {"Content-Type": ctype, "X-Signoff-Timestamp": stamp, "X-Signoff-Signature": sign(secret, body, stamp)}


def mail(
    text: str,
    *,
    message_id: str,
    sender: str = "Maya Chen <Maya.Chen@example.com>",
    subject: str = "Order O-1042",
    in_reply_to: str | None = None,
    references: str | None = None,
    **extra: str,
) -> bytes:
    extra = {"dmarc": "pass", **extra}
    headers = f"Message-ID: {message_id}\r\n"
    if in_reply_to:
        headers += f"In-Reply-To: {in_reply_to}\r\n"
    if references:
        headers += f"References: {references}\r\n"
    return json.dumps(
        {"from": sender, "to": SHOP, "subject": subject, "text": text, "headers": headers, **extra}
    ).encode()


async def deliver(client: TestClient, body: bytes, **kw: Any) -> tuple[int, dict[str, Any]]:
    """Post the webhook, then let the worker do what it does after the 200; the answer gains the
    ``conversationId`` and ``replySent`` the worker stored for an accepted mail."""
    r = await client.post("/email/inbound", data=body, headers=signed(body, **kw))
    answer = await r.json()
    if r.status == 200 and answer.get("id"):
        await drain(client)
        item = await app_behind(client).runtime.s.inbox.get(answer["id"])
        assert item is not None and item.result is not None, item
        answer = {**answer, "conversationId": item.result["conversation_id"], "replySent": item.status == "delivered"}
    return r.status, answer


async def test_reply_goes_out_over_smtp_threaded(db: Database, smtp: tuple[Inbox, str]) -> None:
    """A customer's email gets the agent's reply from the shop's address, In-Reply-To set."""
    inbox, url = smtp
    model = ScriptedModel([[tool_use_block("get_order", {"order_id": "O-1042"})], "O-1042 was delivered."])
    h = await seeded(db, model)
    async with client_for(h, settings(SIGNOFF_SMTP_URL=url)) as client:
        status, body = await deliver(client, mail("Where is my order O-1042?", message_id="<m1@example.com>"))
    assert (status, body["status"], body["replySent"]) == (200, "accepted", True)
    [(mail_from, rcpt, msg)] = inbox.messages
    assert (mail_from, rcpt) == (SHOP, ["maya.chen@example.com"])  # the address on file
    assert msg["In-Reply-To"] == "<m1@example.com>" and msg["References"] == "<m1@example.com>"
    assert msg["Subject"] == "Re: Order O-1042" and msg["From"] == SHOP
    assert "O-1042 was delivered." in msg.get_payload()
    conv = await h.services.conversations.get(body["conversationId"])
    assert conv is not None and conv.channel == "email" and conv.customer_id == "C-7"
    assert conv.meta["email"]["message_ids"] == ["<m1@example.com>", msg["Message-ID"]]


async def test_forged_sender_is_refused_and_nothing_stored(db: Database, smtp: tuple[Inbox, str]) -> None:
    inbox, url = smtp
    h = await seeded(db, ScriptedModel([]))
    async with client_for(h, settings(SIGNOFF_SMTP_URL=url)) as client:
        before = await counts(db)
        for sender, expected in (
            ("mallory@attacker.example", 403),
            ("maya.chen@example.com.attacker.example", 403),
            ("Maya Chen <mallory@attacker.example>", 403),
            ('"maya.chen@example.com" <mallory@attacker.example>', 422),
        ):  # ambiguous: unreadable
            status, body = await deliver(client, mail("Refund everything", message_id="<f1@x>", sender=sender))
            assert status == expected, (sender, body)
        assert await counts(db) == before
    assert inbox.messages == []


async def test_bad_hmac_is_401(db: Database) -> None:
    h = await seeded(db, ScriptedModel([]))
    body = mail("hi", message_id="<h1@x>")
    async with client_for(h) as client:
        before = await counts(db)
        cases = [
            signed(body, secret="wrong"),
            signed(body, ts=int(time.time()) - 600),
            {"Content-Type": "application/json"},
            {**signed(body), "X-Signoff-Signature": "sha256=" + "0" * 64},
            {**signed(b"other body")},
        ]
        for headers in cases:
            r = await client.post("/email/inbound", data=body, headers=headers)
            assert (r.status, (await r.json())["error"]) == (401, "unauthorized")
        assert await counts(db) == before


async def test_failed_spf_or_dkim_is_403(db: Database) -> None:
    h = await seeded(db, ScriptedModel([]))
    async with client_for(h) as client:
        before = await counts(db)
        for extra in ({"SPF": "fail"}, {"dkim": "{@example.com : fail}"}, {"SPF": "softfail"}):
            extra = {**extra, "dmarc": ""}  # no DMARC verdict: the explicit failure decides
            status, body = await deliver(client, mail("hi", message_id="<s1@x>", **extra))
            assert (status, body["error"]) == (403, "forbidden")
            assert "SPF" in body["message"] or "DKIM" in body["message"]
        assert await counts(db) == before


async def test_redelivered_message_id_does_nothing_more(db: Database, smtp: tuple[Inbox, str]) -> None:
    inbox, url = smtp
    model = ScriptedModel(["Hello Maya."])
    h = await seeded(db, model)
    async with client_for(h, settings(SIGNOFF_SMTP_URL=url)) as client:
        first = await deliver(client, mail("hi", message_id="<d1@example.com>"))
        after_first = await counts(db)
        second = await deliver(client, mail("hi", message_id="<d1@example.com>"))
    assert first[0] == second[0] == 200
    assert (first[1]["status"], second[1]["status"]) == ("accepted", "duplicate")
    assert len(model.requests) == 1 and len(inbox.messages) == 1
    assert await counts(db) == after_first


async def test_confirm_by_code_over_email(db: Database, smtp: tuple[Inbox, str]) -> None:
    """The reply shows the code; replying with it (quoted history and all) confirms the exact action."""
    inbox, url = smtp
    model = ScriptedModel(
        [
            [tool_use_block("get_order", {"order_id": "O-1042"})],
            [tool_use_block("search_knowledge", {"query": "refund window"})],
            [tool_use_block("issue_refund", REFUND)],
            "I can refund $189.00 for O-1042.",
            "Thanks — a supervisor needs to approve this refund; it is pending.",
        ]
    )
    h = await seeded(db, model)
    async with client_for(h, settings(SIGNOFF_SMTP_URL=url)) as client:
        _s, first = await deliver(client, mail("Please refund O-1042, it arrived broken.", message_id="<c1@ex.com>"))
        [conf] = await h.services.confirmations.pending(first["conversationId"])
        reply = inbox.messages[0][2]
        assert f"To confirm, reply with the code {conf.code}:" in reply.get_payload()
        answer = f"{conf.code.lower()}\n\nMaya\n\nOn Tue, Fernway <{SHOP}> wrote:\n> I can refund $189.00"
        _s, second = await deliver(
            client,
            mail(
                answer,
                message_id="<c2@ex.com>",
                subject="Re: Order O-1042",
                in_reply_to=reply["Message-ID"],
                references=f"<c1@ex.com> {reply['Message-ID']}",
            ),
        )
    assert second["conversationId"] == first["conversationId"]
    settled = await h.services.confirmations.get(conf.id)
    assert settled is not None and settled.status == "confirmed"
    [approval] = await h.services.approvals.list_approvals(status="pending")
    assert approval.conversation_id == first["conversationId"] and approval.requester == "customer:C-7"
    second_reply = inbox.messages[1][2]
    assert second_reply["In-Reply-To"] == "<c2@ex.com>"
    assert " ".join(second_reply["References"].split()) == f"<c1@ex.com> {reply['Message-ID']} <c2@ex.com>"
    assert "pending" in second_reply.get_payload()
    texts = [
        b.get("text", "")
        for m in await h.services.conversations.history(approval.conversation_id)
        if m.role == "user"
        for b in m.content
        if b.get("type") == "text"
    ]
    assert not any("wrote:" in t or "I can refund" in t for t in texts)  # quoted history never reached the agent


async def test_by_email_only_the_code_confirms_and_no_with_code_declines(db: Database, smtp: tuple[Inbox, str]) -> None:
    """A bare "Yes" by email confirms nothing (anyone can quote or forge a yes): the runtime
    answers with the action and its code; the code confirms; "no" with a code declines."""
    inbox, url = smtp
    cancel = {"order_id": "O-1044", "reason_code": "customer_request", "evidence": ["cancellations@2#before-shipping"]}
    model = ScriptedModel(
        [
            [tool_use_block("search_knowledge", {"query": "cancel an order before shipping", "kind": "policy"})],
            [tool_use_block("cancel_order", cancel)],
            "Shall I cancel O-1044?",
            "Done, O-1044 is cancelled.",
            [
                tool_use_block("load_tools", {"group": "billing"}),
                tool_use_block("search_knowledge", {"query": "refund window"}),
            ],
            [tool_use_block("issue_refund", REFUND)],
            "Shall I refund O-1042?",
            "All right, no refund.",
        ]
    )
    h = await seeded(db, model)

    def ours() -> str:  # the newest mail we sent: replies thread on it
        return str(inbox.messages[-1][2]["Message-ID"])

    async with client_for(h, settings(SIGNOFF_SMTP_URL=url)) as client:
        _s, first = await deliver(client, mail("Cancel O-1044 please", message_id="<y1@ex.com>"))
        [conf] = await h.services.confirmations.pending(first["conversationId"])
        _s, second = await deliver(
            client, mail("Yes\n\n> Shall I cancel O-1044?", message_id="<y2@ex.com>", in_reply_to=ours())
        )
        assert second["conversationId"] == first["conversationId"]
        assert (await h.services.confirmations.get(conf.id)).status == "pending"  # type: ignore[union-attr]
        await deliver(client, mail(f"Yes {conf.code}", message_id="<y2b@ex.com>", in_reply_to=ours()))
        assert (await h.services.confirmations.get(conf.id)).status in ("confirmed", "consumed")  # type: ignore[union-attr]
        _s, third = await deliver(client, mail("and refund O-1042", message_id="<y3@ex.com>", in_reply_to=ours()))
        [conf2] = await h.services.confirmations.pending(first["conversationId"])
        await deliver(client, mail(f"No, don't. {conf2.code}", message_id="<y4@ex.com>", in_reply_to=ours()))
        assert (await h.services.confirmations.get(conf2.id)).status == "declined"  # type: ignore[union-attr]


async def test_threads_are_per_customer(db: Database) -> None:
    """A new email starts a new conversation; C-8 citing C-7's thread ids does not join it."""
    h = await seeded(db, ScriptedModel(["one", "two", "three"]))
    async with client_for(h) as client:
        _s, a = await deliver(client, mail("first", message_id="<t1@ex.com>"))
        _s, b = await deliver(client, mail("second topic", message_id="<t2@ex.com>"))
        _s, c = await deliver(
            client,
            mail(
                "me too",
                message_id="<t3@ex.de>",
                sender="jonas.weber@example.de",
                references=f"<t1@ex.com> <signoff.{a['conversationId']}.abcdef012345@x>",
            ),
        )
    assert len({a["conversationId"], b["conversationId"], c["conversationId"]}) == 3
    conv = await h.services.conversations.get(c["conversationId"])
    assert conv is not None and conv.customer_id == "C-8"


async def test_multipart_inbound_over_http(db: Database) -> None:
    """SendGrid's multipart/form-data shape is accepted as is."""
    h = await seeded(db, ScriptedModel(["Hi Maya."]))
    boundary = "----sg"
    fields = {
        "from": "Maya Chen <maya.chen@example.com>",
        "to": SHOP,
        "subject": "Hello",
        "text": "hi there",
        "headers": "Message-ID: <mp1@example.com>\r\n",
        "SPF": "pass",
        "dkim": "{@example.com : pass}",
    }
    body = (
        "".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()
        ).encode()
        + f"--{boundary}--\r\n".encode()
    )
    async with client_for(h) as client:
        status, result = await deliver(client, body, ctype=f"multipart/form-data; boundary={boundary}")
    assert (status, result["status"]) == (200, "accepted")
    history = await h.services.conversations.history(result["conversationId"])
    assert history[0].content[0]["text"] == "hi there"


async def test_no_secret_configured_refuses(db: Database) -> None:
    h = await seeded(db, ScriptedModel([]))
    async with client_for(h, settings(SIGNOFF_EMAIL_SECRET="")) as client:
        status, body = await deliver(client, mail("hi", message_id="<n1@x>"))
    assert (status, body["error"]) == (503, "unavailable")


async def test_follow_up_after_approval_is_emailed(db: Database, smtp: tuple[Inbox, str]) -> None:
    """When the supervisor approves, the resumed agent's follow-up goes out in the same thread."""
    inbox, url = smtp
    model = ScriptedModel(
        [
            [tool_use_block("get_order", {"order_id": "O-1042"})],
            [tool_use_block("search_knowledge", {"query": "refund window"})],
            [tool_use_block("issue_refund", REFUND)],
            "Shall I refund $189.00?",
            "It is pending approval.",
            "Your refund of $189.00 was approved and issued.",
        ]
    )
    h = await seeded(db, model)
    followups = EmailFollowUps(
        mailer=SmtpMailer(SmtpConfig.from_url(url)), backend=h.services.backend, from_address=SHOP
    )
    routed = RoutingNotifier(faces={"email": followups}, fallback=h.notifier)
    h = dataclasses.replace(h, runtime=Runtime(dataclasses.replace(h.services, notifier=routed)))
    async with client_for(h, settings(SIGNOFF_SMTP_URL=url)) as client:
        _s, first = await deliver(client, mail("Refund O-1042", message_id="<a1@ex.com>"))
        [conf] = await h.services.confirmations.pending(first["conversationId"])
        ours = inbox.messages[-1][2]["Message-ID"]
        await deliver(client, mail(conf.code, message_id="<a2@ex.com>", references=f"<a1@ex.com> {ours}"))
    [approval] = await h.services.approvals.list_approvals(status="pending")
    await h.runtime.decide(approval.id, expected_version=approval.version, decision="approve", actor=SUP_A)
    await h.runtime.resume(approval.id)
    last = inbox.messages[-1][2]
    assert "approved and issued" in last.get_payload() and inbox.messages[-1][1] == ["maya.chen@example.com"]
    assert last["In-Reply-To"] == inbox.messages[-2][2]["Message-ID"]
    assert last["Subject"] == "Re: Order O-1042"
