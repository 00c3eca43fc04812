"""The Slack face in process: the composition root's app, its aiohttp routes, the worker run by
hand, the recording Slack API, and the scripted demo planner as the model.

Who may click what (two supervisors at once, another workspace, a rep), escalations with
the trace, feedback, App Home, the slash command, and what is ignored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import func, select

from agent.audit_budget import PER_WINDOW
from bot.app import App, create_app
from bot.cli.slack_demo import demo_database
from bot.server import make_web_app
from bot.settings import load_settings
from sandbox.models import StoreRefundRow
from storage.models import InboundRow
from tests.fakes.slack_api import BOT_USER_ID, FakeSlackApi, SeenMessage
from tests.slack_kit import (
    GRACE,
    PRIYA,
    SIGNING_SECRET,
    SUPPORT,
    TOMAS,
    button_value,
    click_body,
    event_body,
    mention,
    message,
    next_ts,
    signed_headers,
)

APPROVALS, ESCALATIONS = "C0APPROVALS", "C0ESCALATE"
OWEN = "U04OWEN"  # the second supervisor


@dataclass
class World:
    app: App
    client: TestClient
    slack: FakeSlackApi

    async def post(self, body: str, *, form: bool = False) -> int:
        kind = "application/x-www-form-urlencoded" if form else "application/json"
        r = await self.client.post("/slack/events", data=body, headers={"Content-Type": kind, **signed_headers(body)})
        return r.status

    async def event(self, ev: dict[str, Any], **kw: Any) -> int:
        return await self.post(event_body(ev, **kw))

    async def click(self, *args: Any, **kw: Any) -> int:
        return await self.post(click_body(*args, **kw), form=True)

    async def drain(self) -> None:
        """Run the worker until nothing is due (the turns, the resumes)."""
        worker = self.app.worker()
        idle = 0
        while idle < 2:
            idle = idle + 1 if await worker.run_once() == 0 else 0

    def bot(self, channel: str, thread: str | None = None) -> list[SeenMessage]:
        return [m for m in self.slack.messages_in(channel, thread) if m.user == BOT_USER_ID]

    async def count(self, row: Any) -> int:
        async with self.app.db.reader() as s:
            return int((await s.execute(select(func.count()).select_from(row))).scalar_one())


@pytest_asyncio.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    url = await demo_database(tmp_path / "face.db")
    async with FakeSlackApi() as slack:
        settings = load_settings(
            {
                "SIGNOFF_DATABASE_URL": url,
                "SIGNOFF_LLM_PROVIDER": "scripted",
                "SLACK_BOT_TOKEN": slack.token,
                "SLACK_SIGNING_SECRET": SIGNING_SECRET,
                "SIGNOFF_SLACK_API_URL": slack.base_url,
                "SIGNOFF_APPROVALS_CHANNEL": APPROVALS,
                "SIGNOFF_ESCALATION_CHANNEL": ESCALATIONS,
                "SIGNOFF_SLACK_STREAMING": "false",
            }
        )
        app = await create_app(settings, seed=False)
        async with TestClient(TestServer(make_web_app(app))) as client:
            yield World(app=app, client=client, slack=slack)
        await app.close()


async def _assist(w: World, customer: str, ask: str) -> str:
    root = next_ts()
    assert await w.event(mention(PRIYA, f"assist {customer}", ts=root)) == 200
    await w.drain()
    assert await w.event(message(PRIYA, ask, thread_ts=root)) == 200
    await w.drain()
    return root


async def _approval_card(w: World) -> SeenMessage:
    root = await _assist(w, "C-17", "Please refund O-1040, it arrived damaged.")
    card = next(m for m in w.bot(SUPPORT, root) if button_value(m.blocks, "signoff.confirm"))
    value = button_value(card.blocks, "signoff.confirm")
    assert await w.click(PRIYA, "signoff.confirm", value, channel=SUPPORT, message_ts=card.ts, thread_ts=root) == 200
    await w.drain()
    return next(m for m in w.bot(APPROVALS) if button_value(m.blocks, "signoff.approve"))


async def test_two_supervisors_approving_at_once_execute_it_once(world: World) -> None:
    card = await _approval_card(world)
    value = button_value(card.blocks, "signoff.approve")
    before = await world.count(StoreRefundRow)
    assert await world.click(GRACE, "signoff.approve", value, channel=APPROVALS, message_ts=card.ts) == 200
    assert await world.click(OWEN, "signoff.approve", value, channel=APPROVALS, message_ts=card.ts) == 200
    await world.drain()
    assert await world.count(StoreRefundRow) == before + 1
    late = [e for e in world.slack.ephemeral if e["user"] == OWEN]
    assert len(late) == 1 and "changed" in late[0]["text"]
    (updated,) = [m for m in world.bot(APPROVALS) if m.ts == card.ts]
    assert "Approved by <@U03GRACE>" in updated.visible and button_value(updated.blocks, "signoff.approve") is None


async def test_a_click_from_another_workspace_or_by_a_rep_changes_nothing_and_is_audited(world: World) -> None:
    card = await _approval_card(world)
    value = button_value(card.blocks, "signoff.approve")
    before = await world.count(StoreRefundRow)
    # Grace's user id, but from another organisation's workspace (Slack Connect): never staff.
    assert (
        await world.click(GRACE, "signoff.approve", value, channel=APPROVALS, message_ts=card.ts, team="T0OTHER") == 200
    )
    assert await world.click(TOMAS, "signoff.approve", value, channel=APPROVALS, message_ts=card.ts) == 200
    await world.drain()
    assert await world.count(StoreRefundRow) == before
    refused = await world.app.runtime.s.audit.list(kind="click.refused", limit=10)
    assert {(e.data["user"], e.data["team"], e.data["reason"]) for e in refused} == {
        (GRACE, "T0OTHER", "forbidden"),
        (TOMAS, "T0SIGNOFF", "forbidden"),
    }
    approval = (await world.app.runtime.s.approvals.list_approvals(status="pending"))[0]
    assert approval.status == "pending" and approval.version == 1


async def test_a_forged_button_value_is_refused(world: World) -> None:
    card = await _approval_card(world)
    forged = '{"id":"apr_nope","version":1}'
    assert await world.click(GRACE, "signoff.approve", forged, channel=APPROVALS, message_ts=card.ts) == 200
    assert await world.click(GRACE, "signoff.approve", "not json", channel=APPROVALS, message_ts=card.ts) == 200
    await world.drain()
    assert len([e for e in world.slack.ephemeral if e["user"] == GRACE]) == 2
    assert (await world.app.runtime.s.approvals.list_approvals(status="pending"))[0].version == 1


async def test_an_escalation_reaches_the_escalation_channel_with_the_trace(world: World) -> None:
    await _assist(world, "C-6", "Please refund O-1005, it arrived damaged.")  # outside the refund window
    (head,) = world.bot(ESCALATIONS)
    assert "Handed to a person" in head.visible and "C-6" in head.visible
    trace = " ".join(m.visible for m in world.bot(ESCALATIONS, head.ts))
    assert "issue_refund" in trace and "refused" in trace


async def test_feedback_is_audited_and_counted(world: World) -> None:
    root = await _assist(world, "C-7", "Where is O-1042?")
    answer = world.bot(SUPPORT, root)[-1]
    value = button_value(answer.blocks, "signoff.feedback")
    assert value is None  # feedback buttons sit inside the context_actions element's buttons
    raw = next(
        e["positive_button"]["value"]
        for b in answer.blocks
        if b.get("type") == "context_actions"
        for e in b["elements"]
    )
    assert (
        await world.click(PRIYA, "signoff.feedback", raw, channel=SUPPORT, message_ts=answer.ts, thread_ts=root) == 200
    )
    await world.drain()
    (event,) = await world.app.runtime.s.audit.list(kind="feedback", limit=5)
    assert event.data["vote"] == "positive" and event.data["slack_user"] == PRIYA
    assert (
        world.app.metrics is not None
        and b'signoff_feedback_total{channel="slack",vote="positive"} 1.0' in world.app.metrics.render()
    )


async def test_app_home_shows_a_supervisor_the_queue_and_is_republished_when_it_moves(world: World) -> None:
    assert await world.event({"type": "app_home_opened", "user": GRACE, "tab": "home", "channel": "D0GRACE"}) == 200
    await world.drain()
    assert "Nothing is waiting" in str(world.slack.home[GRACE])
    await _approval_card(world)
    assert "Refund 398.00 USD on O-1040" in str(world.slack.home[GRACE])


async def test_the_slash_command_opens_an_assist_thread(world: World) -> None:
    body = (
        "&".join(
            f"{k}={v}"
            for k, v in {
                "command": "/signoff",
                "text": "assist C-7",
                "user_id": PRIYA,
                "team_id": "T0SIGNOFF",
                "channel_id": SUPPORT,
                "trigger_id": "trig.1",
            }.items()
        )
        .replace("/", "%2F")
        .replace(" ", "+")
    )
    assert await world.post(body, form=True) == 200
    await world.drain()
    (opener,) = world.bot(SUPPORT)
    assert "Assist thread for Maya Chen (C-7)" in opener.visible
    assert "bound to account Maya Chen (C-7)" in world.bot(SUPPORT, opener.ts)[0].visible


async def test_bots_edits_and_bystanders_in_an_assist_thread_are_ignored(world: World) -> None:
    root = await _assist(world, "C-7", "Where is O-1042?")
    replies = len(world.bot(SUPPORT, root))
    inbound = await world.count(InboundRow)
    bot = {**message("U0OTHERBOT", "beep", thread_ts=root), "bot_id": "B0OTHER"}
    edit = {**message(PRIYA, "edited", thread_ts=root), "subtype": "message_changed"}
    for ev in (bot, edit):
        assert await world.event(ev) == 200
    assert await world.count(InboundRow) == inbound
    assert await world.event(message("U07MAYA", "Where is O-1043?", thread_ts=root)) == 200  # not staff
    await world.drain()
    assert len(world.bot(SUPPORT, root)) == replies


async def test_the_oauth_install_serves_another_workspace_with_its_own_token(tmp_path: Path) -> None:
    url = await demo_database(tmp_path / "oauth.db")
    async with FakeSlackApi() as slack:
        settings = load_settings(
            {
                "SIGNOFF_DATABASE_URL": url,
                "SIGNOFF_LLM_PROVIDER": "scripted",
                "SLACK_CLIENT_ID": "1234.5678",
                "SLACK_CLIENT_SECRET": "client-secret",
                "SIGNOFF_SECRET_KEY": "a-test-key-of-at-least-32-characters",
                "SLACK_SIGNING_SECRET": SIGNING_SECRET,
                "SIGNOFF_SLACK_API_URL": slack.base_url,
                "SIGNOFF_SLACK_STREAMING": "false",
            }
        )
        app = await create_app(settings, seed=False)
        async with TestClient(TestServer(make_web_app(app))) as client:
            page = await client.get("/slack/install")
            assert page.status == 200
            html = await page.text()
            state = html.split("state=")[1].split("&")[0].split('"')[0]
            assert "client_id=1234.5678" in html
            slack.grant("code-1", team_id="T0OTHERWS", token="xoxb-other-workspace")
            # The browser sends back the state cookie (Secure: the test client is on http, so by hand).
            cookie = {"Cookie": page.headers["Set-Cookie"].split(";")[0]}
            done = await client.get(f"/slack/oauth_redirect?code=code-1&state={state}", headers=cookie)
            assert done.status == 200, await done.text()
            again = await client.get(f"/slack/oauth_redirect?code=code-1&state={state}", headers=cookie)
            assert again.status != 200  # the state is one-time
            w = World(app=app, client=client, slack=slack)
            ts = next_ts()
            ev = {**mention("U0SOMEONE", "hello", channel="C0OTHER", ts=ts, team="T0OTHERWS")}
            body = event_body(ev).replace('"team_id": "T0SIGNOFF"', '"team_id": "T0OTHERWS"')
            body = body.replace(
                '"authorizations": [{"team_id": "T0SIGNOFF"', '"authorizations": [{"team_id": "T0OTHERWS"'
            )
            assert await w.post(body) == 200
            await w.drain()
            (posted,) = [c for c in slack.calls("chat.postMessage") if c.args.get("channel") == "C0OTHER"]
            assert posted.headers["authorization"] == "Bearer xoxb-other-workspace"
        await app.close()


async def test_reject_opens_a_modal_and_its_comment_rejects_the_approval(world: World) -> None:
    import json
    import urllib.parse

    card = await _approval_card(world)
    value = button_value(card.blocks, "signoff.reject")
    assert await world.click(GRACE, "signoff.reject", value, channel=APPROVALS, message_ts=card.ts) == 200
    (opened,) = world.slack.calls("views.open")
    view = opened.args["view"] if isinstance(opened.args["view"], dict) else json.loads(opened.args["view"])
    assert view["callback_id"] == "signoff.reject_modal"

    def submission(comment: str, view_id: str) -> str:
        payload = {
            "type": "view_submission",
            "team": {"id": "T0SIGNOFF"},
            "user": {"id": GRACE, "team_id": "T0SIGNOFF"},
            "view": {
                "id": view_id,
                "type": "modal",
                "hash": "h1",
                "callback_id": "signoff.reject_modal",
                "private_metadata": view["private_metadata"],
                "state": {
                    "values": {
                        "signoff.reject_modal.comment": {
                            "signoff.reject_modal.comment_input": {"type": "plain_text_input", "value": comment}
                        }
                    }
                },
            },
        }
        return urllib.parse.urlencode({"payload": json.dumps(payload)})

    empty = await world.client.post(
        "/slack/events",
        data=submission("  ", "V0EMPTY"),
        headers={"Content-Type": "application/x-www-form-urlencoded", **signed_headers(submission("  ", "V0EMPTY"))},
    )
    assert empty.status == 200 and "errors" in await empty.text()
    assert await world.post(submission("The photos do not match the order.", "V0REJECT"), form=True) == 200
    await world.drain()
    (rejected,) = await world.app.runtime.s.approvals.list_approvals(status="rejected")
    assert rejected.comment == "The photos do not match the order." and rejected.decider == "supervisor:S-3"
    (updated,) = [m for m in world.bot(APPROVALS) if m.ts == card.ts]
    assert "Rejected" in updated.visible and button_value(updated.blocks, "signoff.reject") is None


async def test_feedback_and_refused_clicks_are_audited_within_a_per_person_budget(world: World) -> None:
    """Clicks that change nothing used to add an audit row each, without a bound. Past the
    person's budget a click is still answered, not audited again, and counted as suppressed;
    another person has a budget of their own."""
    root = await _assist(world, "C-7", "Where is O-1042?")
    answer = world.bot(SUPPORT, root)[-1]
    raw = next(
        e["positive_button"]["value"]
        for b in answer.blocks
        if b.get("type") == "context_actions"
        for e in b["elements"]
    )
    clicks = PER_WINDOW + 5
    for _ in range(clicks):
        assert await world.click(PRIYA, "signoff.feedback", raw, channel=SUPPORT, message_ts=answer.ts) == 200
        assert await world.click(TOMAS, "signoff.approve", "not-a-value", channel=APPROVALS, message_ts="1.2") == 200
    assert await world.click(GRACE, "signoff.approve", "not-a-value", channel=APPROVALS, message_ts="1.2") == 200
    await world.drain()
    audit = world.app.runtime.s.audit
    assert len(await audit.list(kind="feedback", limit=100)) == PER_WINDOW
    refused = await audit.list(kind="click.refused", limit=100)
    assert sorted(e.data["user"] for e in refused) == sorted([TOMAS] * PER_WINDOW + [GRACE])
    assert len([e for e in world.slack.ephemeral if e["user"] == TOMAS]) == clicks  # every click answered
    assert len([e for e in world.slack.ephemeral if e["user"] == PRIYA]) == clicks
    metrics = world.app.metrics.render() if world.app.metrics else b""
    assert b'signoff_audit_suppressed_total{channel="slack",kind="feedback"} 5.0' in metrics
    assert b'signoff_audit_suppressed_total{channel="slack",kind="click.refused"} 5.0' in metrics
    assert (await audit.verify()).ok
