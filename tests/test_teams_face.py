"""The Teams face wired to the runtime, in process: a signed activity is stored before the
202 and answered once by the worker through the fake Bot Connector; confirmation and
approval cards are decided by the right people only, redrawn from the database, and a
replayed click runs nothing twice."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from sqlalchemy import func, select

from agent.llm.base import ModelRequest
from agent.llm.testing import FunctionModel, Reply, tool_use_block
from bot.app import App, create_app
from bot.server import make_web_app
from bot.settings import load_settings
from bot.teams import wording as say
from bot.teams.face import thread_ref
from sandbox.dataset import load_dataset_file
from sandbox.io import load_dataset
from sandbox.models import StoreRefundRow
from sandbox.schema import upgrade
from storage.models import InboundRow, ProcessedEventRow
from tests.fakes.bot_connector import TENANT_ID, FakeBotConnector, TokenIssuer, bearer
from tests.teams_kit import (
    APPROVALS,
    C7,
    C8,
    DEV_TOKEN,
    NOBODY,
    PERSONAL,
    REP,
    SUP,
    click,
    dataset_file,
    message,
    planner_reply,
    teams_env,
    token,
)


def plan(request: ModelRequest) -> Reply:
    step = planner_reply([{"role": m.role, "content": m.content} for m in request.messages])
    if isinstance(step, str):
        return step
    return [tool_use_block(*step)]


class Clock:
    """Real time plus what the test skipped ahead (jobs run after their delays without waiting)."""

    def __init__(self) -> None:
        self.skipped = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.skipped


@dataclass
class Rig:
    app: App
    clock: Clock
    url: str
    http: aiohttp.ClientSession
    issuer: TokenIssuer
    connector: FakeBotConnector

    async def post(self, activity: dict[str, Any], *, signed: bool = True, **mint: Any) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token(self.issuer, self.connector.base_url, **mint)}"} if signed else {}
        async with self.http.post(self.url, json=activity, headers=headers) as resp:
            text = await resp.text()
            return resp.status, json.loads(text) if text else None

    async def work(self) -> None:
        """Run the worker until no job is due."""
        worker = self.app.worker()
        for _ in range(20):
            self.clock.skipped += timedelta(seconds=30)
            if await worker.run_once() == 0:
                return

    def said(self, conversation: str = PERSONAL) -> list[Any]:
        return self.connector.visible(conversation)

    async def count(self, model: Any) -> int:
        async with self.app.db.reader() as s:
            return int(await s.scalar(select(func.count()).select_from(model)) or 0)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with open_rig(tmp_path) as opened:
        yield opened


@asynccontextmanager
async def open_rig(tmp_path: Path, **extra: str) -> AsyncIterator[Rig]:
    """The app over a SQLite file with the Teams face, served on a local port, its connector
    faked; ``extra``: more settings (``SIGNOFF_POLICY_FILE``...)."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'teams.db'}"
    await upgrade(url)
    async with TokenIssuer() as issuer, FakeBotConnector(accept_token=lambda t: t == DEV_TOKEN) as connector:
        connector.open_conversation(PERSONAL)
        connector.open_conversation(APPROVALS)
        env = {"SIGNOFF_DATABASE_URL": url, **teams_env(issuer=issuer, connector_url=connector.base_url), **extra}
        clock = Clock()
        app = await create_app(load_settings(env), model=FunctionModel(plan), seed=False, clock=clock)
        await load_dataset(app.db, load_dataset_file(dataset_file(tmp_path)), rebase_to=datetime.now(UTC))
        runner = web.AppRunner(make_web_app(app), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        try:
            async with aiohttp.ClientSession() as http:
                yield Rig(
                    app=app,
                    clock=clock,
                    url=f"http://127.0.0.1:{runner.addresses[0][1]}/teams/messages",
                    http=http,
                    issuer=issuer,
                    connector=connector,
                )
        finally:
            await runner.cleanup()
            await app.close()


async def test_a_signed_message_is_stored_before_the_202_and_answered_once_by_the_worker(rig: Rig) -> None:
    status, _ = await rig.post(message(rig.connector.base_url))
    assert status == 202
    assert await rig.count(InboundRow) == 1 and rig.said() == []  # stored; nothing said yet
    await rig.work()
    text, card = rig.said()
    assert text.text == "I have asked for that refund; please confirm it."
    assert card.card is not None and [a["verb"] for a in card.card["actions"]] == ["signoff.confirm", "signoff.decline"]
    assert all(bearer(r) == DEV_TOKEN for r in rig.connector.calls("POST"))
    await rig.work()
    assert len(rig.said()) == 2  # nothing more


async def test_the_same_activity_twice_is_one_turn_and_one_reply(rig: Rig) -> None:
    first = message(rig.connector.base_url, text="hello")
    assert (await rig.post(first))[0] == 202
    assert (await rig.post(first))[0] == 202
    await rig.work()
    assert (await rig.post(first))[0] == 202  # a redelivery after the answer: still nothing new
    await rig.work()
    assert await rig.count(InboundRow) == 1
    assert len(rig.said()) == 2  # the answer and its one confirmation card


@pytest.mark.parametrize("case", ["missing", "rogue", "audience", "expired"])
async def test_a_bad_token_is_401_and_stores_nothing(rig: Rig, case: str) -> None:
    mint: dict[str, Any] = {
        "rogue": {"rogue": True},
        "audience": {"audience": "00000000-0000-4000-8000-000000000000"},
        "expired": {"expires_in": -3600},
    }.get(case, {})
    status, body = await rig.post(message(rig.connector.base_url), signed=case != "missing", **mint)
    assert status == 401 and set(body) == {"error", "message"}
    await rig.work()
    assert await rig.count(InboundRow) == 0 and await rig.count(ProcessedEventRow) == 0
    assert rig.connector.calls() == []


async def test_someone_on_no_list_is_told_so_and_nothing_is_read(rig: Rig) -> None:
    assert (await rig.post(message(rig.connector.base_url, aad=NOBODY)))[0] == 202
    await rig.work()
    (only,) = rig.said()
    assert only.text == say.NOT_LINKED


async def _to_approval(rig: Rig) -> tuple[Any, str]:
    """The customer asks, confirms by card; the approval card appears in the approvals channel."""
    base = rig.connector.base_url
    await rig.post(message(base))
    await rig.work()
    _, card = rig.said()
    conf = card.card["actions"][0]["data"]
    status, answer = await rig.post(
        click(
            base, aad=C7, verb="signoff.confirm", target=conf["id"], version=conf["version"], card_activity_id=card.id
        )
    )
    assert status == 200 and answer["type"] == "application/vnd.microsoft.card.adaptive", answer
    assert "actions" not in answer["value"] and say.WORKING in json.dumps(answer["value"])  # decided in the worker
    await rig.work()
    (shown,) = [a for a in rig.said() if a.id == card.id]
    assert shown.updates == 1 and "actions" not in shown.card  # everyone's copy, not only the clicker's
    (approval_msg,) = rig.said(APPROVALS)
    return approval_msg, conf["id"]


async def test_only_the_customer_confirms_their_card_and_a_replayed_confirm_runs_nothing_twice(rig: Rig) -> None:
    base = rig.connector.base_url
    await rig.post(message(base))
    await rig.work()
    _, card = rig.said()
    data = card.card["actions"][0]["data"]
    for aad in (C8, NOBODY, REP):
        status, answer = await rig.post(
            click(
                base,
                aad=aad,
                verb="signoff.confirm",
                target=data["id"],
                version=data["version"],
                card_activity_id=card.id,
                invoke_id=f"f:invoke-{aad[:8]}",  # each click is its own invoke activity
            )
        )
        assert status == 200 and answer["statusCode"] == 200
        assert "signoff.confirm" not in json.dumps(answer.get("value", {})) or aad == REP
        conf = await rig.app.runtime.s.confirmations.get(data["id"])
        assert conf is not None and conf.status == "pending"
    assert rig.said(APPROVALS) == []
    good = click(
        base, aad=C7, verb="signoff.confirm", target=data["id"], version=data["version"], card_activity_id=card.id
    )
    assert (await rig.post(good))[0] == 200
    assert (await rig.post(good))[0] == 200  # the same invoke again
    await rig.work()
    assert len(rig.said(APPROVALS)) == 1  # one approval, one card
    assert len(await rig.app.runtime.s.approvals.list_approvals(status="pending")) == 1


async def test_a_supervisor_approves_by_card_the_requester_and_others_cannot(rig: Rig) -> None:
    base = rig.connector.base_url
    approval_msg, _ = await _to_approval(rig)
    data = next(a["data"] for a in approval_msg.card["actions"] if a["verb"] == "signoff.approve")
    approve = {
        "verb": "signoff.approve",
        "target": data["id"],
        "version": data["version"],
        "card_activity_id": approval_msg.id,
        "conversation_id": APPROVALS,
    }
    refunds = await rig.count(StoreRefundRow)
    for aad, why in ((C7, say.NOT_ALLOWED), (NOBODY, say.NOT_ALLOWED), (REP, "supervisor")):
        status, answer = await rig.post(click(base, aad=aad, **approve))
        assert status == 200 and why in json.dumps(answer), answer
        a = await rig.app.runtime.s.approvals.get(data["id"])
        assert a is not None and a.status == "pending" and a.version == data["version"]
    if_not_staff = json.dumps((await rig.post(click(base, aad=C7, **approve)))[1])
    assert "O-1042" not in if_not_staff  # a non-staff click is not shown the card's contents
    status, answer = await rig.post(click(base, aad=SUP, invoke_id="f:invoke-sup", **approve))
    assert status == 200 and "actions" not in answer["value"], answer
    assert say.WORKING in json.dumps(answer["value"])  # answered at once; the worker decides
    await rig.work()
    (shown,) = rig.said(APPROVALS)
    assert shown.updates >= 1 and "actions" not in shown.card and "Grace Liu" in json.dumps(shown.card)
    assert "Approved" in json.dumps(shown.card)
    assert await rig.count(StoreRefundRow) == refunds + 1
    assert rig.said()[-1].text == "The refund went through.", [(a.text, a.card is not None) for a in rig.said()]
    # The same approve again (replayed invoke): refused as decided, nothing runs twice.
    status, answer = await rig.post(click(base, aad=SUP, invoke_id="f:invoke-sup", **approve))
    assert status == 200 and "actions" not in json.dumps(answer.get("value", {}))
    await rig.work()
    assert await rig.count(StoreRefundRow) == refunds + 1
    assert [a.text for a in rig.said()].count("The refund went through.") == 1


GROUP = "19:group-chat@thread.v2"
OTHER_TENANT = "77777777-0000-4000-8000-000000000777"
OWN = {"id": "29:rep", "aadObjectId": REP, "userRole": "user", "tenantId": TENANT_ID}


@pytest.mark.parametrize(
    ("kind", "members", "bound"),
    [
        ("groupChat", [OWN, {"id": "29:g", "userRole": "guest", "tenantId": TENANT_ID}], False),
        ("channel", [OWN, {"id": "29:g", "userRole": "Guest", "tenantId": TENANT_ID}], False),
        (
            "groupChat",
            [OWN, {"id": "29:x", "userRole": "user", "tenantId": OTHER_TENANT}],
            False,
        ),
        ("groupChat", [OWN, {"id": "29:n", "userRole": "user"}], False),  # no tenant: cannot tell
        ("groupChat", [], False),  # nobody listed: cannot tell
        ("groupChat", [OWN, {**OWN, "id": "29:sup", "aadObjectId": SUP}], True),
        ("channel", [OWN], True),
    ],
)
async def test_assist_refuses_a_chat_or_channel_with_guests_or_outsiders(
    rig: Rig, kind: str, members: list[dict[str, Any]], bound: bool
) -> None:
    """A rep's `assist C-7` binds a group chat or channel only when everyone in it is a member of
    an allowed tenant (Slack refuses external places the same way); otherwise nothing is bound."""
    rig.connector.open_conversation(GROUP).members = members
    activity = message(rig.connector.base_url, aad=REP, text="assist C-7", conversation_id=GROUP)
    activity["conversation"]["conversationType"] = kind
    assert (await rig.post(activity))[0] == 202
    await rig.work()
    (answer,) = [a.text for a in rig.said(GROUP)]
    assert (answer == say.ASSIST_EXTERNAL) is not bound, answer
    assert (await rig.app.runtime.s.bindings.get(thread_ref(GROUP)) is not None) is bound
    assert rig.connector.calls("GET"), "the members were asked for"


async def test_assist_refuses_when_the_members_cannot_be_read(rig: Rig) -> None:
    rig.connector.open_conversation(GROUP).members = [OWN]
    rig.connector.fail_next(20, status=403, retry_after=None, method="GET")
    activity = message(rig.connector.base_url, aad=REP, text="assist C-7", conversation_id=GROUP)
    activity["conversation"]["conversationType"] = "groupChat"
    await rig.post(activity)
    await rig.work()
    assert [a.text for a in rig.said(GROUP)] == [say.ASSIST_EXTERNAL]
    assert await rig.app.runtime.s.bindings.get(thread_ref(GROUP)) is None


async def test_assist_in_a_personal_chat_binds_without_asking_for_members(rig: Rig) -> None:
    await rig.post(message(rig.connector.base_url, aad=REP, text="assist C-7"))
    await rig.work()
    assert "now works on account C-7" in rig.said()[-1].text
    assert await rig.app.runtime.s.bindings.get(thread_ref(PERSONAL)) is not None
    assert not rig.connector.calls("GET")


async def test_assist_in_a_channel_thread_asks_for_the_channels_members(rig: Rig) -> None:
    channel, thread = "19:chan@thread.tacv2", "19:chan@thread.tacv2;messageid=1700000000000"
    rig.connector.open_conversation(channel).members = [OWN, {"id": "29:g", "userRole": "guest", "tenantId": TENANT_ID}]
    rig.connector.open_conversation(thread)
    activity = message(rig.connector.base_url, aad=REP, text="assist C-7", conversation_id=thread)
    activity["conversation"]["conversationType"] = "channel"
    await rig.post(activity)
    await rig.work()
    assert [a.text for a in rig.said(thread)] == [say.ASSIST_EXTERNAL]
    (asked,) = rig.connector.calls("GET")
    assert asked.path == f"/v3/conversations/{channel}/members"
