"""The Slack face end to end: a real ``signoff serve``, signed Slack requests, a recording Slack API.

The rep binds a thread to C-7, asks for a refund above the rep's ceiling, confirms it
with the card's button; the approval card appears in the approvals channel; a rep's
Approve is refused; the supervisor's Approve executes it once, the card is updated in
place and the follow-up lands in the original thread. Both with streaming and without.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.slack_api import FakeSlackApi, SeenMessage
from tests.slack_kit import (
    APPROVALS,
    DEMO,
    GRACE,
    PRIYA,
    SIGNOFF,
    SUPPORT,
    TOMAS,
    Serve,
    button_value,
    env_for,
    low_rep_ceiling,
    mention,
    message,
    next_ts,
    planner,
    run_cli,
)

pytestmark = pytest.mark.skipif(not SIGNOFF.exists(), reason="the signoff console script is not installed")


def replies(slack: FakeSlackApi, thread_ts: str, channel: str = SUPPORT) -> list[SeenMessage]:
    return [m for m in slack.messages_in(channel, thread_ts) if m.user == slack.bot_user_id]


@pytest_asyncio.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[Serve, FakeSlackApi, Path, dict[str, str]]]:
    async with FakeAnthropicAPI(planner) as model, FakeSlackApi() as slack:
        db = tmp_path / "slack.db"
        env = env_for(db, anthropic=model.base_url, slack=slack.base_url, policy=low_rep_ceiling(tmp_path / "p.yaml"))
        assert (await run_cli(env, "db", "upgrade"))[0] == 0
        assert (await run_cli(env, "store", "load", str(DEMO), "--rebase-to-now"))[0] == 0
        yield Serve(env), slack, db, env


@pytest.mark.parametrize("streaming", ["true", "false"])
async def test_rep_assist_refund_approval_end_to_end(
    world: tuple[Serve, FakeSlackApi, Path, dict[str, str]], streaming: str
) -> None:
    server, slack, db, env = world
    server.env["SIGNOFF_SLACK_STREAMING"] = streaming
    before = _refunds(db)
    await server.start()
    try:
        root = next_ts()
        assert await server.event(mention(PRIYA, "assist C-7", ts=root)) == 200
        bound = await slack.until(lambda: replies(slack, root))
        assert "C-7" in bound[0].visible and "Maya" in bound[0].visible

        assert (
            await server.event(message(PRIYA, "Please refund O-1042 in full, it arrived damaged.", thread_ts=root))
            == 200
        )
        card = await slack.until(
            lambda: next((m for m in replies(slack, root) if button_value(m.blocks, "signoff.confirm")), None)
        )
        assert "189.00" in card.visible and "O-1042" in card.visible
        if streaming == "true":
            steps = [t.get("title", "") for m in replies(slack, root) for t in m.tasks]
            assert slack.calls("chat.startStream") and "Searched the help centre" in steps, steps
            assert "Load tools" not in steps
            assert any("waiting for your confirmation" in t for t in steps)
        else:
            assert not slack.calls("chat.startStream")

        value = button_value(card.blocks, "signoff.confirm")
        assert (
            await server.click(PRIYA, "signoff.confirm", value, channel=SUPPORT, message_ts=card.ts, thread_ts=root)
            == 200
        )
        approval = await slack.until(
            lambda: next((m for m in slack.messages_in(APPROVALS) if button_value(m.blocks, "signoff.approve")), None)
        )
        assert "189.00" in approval.visible and "O-1042" in approval.visible
        assert "Requested by" in approval.visible and f"<@{PRIYA}>" in approval.visible

        approve = button_value(approval.blocks, "signoff.approve")
        assert await server.click(TOMAS, "signoff.approve", approve, channel=APPROVALS, message_ts=approval.ts) == 200
        refusal = await slack.until(lambda: [e for e in slack.ephemeral if e["user"] == TOMAS])
        assert "supervisor" in refusal[0]["text"].lower()
        assert _refunds(db) == before

        assert await server.click(GRACE, "signoff.approve", approve, channel=APPROVALS, message_ts=approval.ts) == 200
        updated = await slack.until(
            lambda: next((m for m in slack.messages_in(APPROVALS) if m.ts == approval.ts and m.edited), None)
        )
        assert button_value(updated.blocks, "signoff.approve") is None and "Approved" in updated.visible
        follow = await slack.until(lambda: next((m for m in replies(slack, root) if "is issued" in m.visible), None))
        assert "189.00" in follow.visible

        # The same click again (a replay, re-signed): nothing executes twice.
        assert await server.click(GRACE, "signoff.approve", approve, channel=APPROVALS, message_ts=approval.ts) == 200
        await asyncio.sleep(1.5)
        assert _refunds(db) == before + 1
        assert len([m for m in replies(slack, root) if "is issued" in m.visible]) == 1
    finally:
        await server.stop()
    code, out = await run_cli(env, "audit", "verify")
    assert code == 0, out
    assert _ledger_executions(db) == 1


def _refunds(db: Path) -> int:
    with sqlite3.connect(db) as c:
        return int(c.execute("SELECT count(*) FROM store_refunds").fetchone()[0])


def _ledger_executions(db: Path) -> int:
    with sqlite3.connect(db) as c:
        return int(c.execute("SELECT count(*) FROM tool_executions WHERE tool = 'issue_refund'").fetchone()[0])
