"""The widget's API without a browser: app-proxy signatures, sessions and origins, the durable
accept, the stream's resumption, and the hand-off's outbound events."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from aiosmtpd.controller import Controller
from sqlalchemy import func, select, update

from agent import handoff
from bot.api.auth import make_token
from bot.widget import append_outbound
from bot.widget.face import WidgetFace
from bot.widget.proxy import ProxyRejected, canonical, signed_query, verify
from bot.widget.stream import Cursor, chunks, frames, parse_cursor
from storage.models import InboundRow, WidgetEventRow, WidgetSessionRow
from storage.widget import WidgetEvent
from tests.gatekeeper_kit import policy_with
from tests.support import REP
from tests.test_api_serve import free_port
from tests.test_email_serve import Sink
from tests.widget_kit import JWT_SECRET, PROXY_SECRET, SHOP, WidgetServer, widget_server

ORIGIN = "https://shop.example"


@pytest.fixture(scope="module")
def server() -> Iterator[WidgetServer]:
    with widget_server(SIGNOFF_WIDGET_ORIGINS=ORIGIN, SIGNOFF_WIDGET_CHUNK_DELAY_S="0") as s:
        yield s


async def _call(method: str, url: str, **kw: Any) -> tuple[int, dict[str, str], Any]:
    async with aiohttp.ClientSession() as s, s.request(method, url, **kw) as r:
        body = await r.json() if r.content_type == "application/json" else await r.text()
        return r.status, dict(r.headers), body


def call(server: WidgetServer, method: str, path: str, **kw: Any) -> tuple[int, dict[str, str], Any]:
    return server.run(_call(method, f"{server.url}{path}", **kw))


def counts(server: WidgetServer) -> tuple[int, int, int]:
    async def read() -> tuple[int, int, int]:
        async with server.app.db.reader() as s:
            n = [
                await s.scalar(select(func.count()).select_from(t))
                for t in (WidgetSessionRow, WidgetEventRow, InboundRow)
            ]
        return (int(n[0] or 0), int(n[1] or 0), int(n[2] or 0))

    return server.run(read())


def _signed(customer: str, **override: str) -> list[tuple[str, str]]:
    params = {
        "shop": SHOP,
        "logged_in_customer_id": customer,
        "path_prefix": "/apps/signoff",
        "timestamp": str(int(time.time())),
    }
    return signed_query({**params, **override}, PROXY_SECRET)


# -- the app proxy ---------------------------------------------------------------------------------
def test_the_signature_is_shopifys_sorted_pairs_with_multi_values_joined() -> None:
    pairs = [("shop", "a.myshopify.com"), ("ids", "2"), ("ids", "1"), ("timestamp", "5"), ("signature", "x")]
    assert canonical(pairs) == "ids=2,1shop=a.myshopify.comtimestamp=5"
    good = signed_query({"shop": "a.myshopify.com", "logged_in_customer_id": "", "timestamp": "100"}, "s")
    assert verify(good, "s", now=100).customer is None
    with pytest.raises(ProxyRejected):
        verify(good, "s", now=100 + 301)


def _altered(customer: str) -> list[tuple[str, str]]:
    return [(k, "C-7" if k == "logged_in_customer_id" else v) for k, v in _signed(customer)]


def _forged(customer: str) -> list[tuple[str, str]]:
    return [(k, "0" * 64 if k == "signature" else v) for k, v in _signed(customer)]


@pytest.mark.parametrize(
    "query",
    [
        pytest.param(lambda: _forged("C-9"), id="bad-signature"),
        pytest.param(lambda: _signed("C-9", timestamp=str(int(time.time()) - 600)), id="stale"),
        pytest.param(lambda: _altered("C-9"), id="altered-customer"),
    ],
)
def test_a_bad_app_proxy_request_is_401_and_stores_nothing(server: WidgetServer, query: Any) -> None:
    before = counts(server)
    status, _, _ = call(server, "POST", "/shopify/proxy/api/session", params=query(), json={})
    assert status == 401
    status, _, _ = call(
        server, "POST", "/shopify/proxy/api/messages", params=query(), json={"clientId": "m-1", "text": "refund me"}
    )
    assert status == 401
    assert counts(server) == before


def test_a_signed_logged_in_customer_gets_their_session(server: WidgetServer) -> None:
    status, headers, body = call(server, "POST", "/shopify/proxy/api/session", params=_signed("C-9"), json={})
    assert status == 200 and body["customer"] == "C-9" and body["session"] and "Set-Cookie" not in headers
    # the same routes under the proxy's /widget/ paths
    status, _, body = call(server, "POST", "/shopify/proxy/widget/api/session", params=_signed("C-9"), json={})
    assert status == 200 and body["customer"] == "C-9"


# -- sessions and origins ----------------------------------------------------------------------------
def test_a_guest_gets_an_httponly_secure_strict_cookie_on_the_widget_paths(server: WidgetServer) -> None:
    status, headers, body = call(server, "POST", "/widget/api/session", json={})
    cookie = headers["Set-Cookie"]
    assert status == 200 and body["customer"] is None and body["via"] is None
    # a cookie's secret never reaches the page: the body names the session by its id
    assert body["session"].startswith("ws") and body["session"] not in cookie
    assert all(part in cookie for part in ("HttpOnly", "Secure", "SameSite=Strict", "Path=/widget/api"))


def test_a_foreign_origin_is_refused_and_an_allowed_one_holds_its_session(server: WidgetServer) -> None:
    status, _, _ = call(server, "POST", "/widget/api/session", json={}, headers={"Origin": "https://evil.example"})
    assert status == 403
    status, headers, body = call(server, "POST", "/widget/api/session", json={}, headers={"Origin": ORIGIN})
    assert status == 200 and body["session"] and "Set-Cookie" not in headers
    assert headers["Access-Control-Allow-Origin"] == ORIGIN


def test_a_sites_jwt_binds_the_session_to_its_customer(server: WidgetServer) -> None:
    token = make_token(JWT_SECRET, sub="C-7", role="customer", ttl_s=300)
    status, _, body = call(server, "POST", "/widget/api/session", json={}, headers={"Authorization": f"Bearer {token}"})
    assert status == 200 and body["customer"] == "C-7" and body["via"] == "jwt"
    staff = make_token(JWT_SECRET, sub="S-3", role="supervisor", ttl_s=300)
    status, _, _ = call(server, "POST", "/widget/api/session", json={}, headers={"Authorization": f"Bearer {staff}"})
    assert status == 403


# -- durable accept and the stream ----------------------------------------------------------------------
def _guest(server: WidgetServer) -> dict[str, str]:
    _, _, body = call(server, "POST", "/widget/api/session", json={}, headers={"Origin": ORIGIN})
    return {"Origin": ORIGIN, "X-Signoff-Session": body["session"]}


def test_a_resent_message_is_stored_once(server: WidgetServer) -> None:
    who = _guest(server)
    before = counts(server)
    for _ in range(2):
        status, _, body = call(
            server, "POST", "/widget/api/messages", json={"clientId": "same-1", "text": "hi"}, headers=who
        )
        assert (status, body) == (202, {"id": "same-1"})
    assert counts(server)[2] == before[2] + 1


def test_a_message_over_the_queue_cap_is_503_with_retry_after_and_stores_nothing(server: WidgetServer) -> None:
    """The widget answers a full inbound queue as email and Teams do: 503 and Retry-After, nothing
    stored (not even the echo), and the page's resend with the same id is taken once there is room."""
    s = server.app.runtime.s
    running = s.policy
    s.use_policy(policy_with(inbound={"max_queued_jobs": 1, "retry_after_s": 29}))
    filler = server.run(s.inbox.accept("elsewhere", ["widget-cap-filler"], {}))  # no face: stays queued
    try:
        who = _guest(server)
        before = counts(server)
        status, headers, body = call(
            server, "POST", "/widget/api/messages", json={"clientId": "full-1", "text": "hi"}, headers=who
        )
        assert (status, headers.get("Retry-After"), body["error"]) == (503, "29", "unavailable"), body
        assert counts(server) == before
        server.run(s.inbox.finish(filler.id, "ignored"))
        deadline = time.monotonic() + 60  # the worker answers what else was queued, then there is room
        while (
            status := call(
                server, "POST", "/widget/api/messages", json={"clientId": "full-1", "text": "hi"}, headers=who
            )[0]
        ) == 503:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert status == 202 and counts(server)[2] == before[2] + 1
    finally:
        s.use_policy(running)


def test_a_session_over_its_message_limits_is_refused_and_nothing_is_stored(server: WidgetServer) -> None:
    """Per session, messages in the last minute and in the last day are both counted (one query):
    the one over either limit is 429 ``rate_limited`` and stores nothing; an hour later the minute's
    limit has room again and the day's has not."""
    face = next(f.inner for f in server.app.faces if isinstance(getattr(f, "inner", None), WidgetFace))
    kept = face.config
    face.config = replace(kept, limits=replace(kept.limits, messages_per_minute=2, messages_per_day=3))
    try:
        who = _guest(server)

        def send(client_id: str) -> tuple[int, Any]:
            status, _, body = call(
                server, "POST", "/widget/api/messages", json={"clientId": client_id, "text": "hi"}, headers=who
            )
            return status, body

        async def stored(client_id: str) -> int:  # the message's echo (the worker answers the others meanwhile)
            async with server.app.db.reader() as s:
                found = select(func.count()).where(WidgetEventRow.key.like(f"widget:user:%:{client_id}"))
                return int(await s.scalar(found) or 0)

        assert [send(f"lim-{i}")[0] for i in range(2)] == [202, 202]
        inbound = counts(server)[2]
        status, body = send("lim-2")
        assert (status, body["error"]) == (429, "rate_limited") and "minute" in body["message"], body
        assert server.run(stored("lim-2")) == 0 and counts(server)[2] == inbound

        async def an_hour_ago() -> None:
            hour_ago = datetime.now(UTC) - timedelta(hours=1)
            async with server.app.db.engine.begin() as conn:
                await conn.execute(
                    update(WidgetEventRow)
                    .where(WidgetEventRow.kind == "user", WidgetEventRow.key.like("%:lim-%"))
                    .values(created_at=hour_ago)
                )

        server.run(an_hour_ago())
        assert send("lim-3")[0] == 202
        status, body = send("lim-4")
        assert (status, body["error"]) == (429, "rate_limited") and "today" in body["message"], body
        assert server.run(stored("lim-4")) == 0 and server.run(stored("lim-3")) == 1
    finally:
        face.config = kept


async def _read_stream(url: str, headers: dict[str, str], until: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(url, headers=headers) as r:
        seen = ""
        async for line in r.content:
            seen += line.decode()
            if until in seen:
                return seen
    return seen


def test_the_stream_sends_the_contracts_events_and_resumes_after_the_last_event_id(server: WidgetServer) -> None:
    who = _guest(server)
    url = f"{server.url}/widget/api/stream"

    async def live() -> str:
        reading = asyncio.create_task(_read_stream(url, who, '"from": "agent"'))
        await asyncio.sleep(0.5)  # the stream is open: the answer arrives in pieces, then whole
        body = {"clientId": "p-1", "text": "What is your refund policy?"}
        async with aiohttp.ClientSession() as s, s.post(f"{server.url}/widget/api/messages", json=body, headers=who):
            pass
        return await asyncio.wait_for(reading, 60)

    whole = server.run(live())
    assert 'event: message\ndata: {"id": "p-1", "from": "customer"' in whole
    assert "id: 2.0\nevent: delta\n" in whole and "id: 2\nevent: message\n" in whole
    resumed = server.run(asyncio.wait_for(_read_stream(url, {**who, "Last-Event-ID": "2.1"}, '"from": "agent"'), 60))
    assert "id: 1\n" not in resumed and "id: 2.1\n" not in resumed and "id: 2.2\n" in resumed
    assert "id: 2\nevent: message\n" in resumed
    after = server.run(asyncio.wait_for(_read_stream(url, {**who, "Last-Event-ID": "2"}, "keep-alive"), 60))
    assert "event: message" not in after


def test_frames_are_the_contracts_and_a_cursor_skips_what_was_sent() -> None:
    text = "Refunds go back to the original payment method only, whoever asks."
    assert "".join(chunks(text)) == text
    event = WidgetEvent(session_id="s", seq=4, key="k", kind="answer", data={"text": text}, created_at=None)  # type: ignore[arg-type]
    every = frames(event, Cursor(3), live=True)
    assert [f[1] for f in every] == ["delta"] * (len(every) - 1) + ["message"]
    assert every[-1] == ("4", "message", {"id": "m4", "from": "agent", "text": text})
    assert frames(event, Cursor(3)) == [every[-1]]  # stored before the stream opened: whole, at once
    assert [f[0] for f in frames(event, parse_cursor("4.1"))] == [f[0] for f in every[2:]]
    assert frames(event, parse_cursor("4")) == [] and parse_cursor("x.1") == Cursor()
    conf = WidgetEvent(
        session_id="s", seq=5, key="c", kind="confirmation", created_at=None,  # type: ignore[arg-type]
        data={"id": "cnf_1", "version": 2, "status": "pending", "summary": "Refund 30.00 USD on O-1061"},
    )  # fmt: skip
    assert frames(conf, Cursor(4)) == [
        (
            "5",
            "confirmation",
            {"id": "cnf_1", "version": 2, "summary": "Refund 30.00 USD on O-1061", "state": "pending"},
        )
    ]
    person = WidgetEvent(
        session_id="s", seq=6, key="p", kind="person", data={"text": "Hi", "author": "Ana"}, created_at=None
    )  # type: ignore[arg-type]
    assert frames(person, Cursor(5))[-1][2] == {"id": "m6", "from": "person", "name": "Ana", "text": "Hi"}
    handoff = WidgetEvent(
        session_id="s", seq=7, key="h", kind="handoff", data={"state": "taken", "name": "Ana"}, created_at=None
    )  # type: ignore[arg-type]
    assert frames(handoff, Cursor(6)) == [("7", "handoff", {"state": "taken", "name": "Ana"})]


def test_a_persons_reply_reaches_the_widget_once_per_key(server: WidgetServer) -> None:
    who = _guest(server)
    call(
        server,
        "POST",
        "/widget/api/messages",
        json={"clientId": "h-1", "text": "What is your refund policy?"},
        headers=who,
    )
    whole = server.run(asyncio.wait_for(_read_stream(f"{server.url}/widget/api/stream", who, "asks."), 60))
    assert whole

    async def relay() -> tuple[int, int]:
        async with server.app.db.reader() as s:
            conv = await s.scalar(
                select(WidgetSessionRow.conversation_id).order_by(WidgetSessionRow.created_at.desc()).limit(1)
            )
        first = await append_outbound(server.app.port, str(conv), text="Hi, Ana here.", author="Ana", key="slack:1")
        again = await append_outbound(server.app.port, str(conv), text="Hi, Ana here.", author="Ana", key="slack:1")
        return first, again

    assert server.run(relay()) == (1, 1)
    seen = server.run(asyncio.wait_for(_read_stream(f"{server.url}/widget/api/stream", who, "Ana here."), 60))
    assert seen.count('"from": "person", "name": "Ana"') == 1


def test_the_hand_off_is_shown_as_its_states_and_a_person_by_name(server: WidgetServer) -> None:
    """ "Talk to a person" opens a hand-off: the stream says ``handoff`` waiting; a rep's Take
    over says taken, with the name the customer sees."""
    who = _guest(server)
    url = f"{server.url}/widget/api/stream"
    body = {"clientId": "tp-1", "text": "I'd like to talk to a person, please.", "person": True}
    status, _, _ = call(server, "POST", "/widget/api/messages", json=body, headers=who)
    assert status == 202
    waiting = server.run(asyncio.wait_for(_read_stream(url, who, '"state": "waiting"'), 60))
    assert 'event: handoff\ndata: {"state": "waiting"}' in waiting

    async def take() -> None:
        async with server.app.db.reader() as s:
            conv = await s.scalar(
                select(WidgetSessionRow.conversation_id).order_by(WidgetSessionRow.created_at.desc()).limit(1)
            )
        h = await server.app.runtime.s.handoffs.active_for(str(conv))
        assert h is not None
        await server.app.port.handoffs.take_over(h.id, str(conv), handoff.Person(principal=REP, name="Priya Raman"))

    server.run(take())
    taken = server.run(asyncio.wait_for(_read_stream(url, who, '"state": "taken"'), 60))
    assert taken.count('event: handoff\ndata: {"state": "taken", "name": "Priya Raman"}') == 1


def test_a_person_who_takes_over_at_once_is_never_followed_by_the_agents_answer(server: WidgetServer) -> None:
    """The customer is told when a person will reply before the post with Take over goes out:
    the fastest possible Take over (in the post itself) comes after that answer in the stream."""
    services = server.app.runtime.s
    notifier = services.notifier
    who = _guest(server)
    url = f"{server.url}/widget/api/stream"

    class TakenAtOnce:
        def __getattr__(self, name: str) -> Any:
            return getattr(notifier, name)

        async def escalated(self, notice: Any) -> Any:
            sent = await notifier.escalated(notice)
            person = handoff.Person(principal=REP, name="Priya Raman")
            await server.app.port.handoffs.take_over(notice.handoff_id, notice.conversation.id, person)
            await asyncio.wait_for(_read_stream(url, who, '"state": "taken"'), 30)  # the worker said so
            return sent

    object.__setattr__(services, "notifier", TakenAtOnce())  # Services is frozen
    try:
        body = {"clientId": "tp-9", "text": "A person, please.", "person": True}
        assert call(server, "POST", "/widget/api/messages", json=body, headers=who)[0] == 202
        seen = server.run(asyncio.wait_for(_read_stream(url, who, '"state": "taken"'), 60))
        if '"from": "agent"' not in seen:  # the answer may still follow in the stream; it must not
            seen = server.run(asyncio.wait_for(_read_stream(url, who, '"from": "agent"'), 60))
    finally:
        object.__setattr__(services, "notifier", notifier)
    assert seen.index('"from": "agent"') < seen.index('"state": "taken"'), seen


def test_a_guest_verifies_with_a_code_emailed_over_smtp_to_the_address_on_file() -> None:
    """With SMTP configured the code goes by mail from the shop (not into the outbox), to the
    customer's address on file; typing it binds the session to that customer."""
    sink = Sink()
    smtp = Controller(sink, hostname="127.0.0.1", port=free_port())
    smtp.start()
    try:
        env = {"SIGNOFF_SMTP_URL": f"smtp://127.0.0.1:{smtp.port}", "SIGNOFF_EMAIL_FROM": "support@shop.example"}
        with widget_server(SIGNOFF_WIDGET_ORIGINS=ORIGIN, **env) as server:
            who = _guest(server)
            status, _, body = call(
                server, "POST", "/widget/api/verify", json={"email": "MAYA.CHEN@example.com"}, headers=who
            )
            assert (status, body) == (200, {"outcome": "code_sent"})
            [mail] = server.run(sink.wait(1))
            assert mail["To"] == "maya.chen@example.com" and mail["From"] == "support@shop.example"
            code = next(
                w.rstrip(".") for w in str(mail.get_payload()).split() if len(w.rstrip(".")) == 6 and w.isupper()
            )
            status, _, body = call(server, "POST", "/widget/api/verify", json={"code": code}, headers=who)
            assert (status, body) == (200, {"outcome": "verified"})
            status, _, body = call(server, "POST", "/widget/api/session", json={}, headers=who)
            assert body["customer"] == "C-7"
    finally:
        smtp.stop()
