"""Teams against a real ``signoff serve`` subprocess (the console script, a SQLite file, the
real Anthropic SDK client on the strict local fake, the fake Bot Connector and a local token
issuer): a signed message is answered exactly once; a bad token is 401 and stores nothing; the
same activity twice is one reply; a SIGKILL right after the 202 loses nothing (the restarted
server answers once); a supervisor approves by card, the requester and a stranger cannot."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.teams import wording as say
from tests.fakes.anthropic_api import FakeAnthropicAPI, text_turn, tool_turn
from tests.fakes.bot_connector import FakeBotConnector, TokenIssuer, bearer
from tests.slack_kit import SIGNOFF, Serve, run_cli
from tests.support import scrubbed_env
from tests.teams_kit import (
    APPROVALS,
    C7,
    DEV_TOKEN,
    NOBODY,
    PERSONAL,
    SUP,
    click,
    dataset_file,
    message,
    planner_reply,
    teams_env,
    token,
)

pytestmark = pytest.mark.skipif(not SIGNOFF.exists(), reason="the signoff console script is not installed")


def planner(body: dict[str, Any]) -> dict[str, Any]:
    step = planner_reply(body["messages"])
    return text_turn(step) if isinstance(step, str) else tool_turn(*step)


@dataclass
class World:
    env: dict[str, str]
    db: Path
    issuer: TokenIssuer
    connector: FakeBotConnector

    async def post(self, server: Serve, activity: dict[str, Any], *, auth: str | None = "good") -> tuple[int, Any]:
        headers = {}
        if auth == "good":
            headers["Authorization"] = f"Bearer {token(self.issuer, self.connector.base_url)}"
        elif auth == "rogue":
            headers["Authorization"] = f"Bearer {token(self.issuer, self.connector.base_url, rogue=True)}"
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{server.url}/teams/messages", json=activity, headers=headers) as r,
        ):
            text = await r.text()
            return r.status, json.loads(text) if text else None

    def texts(self, conversation: str = PERSONAL) -> list[str | None]:
        return [a.text for a in self.connector.visible(conversation)]

    async def until(self, conversation: str, count: int) -> None:
        def enough(_: Any) -> bool:
            return len(self.connector.visible(conversation)) >= count

        await self.connector.wait_for(enough, within_s=60)

    def rows(self, sql: str) -> int:
        with sqlite3.connect(self.db) as conn:
            return int(conn.execute(sql).fetchone()[0])


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with (
        FakeAnthropicAPI(planner) as api,
        TokenIssuer() as issuer,
        FakeBotConnector(accept_token=lambda t: t == DEV_TOKEN) as connector,
    ):
        connector.open_conversation(PERSONAL)
        connector.open_conversation(APPROVALS)
        db = tmp_path / "teams.db"
        base = scrubbed_env()
        env = {
            **base,
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{db}",
            "SIGNOFF_LLM_PROVIDER": "anthropic",
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": api.base_url,
            **teams_env(issuer=issuer, connector_url=connector.base_url),
        }
        assert (await run_cli(env, "db", "upgrade"))[0] == 0
        code, out = await run_cli(env, "store", "load", str(dataset_file(tmp_path)), "--rebase-to-now")
        assert code == 0, out
        yield World(env=env, db=db, issuer=issuer, connector=connector)


async def test_a_signed_message_is_answered_once_and_a_bad_token_stores_nothing(world: World) -> None:
    server = Serve(world.env)
    await server.start()
    try:
        for auth in (None, "rogue"):
            status, body = await world.post(server, message(world.connector.base_url), auth=auth)
            assert status == 401 and set(body) == {"error", "message"}
        assert world.rows("SELECT count(*) FROM inbound") == 0
        assert world.rows("SELECT count(*) FROM processed_events") == 0
        first = message(world.connector.base_url)
        assert (await world.post(server, first))[0] == 202
        assert (await world.post(server, first))[0] == 202  # Teams redelivers: the same activity
        await world.until(PERSONAL, 2)
        assert (await world.post(server, first))[0] == 202  # and once more after the answer
    finally:
        await server.stop()
    assert world.texts() == ["I have asked for that refund; please confirm it.", None]  # text, then the card
    assert all(bearer(r) == DEV_TOKEN for r in world.connector.calls())
    assert world.rows("SELECT count(*) FROM inbound") == 1
    assert world.rows("SELECT count(*) FROM inbound WHERE status = 'delivered'") == 1


async def test_a_sigkill_right_after_the_202_loses_nothing_and_the_restart_answers_once(world: World) -> None:
    first = Serve(world.env, args=("--no-worker",))  # the turn cannot have started: only the 202 was given
    await first.start()
    assert (await world.post(first, message(world.connector.base_url)))[0] == 202
    await first.kill()
    assert world.rows("SELECT count(*) FROM inbound WHERE status = 'queued'") == 1
    assert world.connector.visible(PERSONAL) == []
    second = Serve(world.env)
    await second.start()
    try:
        await world.until(PERSONAL, 2)
        assert (await world.post(second, message(world.connector.base_url)))[0] == 202  # a late redelivery
    finally:
        await second.stop()
    assert world.texts() == ["I have asked for that refund; please confirm it.", None]


async def test_a_supervisor_approves_by_card_the_requester_and_a_stranger_cannot(world: World) -> None:
    base = world.connector.base_url
    server = Serve(world.env)
    await server.start()
    try:
        await world.post(server, message(base))
        await world.until(PERSONAL, 2)
        card = world.connector.visible(PERSONAL)[1]
        data = card.card["actions"][0]["data"]
        confirm = click(
            base, aad=C7, verb="signoff.confirm", target=data["id"], version=data["version"], card_activity_id=card.id
        )
        status, answer = await world.post(server, confirm)
        assert status == 200 and "actions" not in answer["value"]
        await world.until(APPROVALS, 1)
        (approval,) = world.connector.visible(APPROVALS)
        data = next(a["data"] for a in approval.card["actions"] if a["verb"] == "signoff.approve")
        approve = {
            "verb": "signoff.approve",
            "target": data["id"],
            "version": data["version"],
            "card_activity_id": approval.id,
            "conversation_id": APPROVALS,
        }
        refunds = world.rows("SELECT count(*) FROM store_refunds WHERE order_id = 'O-1042'")
        for aad in (C7, NOBODY):  # the customer who asked for it, and someone on no list
            status, answer = await world.post(server, click(base, aad=aad, **approve))
            assert status == 200 and "O-1042" not in json.dumps(answer), answer
        assert world.rows("SELECT count(*) FROM approvals WHERE status = 'pending'") == 1
        status, answer = await world.post(server, click(base, aad=SUP, invoke_id="f:sup", **approve))
        assert status == 200 and "actions" not in answer["value"] and say.WORKING in json.dumps(answer)
        await world.until(PERSONAL, 4)
        status, _ = await world.post(server, click(base, aad=SUP, invoke_id="f:sup", **approve))  # replayed
        assert status == 200
    finally:
        await server.stop()
    assert world.rows("SELECT count(*) FROM store_refunds WHERE order_id = 'O-1042'") == refunds + 1
    assert world.texts()[-1] == "The refund went through."
    assert world.texts().count("The refund went through.") == 1
    (shown,) = world.connector.visible(APPROVALS)
    assert "actions" not in shown.card and shown.updates >= 1  # redrawn for everyone
    assert "Grace Liu" in json.dumps(shown.card)  # by the worker, once it decided
    code, out = await run_cli(world.env, "audit", "verify")
    assert code == 0, out


async def test_a_sigkill_right_after_the_invokes_200_still_executes_the_approval_exactly_once(world: World) -> None:
    """The click is persisted with its job before the 200: a server killed the moment Teams got
    its answer (its worker may be anywhere in the decision) leaves it to the next server, which
    executes the refund once and tells the customer once."""
    base = world.connector.base_url
    first = Serve(world.env)
    await first.start()
    try:
        await world.post(first, message(base))
        await world.until(PERSONAL, 2)
        card = world.connector.visible(PERSONAL)[1]
        data = card.card["actions"][0]["data"]
        confirm = click(
            base, aad=C7, verb="signoff.confirm", target=data["id"], version=data["version"], card_activity_id=card.id
        )
        assert (await world.post(first, confirm))[0] == 200
        await world.until(APPROVALS, 1)
        (approval,) = world.connector.visible(APPROVALS)
        data = next(a["data"] for a in approval.card["actions"] if a["verb"] == "signoff.approve")
        approve = click(
            base,
            aad=SUP,
            invoke_id="f:kill",
            verb="signoff.approve",
            target=data["id"],
            version=data["version"],
            card_activity_id=approval.id,
            conversation_id=APPROVALS,
        )
        refunds = world.rows("SELECT count(*) FROM store_refunds WHERE order_id = 'O-1042'")
        status, answer = await world.post(first, approve)
        assert status == 200 and "actions" not in answer["value"], answer
    finally:
        await first.kill()
    assert world.rows("SELECT count(*) FROM inbound WHERE face = 'teams'") == 3  # the message and both clicks
    second = Serve(world.env)
    await second.start()
    try:
        await world.connector.wait_for(lambda _: "The refund went through." in world.texts(), within_s=60)
        assert (await world.post(second, approve))[0] == 200  # Teams' late retry of the same invoke
        # The approvals card shows the decision: redrawn by the notifier, on its own schedule (it
        # may come after the customer's message; stopping the server first raced it under load).
        await world.connector.wait_for(
            lambda _: all("actions" not in v.card for v in world.connector.visible(APPROVALS)), within_s=30
        )
    finally:
        await second.stop()
    assert world.rows("SELECT count(*) FROM store_refunds WHERE order_id = 'O-1042'") == refunds + 1
    assert world.texts().count("The refund went through.") == 1
    (shown,) = world.connector.visible(APPROVALS)
    assert "actions" not in shown.card
    code, out = await run_cli(world.env, "audit", "verify")
    assert code == 0, out
