"""A person takes over from Slack, end to end against a real ``signoff serve``.

An API customer asks for a person: the escalation post in Slack carries Take over. A forged
(unsigned) click and a customer's click change nothing; two reps clicking at once get one
owner. The owner's thread reply reaches the customer's conversation exactly once, also when
the server is SIGKILLed right after Slack's ack and Slack delivers the event again; the
customer's answer appears in the thread and the agent says nothing meanwhile; after Hand
back the agent answers again with the person's note in its prompt. The same for an email
customer: the rep's reply goes out by email, from the shop, threaded on the customer's mail.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiosmtpd.controller import Controller

from bot.api.auth import make_token
from tests.fakes.anthropic_api import FakeAnthropicAPI, text_turn, tool_turn
from tests.fakes.slack_api import FakeSlackApi
from tests.slack_kit import (
    DEMO,
    MAYA,
    PRIYA,
    SIGNOFF,
    TOMAS,
    Serve,
    button_value,
    click_body,
    env_for,
    event_body,
    message,
    signed_headers,
)
from tests.slack_kit import run_cli as _run
from tests.test_api_serve import free_port
from tests.test_email_serve import SHOP, Sink, _body, _mail, _post_mail

pytestmark = pytest.mark.skipif(not SIGNOFF.exists(), reason="the signoff console script is not installed")

ESCALATIONS = "C0ESCALATE"
SECRET = "handoff-test-secret-" + "x" * 32
EMAIL_SECRET = "serve-email-secret"
NOTE = "she was double charged last month, be gentle"
ASK = "I want to speak to a person please"
SUGGESTED = "Glad it arrived! Our care guide: https://shop.example/care"
SEND = "signoff.suggestion.send"


def planner(body: dict[str, Any]) -> dict[str, Any]:
    """Stateless: a request for a person is escalated; a draft for the person who owns the
    conversation is a suggestion (with a link); anything else gets a short answer."""
    if "Draft the next reply" in json.dumps(body.get("system")):
        return text_turn(SUGGESTED)
    last = json.dumps(body["messages"][-1])
    if "tool_result" in last:
        return text_turn("A colleague from our team will take it from here.")
    if "speak to a person" in last:
        return tool_turn("escalate_to_human", {"reason": "customer_request", "summary": "Wants a person."})
    return text_turn("Happy to help with that.")


@pytest_asyncio.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[dict[str, str], FakeSlackApi, FakeAnthropicAPI, Path, Sink]]:
    sink = Sink()
    smtp = Controller(sink, hostname="127.0.0.1", port=free_port())
    smtp.start()
    async with FakeAnthropicAPI(planner) as model, FakeSlackApi() as slack:
        db = tmp_path / "handoff.db"
        env = env_for(
            db,
            anthropic=model.base_url,
            slack=slack.base_url,
            SIGNOFF_ESCALATION_CHANNEL=ESCALATIONS,
            SIGNOFF_JWT_SECRET=SECRET,
            SIGNOFF_EMAIL_SECRET=EMAIL_SECRET,
            SIGNOFF_SMTP_URL=f"smtp://127.0.0.1:{smtp.port}",
            SIGNOFF_EMAIL_FROM=SHOP,
        )
        assert (await _run(env, "db", "upgrade"))[0] == 0
        assert (await _run(env, "store", "load", str(DEMO), "--rebase-to-now"))[0] == 0
        try:
            yield env, slack, model, db, sink
        finally:
            smtp.stop()


async def _api(server: Serve, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {make_token(SECRET, sub='C-7', role='customer')}"}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, server.url + path, json=body, headers=headers) as r,
    ):
        return r.status, await r.json()


def _handoff(db: Path) -> tuple[str, str | None, str | None]:
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT state, owner, notes FROM handoffs ORDER BY opened_at DESC LIMIT 1").fetchone()
    return row[0], row[1], row[2]


def _audit(db: Path, kind: str) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT principal FROM audit_events WHERE kind = ?", (kind,))]


async def _escalation(slack: FakeSlackApi) -> tuple[str, str]:
    """The escalation post's ts and its Take over value, once it is there."""

    def found() -> tuple[str, str] | None:
        for m in slack.messages_in(ESCALATIONS):
            value = button_value(m.blocks, "signoff.takeover")
            if value:
                return m.ts, value
        return None

    return await slack.until(found, within_s=60)


def _thread_says(slack: FakeSlackApi, ts: str, text: str) -> int:
    return sum(1 for m in slack.messages_in(ESCALATIONS, ts) if text in m.visible)


async def _until(check: Any, within_s: float = 60.0) -> Any:
    """Poll an outside process's state every 50 ms (it gives no other signal)."""
    async with asyncio.timeout(within_s):
        while not (result := check()):  # noqa: ASYNC110 (another process's database: no event to wait on)
            await asyncio.sleep(0.05)
    return result


def _person_messages(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in view["messages"] if m["role"] == "person"]


async def test_api_customer_handed_to_a_rep_and_back(
    world: tuple[dict[str, str], FakeSlackApi, FakeAnthropicAPI, Path, Sink],
) -> None:
    env, slack, model, db, _sink = world
    server = Serve(env)
    await server.start()
    try:
        status, chat = await _api(server, "POST", "/api/chat", {"conversationId": None, "message": "Hi there"})
        assert status == 200, chat
        conv = chat["conversationId"]
        status, asked = await _api(server, "POST", f"/api/conversations/{conv}/handoff", {})
        assert status == 200 and asked["handoff"]["state"] == "waiting" and asked["reply"], asked
        esc_ts, value = await _escalation(slack)

        owner = await _forged_then_raced(server, slack, db, esc_ts, value)
        rep, other = (PRIYA, TOMAS) if owner == "S-1" else (TOMAS, PRIYA)

        # Another rep's reply stays in the thread; the owner's reaches the customer.
        assert (
            await server.event(message(other, "Not relayed, a side remark", channel=ESCALATIONS, thread_ts=esc_ts))
            == 200
        )
        reply = message(rep, "Your parcel left our warehouse today.", channel=ESCALATIONS, thread_ts=esc_ts)
        body = event_body(reply, event_id="EvRELAY0001")
        assert await server.post(body, _signed(body)) == 200
        await server.kill()  # right after Slack's ack
    finally:
        await server.stop()
    server = Serve(env)
    await server.start()
    try:
        assert await server.post(body, _signed(body)) == 200  # Slack delivers it again
        view = await _until_view(server, conv, lambda v: _person_messages(v))
        calls_before = len(model.requests)
        people = _person_messages(view)
        assert [m["text"] for m in people] == ["Your parcel left our warehouse today."], people
        assert people[0]["name"] in ("Priya Raman", "Tomás Ortega")

        # The customer's answer goes into the thread; the agent says nothing.
        status, held = await _api(server, "POST", "/api/chat", {"conversationId": conv, "message": "Great, thanks!"})
        assert status == 200 and held["reply"] == "", held
        await slack.until(lambda: _thread_says(slack, esc_ts, "Great, thanks!"), within_s=60)
        await _suggestion_sent_once(server, slack, model, calls_before, rep, other, esc_ts)

        # A note, then Hand back: the agent answers the next message with the note in its prompt.
        assert await server.event(message(rep, f"note: {NOTE}", channel=ESCALATIONS, thread_ts=esc_ts)) == 200
        await _until(lambda: (_handoff(db)[2] or "").endswith(NOTE))
        assert await server.click(rep, "signoff.handback", value, channel=ESCALATIONS, message_ts=esc_ts) == 200
        await slack.until(lambda: _thread_says(slack, esc_ts, "handed this back"), within_s=60)
        await _until(lambda: _handoff(db)[0] == "returned")
        await _until_view(server, conv, lambda v: any(NOTE in m["text"] for m in v["messages"] if m["role"] == "event"))
        status, answer = await _api(server, "POST", "/api/chat", {"conversationId": conv, "message": "One more thing"})
        assert status == 200 and answer["reply"] == "Happy to help with that.", answer
        assert NOTE in json.dumps(model.requests[-1].body["messages"])
        assert "Your parcel left our warehouse today." in json.dumps(model.requests[-1].body["messages"])
        assert _audit(db, "handoff.opened") and _audit(db, "handoff.returned") == [f"rep:{owner}"]
        _, view = await _api(server, "GET", f"/api/conversations/{conv}")
        assert len(_person_messages(view)) == 2  # each still once, long after the redelivery and the double Send
    finally:
        await server.stop()


async def _suggestion_sent_once(
    server: Serve, slack: FakeSlackApi, model: FakeAnthropicAPI, calls_before: int, rep: str, other: str, esc_ts: str
) -> None:
    """The agent's only model call while held is a draft for the owner (no tools), shown in the
    thread as a suggestion, link-free, with Send; another rep's Send is refused; the owner's
    double click relays it once, under the owner's name, exactly as shown."""

    def found() -> tuple[str, str] | None:
        for m in slack.messages_in(ESCALATIONS, esc_ts):
            value = button_value(m.blocks, SEND)
            if value:
                return m.ts, value
        return None

    sug_ts, value = await slack.until(found, within_s=60)
    [shown] = [m for m in slack.messages_in(ESCALATIONS, esc_ts) if m.ts == sug_ts]
    assert "Suggestion from the agent" in shown.visible and "https://" not in json.dumps(shown.blocks)
    drafts = model.requests[calls_before:]
    assert drafts and all(not r.body.get("tools") for r in drafts)
    assert all("Draft the next reply" in json.dumps(r.body.get("system")) for r in drafts)
    refused = len(slack.calls("chat.postEphemeral"))
    assert await server.click(other, SEND, value, channel=ESCALATIONS, message_ts=sug_ts) == 200
    await slack.wait_for("chat.postEphemeral", refused + 1, within_s=60)
    codes = await asyncio.gather(
        *(server.click(rep, SEND, value, channel=ESCALATIONS, message_ts=sug_ts) for _ in range(2))
    )
    assert codes == [200, 200]
    view = await _until_view(server, _conversation_of(value), lambda v: len(_person_messages(v)) == 2)
    sent = _person_messages(view)[1]
    assert sent["text"] == SUGGESTED.replace("https://", "https:\u200b//") and sent["name"] in (
        "Priya Raman",
        "Tomás Ortega",
    )
    await slack.until(lambda: _thread_says(slack, esc_ts, "sent the agent's suggestion"), within_s=60)
    await slack.until(lambda: found() is None, within_s=60)  # the post lost its Send


def _conversation_of(value: str) -> str:
    return str(json.loads(value)["conversation"])


async def _forged_then_raced(server: Serve, slack: FakeSlackApi, db: Path, esc_ts: str, value: str) -> str:
    """An unsigned click is refused and a customer's signed click changes nothing; then two reps
    click Take over at once: one owner (returned), said once in the thread."""
    # A click without Slack's signature is refused; a customer's signed click changes nothing.
    forged = click_body(PRIYA, "signoff.takeover", value, channel=ESCALATIONS, message_ts=esc_ts)
    assert (
        await server.post(forged, {"X-Slack-Request-Timestamp": "1", "X-Slack-Signature": "v0=bad"}, form=True) == 401
    )
    assert await server.click(MAYA, "signoff.takeover", value, channel=ESCALATIONS, message_ts=esc_ts) == 200
    await slack.wait_for("chat.postEphemeral", 1, within_s=60)
    assert _handoff(db)[:2] == ("waiting", None)

    # Two reps at once: one owner, said once in the thread.
    codes = await asyncio.gather(
        server.click(PRIYA, "signoff.takeover", value, channel=ESCALATIONS, message_ts=esc_ts),
        server.click(TOMAS, "signoff.takeover", value, channel=ESCALATIONS, message_ts=esc_ts),
    )
    assert codes == [200, 200]
    await slack.wait_for("chat.postEphemeral", 2, within_s=60)
    await slack.until(lambda: _thread_says(slack, esc_ts, "took this over"), within_s=60)
    state, owner, _ = _handoff(db)
    assert state == "taken" and owner in ("S-1", "S-2")
    assert _thread_says(slack, esc_ts, "took this over") == 1 and len(_audit(db, "handoff.taken")) == 1

    return str(owner)


async def _until_view(server: Serve, conv: str, check: Any) -> dict[str, Any]:
    async with asyncio.timeout(60):
        while True:
            _, view = await _api(server, "GET", f"/api/conversations/{conv}")
            if check(view):
                return dict(view)
            await asyncio.sleep(0.1)


def _signed(body: str) -> dict[str, str]:
    return signed_headers(body)


async def test_email_customer_gets_the_reps_reply_by_email_threaded(
    world: tuple[dict[str, str], FakeSlackApi, FakeAnthropicAPI, Path, Sink],
) -> None:
    env, slack, _model, db, sink = world
    server = Serve(env)
    await server.start()
    try:
        await _post_mail(server, _mail(ASK, "<ask-1@example.com>", dmarc="pass"))
        [first] = await sink.wait(1)
        esc_ts, value = await _escalation(slack)
        assert await server.click(PRIYA, "signoff.takeover", value, channel=ESCALATIONS, message_ts=esc_ts) == 200
        await _until(lambda: _handoff(db)[0] == "taken")
        reply = message(PRIYA, "I have refunded the shipping fee for you.", channel=ESCALATIONS, thread_ts=esc_ts)
        assert await server.event(reply) == 200
        mails = await sink.wait(2)
        mail = mails[1]
        assert mail["From"] == SHOP and mail["To"] == "maya.chen@example.com"
        assert mail["In-Reply-To"] == first["Message-ID"]
        assert "<ask-1@example.com>" in mail["References"] and first["Message-ID"] in mail["References"]
        assert "I have refunded the shipping fee for you." in _body(mail) and "Priya Raman" in _body(mail)
        # The customer's answer to it joins the conversation and reaches the thread, with no mail from us.
        await _post_mail(
            server, _mail("Thank you Priya!", "<ask-2@example.com>", in_reply_to=mail["Message-ID"], dmarc="pass")
        )
        await slack.until(lambda: _thread_says(slack, esc_ts, "Thank you Priya!"), within_s=60)
        assert len(sink.messages) == 2
    finally:
        await server.stop()
