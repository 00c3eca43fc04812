"""Shadow as staff see it, through the Slack app in process (the recording Slack Web API of
``sandbox/slack_web``, the worker run by hand, the scripted demo planner as the model): a rep's
refund in an assist thread is a suggestion in that thread and a card marked "shadow: not
executed" in the approvals channel; nothing moves in the shop; a Slack customer is told a
person follows up; a repeated notice posts nothing twice."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import func, select

from agent.claims import claimed_actions
from agent.notify import ShadowNotice
from agent.wording import SHADOW_CUSTOMER_NOTICE, SHADOW_LABEL
from bot.app import create_app
from bot.cli.slack_demo import demo_database
from bot.server import make_web_app
from bot.settings import load_settings
from sandbox.models import StoreRefundRow
from storage.models import ProposalRow, ToolExecutionRow
from tests.fakes.slack_api import FakeSlackApi
from tests.slack_kit import MAYA, POLICY, PRIYA, SIGNING_SECRET, SUPPORT, button_value, mention, message, next_ts
from tests.test_slack_face import APPROVALS, ESCALATIONS, World

ASK = "Please refund O-1040, it arrived damaged."


def _shadow_policy(path: Path) -> Path:
    """The bundled policy with every Slack principal kind in shadow."""
    text = POLICY.read_text()
    line = "slack: {customer: full, rep: assist, supervisor: assist}"
    assert line in text
    text = text.replace(line, "slack: {customer: shadow, rep: shadow, supervisor: shadow}")
    path.write_text(text.replace('version: "2026.12.3"', 'version: "2030.1.1"'))
    return path


@pytest_asyncio.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    url = await demo_database(tmp_path / "shadow.db")
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
                "SIGNOFF_POLICY_FILE": str(_shadow_policy(tmp_path / "policy.yaml")),
            }
        )
        app = await create_app(settings, seed=False)
        async with TestClient(TestServer(make_web_app(app))) as client:
            yield World(app=app, client=client, slack=slack)
        await app.close()


async def _executed(w: World) -> tuple[int, int, int]:
    """(refunds in the shop, ledger entries, refunds the gate let execute)."""
    executed = (
        select(func.count())
        .select_from(ProposalRow)
        .where(ProposalRow.decision == "execute", ProposalRow.tool == "issue_refund")
    )
    return await w.count(StoreRefundRow), await w.count(ToolExecutionRow), int(await _scalar(w, executed))


async def _scalar(w: World, stmt: object) -> object:
    async with w.app.db.reader() as s:
        return (await s.execute(stmt)).scalar_one()  # type: ignore[call-overload]


async def test_a_shadow_refund_in_an_assist_thread_is_a_suggestion_there_and_a_card_for_supervisors(
    world: World,
) -> None:
    before = await _executed(world)
    root = next_ts()
    assert await world.event(mention(PRIYA, "assist C-17", ts=root)) == 200
    await world.drain()
    ask = message(PRIYA, ASK, thread_ts=root)
    assert await world.event(ask, event_id="EvShadowAsk") == 200
    await world.drain()
    thread = world.bot(SUPPORT, root)
    # in the rep's thread: the suggestion, from the exact arguments, with nothing to click
    (suggestion,) = [m for m in thread if SHADOW_LABEL in m.visible]
    assert "Refund 398.00 USD on O-1040" in suggestion.visible
    assert not button_value(suggestion.blocks, "signoff.confirm")
    # the agent's answer there never says it was done
    answer = thread[-1].visible
    assert claimed_actions(answer, world.app.runtime.s.registry) == set(), answer
    assert "nothing was carried out" in answer.lower()
    # in the approvals channel: the card marked "shadow: not executed", no Approve/Reject
    (card,) = world.bot(APPROVALS)
    assert SHADOW_LABEL in card.visible and "Refund 398.00 USD on O-1040" in card.visible
    assert "C-17" in card.visible and "398.00 USD" in card.visible
    assert not [b for b in card.blocks if b.get("type") == "actions"]
    # nothing moved: no refund in the shop, no ledger entry, no executed proposal
    assert await _executed(world) == before
    (row,) = await _rows(world, select(ProposalRow).where(ProposalRow.tool == "issue_refund"))
    assert row.decision == "record"
    # Slack delivering the event again (a retry) runs nothing twice
    assert await world.event(ask, event_id="EvShadowAsk") == 200
    await world.drain()
    assert len(world.bot(APPROVALS)) == 1 and len(world.bot(SUPPORT, root)) == len(thread)
    # the notice again (a crashed turn's proposal judged again on repair) posts nothing twice
    notice = ShadowNotice(
        conversation=await world.app.runtime.s.conversations.get(row.conversation_id),  # type: ignore[arg-type]
        proposal_id=row.id,
        tool=row.tool,
        arguments=row.arguments,
        summary="Refund 398.00 USD on O-1040",
        would_need="approval",
        requester=row.principal,
        customer_id="C-17",
        policy_version="2030.1.1",
        created_at=row.created_at,
    )
    await world.app.runtime.s.notifier.shadow_recorded(notice)
    assert len(world.bot(APPROVALS)) == 1
    assert len([m for m in world.bot(SUPPORT, root) if SHADOW_LABEL in m.visible]) == 1


async def _rows(w: World, stmt: object) -> list[ProposalRow]:
    async with w.app.db.reader() as s:
        return list((await s.execute(stmt)).scalars())  # type: ignore[call-overload]


async def test_a_slack_customer_in_shadow_hears_a_person_will_follow_up_never_that_it_was_refunded(
    world: World,
) -> None:
    before = await _executed(world)
    dm = "D0MAYA"
    ts = next_ts()
    assert await world.event(message(MAYA, "Please refund O-1042, it arrived damaged.", channel=dm, ts=ts,
                                     channel_type="im")) == 200  # fmt: skip
    await world.drain()
    said = " ".join(m.visible for m in world.bot(dm) + world.bot(dm, ts))
    assert SHADOW_CUSTOMER_NOTICE in said, said
    assert claimed_actions(said, world.app.runtime.s.registry) == set() and "refunded" not in said.lower()
    assert SHADOW_LABEL not in said  # the staff card never goes to the customer
    (card,) = world.bot(APPROVALS)
    assert SHADOW_LABEL in card.visible and "O-1042" in card.visible and "C-7" in card.visible
    # a person has it: the hand-off's post in the escalation channel, with Take over
    (post,) = world.bot(ESCALATIONS)
    assert button_value(post.blocks, "signoff.takeover")
    assert await _executed(world) == before
