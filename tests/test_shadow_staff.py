"""Shadow as staff see it (C16): a proposal the gate records in shadow is shown to staff as a
suggestion built from its exact arguments, never executed, and the person the agent spoke
with is never told it was done — even when the model's words claim it."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

from sqlalchemy import select

from agent.claims import claimed_actions
from agent.llm.base import ModelRequest
from agent.llm.testing import FunctionModel, Reply, tool_use_block
from agent.notify import ShadowNotice
from agent.views import shadow_view
from agent.wording import SHADOW_CUSTOMER_NOTICE, SHADOW_LABEL
from bot.slack import blocks as slack
from bot.teams import cards as teams
from storage.db import Database
from storage.models import RunRow
from storage.records import Conversation
from tests.gatekeeper_kit import C7, EVIDENCE, ledger_rows, make_env, policy_with, refund, store_state
from tools.catalogue import build_registry

SHADOW = policy_with(rollout={"channels": {"api": {"customer": "shadow"}}}, ceilings={"customer": {"USD": 100000}})
#: What a careless model says after a recorded refund.
CLAIM = "Done! I've refunded 20.00 USD on O-1042; your refund has been issued."


def _claiming_model() -> FunctionModel:
    """Searches the refund policy, proposes a $20 refund on O-1042, then claims it was done."""

    async def fn(request: ModelRequest) -> Reply:
        called = [b.get("name") for m in request.messages if m.role == "assistant" for b in m.content]
        if "search_knowledge" not in called:
            return [tool_use_block("search_knowledge", {"query": "refund damaged"})]
        if "issue_refund" not in called:
            return [tool_use_block("issue_refund", refund(amount=2000, evidence=(EVIDENCE,)))]
        return CLAIM

    return FunctionModel(fn)


async def test_a_shadow_turn_never_tells_the_customer_it_was_done_and_hands_them_to_a_person(db: Database) -> None:
    env = await make_env(db, model=_claiming_model(), policy=SHADOW)
    before = await store_state(db)
    result = await env.runtime.chat(principal=C7, channel="api", message="O-1042 arrived damaged, refund $20 please")
    registry = env.services.registry
    assert claimed_actions(CLAIM, registry) == {"issue_refund"}  # the model's words did claim it
    assert claimed_actions(result.reply, registry) == set(), result.reply
    assert "refunded" not in result.reply.lower() and result.reply.endswith(SHADOW_CUSTOMER_NOTICE)
    assert "not been carried out" in result.reply and "Refund 20.00 USD" in result.reply
    # nothing moved in the shop, nothing in the ledger
    assert await store_state(db) == before and await ledger_rows(db) == []
    # staff were shown the suggestion, from the exact arguments
    (notice,) = env.notifier.of("shadow_recorded")
    assert notice.tool == "issue_refund" and notice.arguments["amount_minor"] == 2000
    assert notice.would_need == "execute" and notice.requester == "customer:C-7"
    # a person has the conversation (a hand-off), but the run is not counted as escalated
    handoff = await env.services.handoffs.active_for(result.conversation_id)
    assert handoff is not None and handoff.state == "waiting" and handoff.reason == "shadow_proposal"
    (escalation,) = env.notifier.of("escalated")
    assert escalation.handoff_id == handoff.id
    async with db.reader() as s:
        run = (await s.execute(select(RunRow).where(RunRow.conversation_id == result.conversation_id))).scalar_one()
    assert run.status != "escalated"


async def test_an_honest_answer_is_kept_and_told_a_person_follows_up(db: Database) -> None:
    honest = "A colleague will look at the refund of 20.00 USD on O-1042."

    async def fn(request: ModelRequest) -> Reply:
        called = [b.get("name") for m in request.messages if m.role == "assistant" for b in m.content]
        if "search_knowledge" not in called:
            return [tool_use_block("search_knowledge", {"query": "refund damaged"})]
        wanted = 2 if "again" in json.dumps(request.messages[-1].content) else 1
        if called.count("issue_refund") < wanted:
            return [tool_use_block("issue_refund", refund(amount=2000 if wanted == 1 else 1000))]
        return honest

    env = await make_env(db, model=FunctionModel(fn), policy=SHADOW)
    result = await env.runtime.chat(principal=C7, channel="api", message="O-1042 arrived damaged, refund $20 please")
    assert result.reply == f"{honest}\n\n{SHADOW_CUSTOMER_NOTICE}"
    # a second shadow proposal while the hand-off waits opens no second one
    again = await env.runtime.chat(
        principal=C7, channel="api", message="and refund $20 again", conversation_id=result.conversation_id
    )
    assert again.reply.endswith(SHADOW_CUSTOMER_NOTICE)
    assert len(env.notifier.of("shadow_recorded")) == 2
    assert len(env.notifier.of("escalated")) == 1


def _notice(**changes: object) -> ShadowNotice:
    now = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
    conv = Conversation(
        id="conv-1", channel="slack", principal_kind="rep", principal_id="S-1", customer_id="C-17",
        external_ref="slack:T0TEAM:C0SUPPORT:1760000000.000001", status="open", loaded_groups=(), model="m",
        prompt_version="p", next_seq=1, meta={}, created_at=now,
    )  # fmt: skip
    notice = ShadowNotice(
        conversation=conv,
        proposal_id="prop_1",
        tool="issue_refund",
        arguments={"order_id": "O-1040", "amount_minor": 4500, "currency": "USD", "reason_code": "damaged"},
        summary="Refund 45.00 USD on O-1040 (damaged)",
        would_need="approval",
        requester="rep:S-1",
        customer_id="C-17",
        policy_version="2026.12.9",
        created_at=now,
    )
    return dataclasses.replace(notice, **changes)  # type: ignore[arg-type]


def test_slack_and_teams_render_the_same_shadow_card_with_nothing_to_click() -> None:
    tool = build_registry().get("issue_refund")
    view = shadow_view(_notice(), tool=tool, names={"rep:S-1": "Priya"})
    assert view.amount == "45.00 USD" and view.requester.shown == "Priya"
    assert "approval" in view.would_need
    slack_card = slack.shadow_card(view)
    teams_card = teams.shadow_card(view)
    slack_text = json.dumps(slack_card.blocks, ensure_ascii=False)
    teams_text = json.dumps(teams_card, ensure_ascii=False)
    for text in (slack_text + slack_card.text, teams_text):
        assert SHADOW_LABEL in text
        for shown in ("Refund 45.00 USD on O-1040 (damaged)", "45.00 USD", "C-17", "conv-1", "2026.12.9", "O-1040"):
            assert shown in text, (shown, text)
    assert not [b for b in slack_card.blocks if b["type"] == "actions"]
    assert "actions" not in teams_card
    thread = slack.shadow_card(view, in_thread=True)
    assert SHADOW_LABEL in thread.text and not [b for b in thread.blocks if b["type"] == "actions"]


def test_the_card_shows_the_exact_arguments_not_the_model_s_words() -> None:
    """A value the customer typed is shown as a value (escaped), never as live markup."""
    tool = build_registry().get("issue_refund")
    args = {"order_id": "O-1040", "amount_minor": 4500, "currency": "USD", "reason_code": "<!channel> *now*"}
    view = shadow_view(_notice(arguments=args), tool=tool)
    slack_text = json.dumps(slack.shadow_card(view).blocks)
    assert "<!channel>" not in slack_text and "&lt;!channel&gt;" in slack_text
    teams_text = json.dumps(teams.shadow_card(view))
    assert "<!channel>" in teams_text  # a TextRun: never parsed as markup
