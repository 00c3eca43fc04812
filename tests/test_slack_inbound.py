"""Slack's deliveries against a real ``signoff serve``: signatures, retries, duplicates, crashes.

* a missing, bad or stale signature is 401 and writes nothing;
* Slack's retry of an event (``X-Slack-Retry-Num``) and the same message delivered as
  both ``app_mention`` and ``message`` give one reply;
* the 200 comes back while the model is still thinking (the turn runs in the worker);
* a SIGKILL right after the 200 loses nothing: after a restart, exactly one reply.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.fakes.anthropic_api import FakeAnthropicAPI, text_turn, tool_turn
from tests.fakes.slack_api import BOT_USER_ID, FakeSlackApi, SeenMessage
from tests.slack_kit import (
    DEMO,
    MAYA,
    PRIYA,
    SIGNOFF,
    SUPPORT,
    Serve,
    env_for,
    event_body,
    mention,
    message,
    next_ts,
    run_cli,
    signed_headers,
)

pytestmark = pytest.mark.skipif(not SIGNOFF.exists(), reason="the signoff console script is not installed")

SHARED = "C0SHARED"
OTHER_TEAM = "T0CUSTOMER"
STRANGER = "U0STRANGER"


class Model:
    """The fake model's script: read the order a message names; ``delay_s`` makes it slow."""

    def __init__(self) -> None:
        self.delay_s = 0.0
        self.started = asyncio.Event()

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        self.started.set()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        last = body["messages"][-1]
        content = last["content"]
        if isinstance(content, list) and any(b.get("type") == "tool_result" for b in content):
            result = next(b for b in content if b.get("type") == "tool_result")
            raw = result.get("content")
            try:
                data = json.loads(raw) if isinstance(raw, str) else {}
            except ValueError:
                data = {}
            if isinstance(data, dict) and isinstance(data.get("status"), str) and not result.get("is_error"):
                return text_turn(f"Your order is {data['status']}.")
            return text_turn("I can't see that order from here.")
        said = json.dumps(content)
        order = re.search(r"O-\d{4}", said)
        if order:
            return tool_turn("get_order", {"order_id": order.group(0)})
        return text_turn("Hello! How can I help?")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def template(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Path]:
    base = Path(tmp_path_factory.mktemp("slack-inbound"))
    db = base / "template.db"
    env = env_for(db, anthropic="http://127.0.0.1:9", slack="http://127.0.0.1:9")
    assert (await run_cli(env, "db", "upgrade"))[0] == 0
    assert (await run_cli(env, "store", "load", str(DEMO), "--rebase-to-now"))[0] == 0
    yield db


@pytest_asyncio.fixture
async def world(template: Path, tmp_path: Path) -> AsyncIterator[tuple[Serve, FakeSlackApi, Model, Path]]:
    model = Model()
    async with FakeAnthropicAPI(model) as api, FakeSlackApi() as slack:
        db = tmp_path / "slack.db"
        shutil.copy(template, db)
        server = Serve(env_for(db, anthropic=api.base_url, slack=slack.base_url))
        await server.start()
        try:
            yield server, slack, model, db
        finally:
            await server.stop()


def bot_messages(slack: FakeSlackApi, channel: str, thread_ts: str) -> list[SeenMessage]:
    """Our finished messages in the thread (a stream still being written is not one yet)."""
    return [m for m in slack.messages_in(channel, thread_ts) if m.user == slack.bot_user_id and m.state != "streaming"]


def rows(db: Path, table: str) -> int:
    with sqlite3.connect(db) as c:
        return int(c.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # noqa: S608 - fixed names


async def settle(slack: FakeSlackApi, quiet_s: float = 1.5) -> None:
    """Wait until nothing reached the fake Slack for ``quiet_s`` (the worker is done)."""
    while True:
        seen = len(slack.slack_calls)
        await asyncio.sleep(quiet_s)
        if len(slack.slack_calls) == seen:
            return


# -- signatures ------------------------------------------------------------------------------
async def test_missing_bad_and_stale_signatures_are_401_and_write_nothing(
    world: tuple[Serve, FakeSlackApi, Model, Path],
) -> None:
    server, slack, _model, db = world
    body = event_body(mention(PRIYA, "hello", channel="D0PRIYA"))
    good = signed_headers(body)
    cases = {
        "missing": {},
        "no timestamp": {"X-Slack-Signature": good["X-Slack-Signature"]},
        "bad": {**good, "X-Slack-Signature": "v0=" + "0" * 64},
        "other secret": signed_headers(body, secret="not-our-secret"),
        "stale": signed_headers(body, at=int(good["X-Slack-Request-Timestamp"]) - 400),
        "future": signed_headers(body, at=int(good["X-Slack-Request-Timestamp"]) + 400),
    }
    before = (rows(db, "inbound"), rows(db, "processed_events"), rows(db, "jobs"))
    for name, headers in cases.items():
        assert await server.post(body, headers) == 401, name
    # The body changed after signing: the signature no longer matches.
    assert await server.post(body.replace("hello", "refund everything"), good) == 401
    assert (rows(db, "inbound"), rows(db, "processed_events"), rows(db, "jobs")) == before
    await settle(slack, 0.5)
    assert not slack.calls("chat.postMessage") and not slack.calls("chat.startStream")


# -- duplicates -------------------------------------------------------------------------------
async def test_a_retried_event_and_a_mention_delivered_twice_get_one_reply(
    world: tuple[Serve, FakeSlackApi, Model, Path],
) -> None:
    server, slack, _model, db = world
    ts = next_ts()
    first = mention(MAYA, "hi there", ts=ts)
    body = event_body(first, event_id="Ev0RETRIED")
    assert await server.post(body, signed_headers(body)) == 200
    for n in ("1", "2"):  # Slack's retries: same event id, re-signed, with the retry headers
        assert (
            await server.post(
                body, signed_headers(body, **{"X-Slack-Retry-Num": n, "X-Slack-Retry-Reason": "http_timeout"})
            )
            == 200
        )
    # The same message again as a `message` event (another event id, same team/channel/ts).
    assert await server.event(message(MAYA, f"<@{BOT_USER_ID}> hi there", ts=ts)) == 200
    await slack.until(lambda: bot_messages(slack, SUPPORT, ts))
    await settle(slack)
    assert len(bot_messages(slack, SUPPORT, ts)) == 1
    assert rows(db, "inbound") == 1


async def test_the_200_comes_before_the_model_answers(world: tuple[Serve, FakeSlackApi, Model, Path]) -> None:
    server, slack, model, _db = world
    model.delay_s = 5.0
    ts = next_ts()
    assert await server.event(mention(MAYA, "where is O-1042?", ts=ts)) == 200
    # Acked while the model has not answered: the turn is not run in the request.
    assert not bot_messages(slack, SUPPORT, ts)
    await asyncio.wait_for(model.started.wait(), 10)
    reply = await slack.until(lambda: bot_messages(slack, SUPPORT, ts), within_s=30)
    assert "DELIVERED" in reply[0].visible


async def test_a_crash_right_after_the_200_loses_nothing_and_replies_once(
    world: tuple[Serve, FakeSlackApi, Model, Path],
) -> None:
    server, slack, model, _db = world
    model.delay_s = 1.0
    ts = next_ts()
    assert await server.event(mention(MAYA, "where is O-1042?", ts=ts)) == 200
    await server.kill()
    assert not bot_messages(slack, SUPPORT, ts)
    model.delay_s = 0.0
    await server.start()
    await slack.until(lambda: bot_messages(slack, SUPPORT, ts), within_s=30)
    await settle(slack)
    assert len(bot_messages(slack, SUPPORT, ts)) == 1


async def test_a_crash_while_the_model_answers_replies_once_after_restart(
    world: tuple[Serve, FakeSlackApi, Model, Path],
) -> None:
    server, slack, model, _db = world
    model.delay_s = 3.0
    ts = next_ts()
    assert await server.event(mention(MAYA, "where is O-1042?", ts=ts)) == 200
    await asyncio.wait_for(model.started.wait(), 10)  # the turn is in the model call
    await server.kill()
    model.delay_s = 0.0
    await server.start()
    await slack.until(lambda: bot_messages(slack, SUPPORT, ts), within_s=30)
    await settle(slack)
    assert len(bot_messages(slack, SUPPORT, ts)) == 1


# -- Slack Connect ------------------------------------------------------------------------------
async def test_a_slack_connect_stranger_reads_nothing_until_linked_then_only_their_own(
    world: tuple[Serve, FakeSlackApi, Model, Path],
) -> None:
    server, slack, _model, db = world

    async def say(text: str) -> SeenMessage:
        ts = next_ts()
        ev = mention(STRANGER, text, channel=SHARED, ts=ts, team=OTHER_TEAM)
        assert await server.event(ev, ext_shared=True) == 200
        return (await slack.until(lambda: bot_messages(slack, SHARED, ts)))[0]

    async def whisper(text: str) -> str:
        ts = next_ts()
        ev = mention(STRANGER, text, channel=SHARED, ts=ts, team=OTHER_TEAM)
        assert await server.event(ev, ext_shared=True) == 200
        seen = await slack.until(lambda: [e for e in slack.ephemeral if e["thread_ts"] == ts and e["user"] == STRANGER])
        assert not bot_messages(slack, SHARED, ts)
        return " ".join(str(e["text"]) + json.dumps(e["blocks"]) for e in seen)

    before = await say("where is O-1042?")
    assert "DELIVERED" not in before.visible and "link" in before.visible.lower()

    unknown = await say("link nobody@example.invalid")
    known = await say("link maya.chen@example.com")
    assert unknown.visible == known.visible  # the same answer whether or not the address is on file
    code = _emailed_code(db)
    wrong = await say("ZZZZZZ")
    assert "doesn't match" in wrong.visible
    linked = await say(code)
    assert "linked" in linked.visible.lower()

    # Linked, their account's data goes only to them (ephemeral), never to the shared channel.
    mine = await whisper("where is O-1042?")
    assert "DELIVERED" in mine
    theirs = await whisper("where is O-1001?")  # C-1's order
    assert "DELIVERED" not in theirs and "SHIPPED" not in theirs

    shared = " ".join(m.visible + json.dumps(list(m.blocks)) for m in slack.messages_in(SHARED, None))
    shared += " ".join(
        m.visible
        for ts in {c.args.get("thread_ts") for c in slack.calls() if c.args.get("channel") == SHARED}
        if ts
        for m in slack.messages_in(SHARED, ts)
    )
    for internal in ("conv_", "run_", "apr_", "rep:", "S-1", "Traceback", "Exception"):
        assert internal not in shared, internal
    assert not any(c.args.get("metadata") for c in slack.calls() if c.args.get("channel") == SHARED)


def _emailed_code(db: Path) -> str:
    with sqlite3.connect(db) as c:
        body = c.execute(
            "SELECT body FROM store_outbox WHERE template = 'slack_link_code' ORDER BY rowid DESC LIMIT 1"
        ).fetchone()[0]
    found = re.search(r"code is ([A-Z0-9]{6})", body)
    assert found is not None
    return found.group(1)
