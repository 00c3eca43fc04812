"""The confirmation gate (C6, S2): the acting principal confirms exact arguments; nothing
else (another person, other arguments, a declined or superseded request, a replay) moves money."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent.errors import DecisionError
from agent.llm.base import ModelRequest
from agent.llm.testing import FunctionModel, tool_use_block
from storage.db import Database
from tests.support import C7, C8, REP, SUP_A, seeded
from tests.test_loop_support import SEARCH, SMALL_REFUND, assert_history_valid, ledger_rows, store_refunds

OTHER_REFUND = {**SMALL_REFUND, "amount_minor": 1000}


def planner(*script: Any) -> FunctionModel:
    """Answers from ``script`` in order, then with a short text forever."""
    queue = list(script)

    def answer(_request: ModelRequest) -> Any:
        return queue.pop(0) if queue else "Noted."

    return FunctionModel(answer)


def proposing(*args_list: dict[str, Any]) -> FunctionModel:
    """Search the policy, then propose each refund in turn (each its own model step)."""
    steps: list[Any] = [[tool_use_block("search_knowledge", SEARCH)]]
    for args in args_list:
        steps.append([tool_use_block("issue_refund", args)])
    steps.append("Please confirm.")
    return planner(*steps)


async def _pending(h: Any, conversation_id: str) -> list[Any]:
    return await h.services.confirmations.pending(conversation_id)


async def test_only_the_acting_principal_can_confirm(db: Database) -> None:
    """Another customer cannot even see the confirmation; staff who are not the acting
    principal are refused; neither changes anything. The customer's own confirm executes."""
    h = await seeded(db, proposing(SMALL_REFUND))
    first = await h.runtime.chat(principal=C7, channel="api", message="Refund $30 on O-1044, it arrived damaged.")
    [pending] = first.pending
    with pytest.raises(DecisionError) as other:
        await h.runtime.confirm(pending.id, actor=C8, accept=True)
    assert other.value.code == "not_found"
    for staff in (REP, SUP_A):
        with pytest.raises(DecisionError) as refused:
            await h.runtime.confirm(pending.id, actor=staff, accept=True)
        assert refused.value.code == "forbidden"
    conf = await h.services.confirmations.get(pending.id)
    assert conf is not None and conf.status == "pending" and conf.version == 1
    assert await store_refunds(db, "O-1044") == 0
    done = await h.runtime.confirm(pending.id, actor=C7, accept=True)
    assert done.confirmation.status in ("confirmed", "consumed")
    assert done.result is not None and done.result["refund_id"].startswith("R-")
    assert await store_refunds(db, "O-1044") == 1


async def test_confirming_one_set_of_arguments_does_not_cover_another(db: Database) -> None:
    """A confirmation is for exact arguments: after the customer confirmed one refund, a
    proposal with other arguments needs its own confirmation and does not run."""
    model = planner(
        [tool_use_block("search_knowledge", SEARCH)],
        [tool_use_block("issue_refund", SMALL_REFUND)],
        "Please confirm.",
        "Done: $30.00 refunded.",
        [tool_use_block("issue_refund", OTHER_REFUND)],
        "Please confirm this one too.",
    )
    h = await seeded(db, model)
    first = await h.runtime.chat(principal=C7, channel="api", message="Refund $30 on O-1044, it arrived damaged.")
    await h.runtime.confirm(first.pending[0].id, actor=C7, accept=True)
    assert await store_refunds(db, "O-1044") == 1
    second = await h.runtime.chat(
        principal=C7, channel="api", message="and another $10 please", conversation_id=first.conversation_id
    )
    [pending] = second.pending
    assert pending.kind == "confirmation"
    conf = await h.services.confirmations.get(pending.id)
    assert conf is not None and conf.arguments == OTHER_REFUND
    assert await store_refunds(db, "O-1044") == 1


@pytest.mark.parametrize("reply", ["yes", "Go ahead!", "yes please", "OK", "  Yes, go ahead.  "])
async def test_an_affirmative_reply_confirms_the_one_pending_confirmation(db: Database, reply: str) -> None:
    """An affirmative chat reply to the single pending confirmation confirms it; the runtime
    executes exactly those arguments and tells the model what happened."""
    model = proposing(SMALL_REFUND)
    h = await seeded(db, model)
    first = await h.runtime.chat(principal=C7, channel="api", message="Refund $30 on O-1044, it arrived damaged.")
    await h.runtime.chat(principal=C7, channel="api", message=reply, conversation_id=first.conversation_id)
    conf = await h.services.confirmations.get(first.pending[0].id)
    assert conf is not None and conf.status == "consumed"
    refunds = await h.services.backend.list_refunds("C-7", order_id="O-1044")
    assert [(r.amount_minor, r.currency) for r in refunds] == [(3000, "USD")]
    last = " ".join(b.get("text", "") for b in model.requests[-1].messages[-1].content)
    assert "The customer confirmed" in last and refunds[0].id in last
    await assert_history_valid(h.runtime, first.conversation_id, C7)


@pytest.mark.parametrize("reply", ["yes, but make it $70 instead", "what would that do?", "maybe later"])
async def test_a_reply_that_is_not_a_plain_yes_confirms_nothing(db: Database, reply: str) -> None:
    """Only a plain affirmative counts: anything else leaves the confirmation pending."""
    h = await seeded(db, proposing(SMALL_REFUND))
    first = await h.runtime.chat(principal=C7, channel="api", message="Refund $30 on O-1044, it arrived damaged.")
    await h.runtime.chat(principal=C7, channel="api", message=reply, conversation_id=first.conversation_id)
    conf = await h.services.confirmations.get(first.pending[0].id)
    assert conf is not None and conf.status == "pending"
    assert await store_refunds(db, "O-1044") == 0


async def test_a_declined_confirmation_never_executes(db: Database) -> None:
    """ "no" declines; a later confirm of the same request is a conflict and nothing runs."""
    model = proposing(SMALL_REFUND)
    h = await seeded(db, model)
    first = await h.runtime.chat(principal=C7, channel="api", message="Refund $30 on O-1044, it arrived damaged.")
    await h.runtime.chat(principal=C7, channel="api", message="no", conversation_id=first.conversation_id)
    conf = await h.services.confirmations.get(first.pending[0].id)
    assert conf is not None and conf.status == "declined"
    last = " ".join(b.get("text", "") for b in model.requests[-1].messages[-1].content)
    assert "declined" in last and "Nothing was done" in last
    with pytest.raises(DecisionError) as exc:
        await h.runtime.confirm(conf.id, actor=C7, accept=True)
    assert exc.value.code == "conflict"
    assert await store_refunds(db, "O-1044") == 0
    assert await ledger_rows(db) == 0


async def test_a_superseded_confirmation_never_executes(db: Database) -> None:
    """A newer proposal supersedes the pending one; confirming the old one is a conflict, and
    only the newer arguments can be confirmed."""
    h = await seeded(db, proposing(SMALL_REFUND, OTHER_REFUND))
    first = await h.runtime.chat(principal=C7, channel="api", message="Refund O-1044, it arrived damaged.")
    [live] = first.pending  # only the confirmation that can still be given is reported
    new_id = live.id
    events = await h.services.audit.list(kind="confirmation.superseded")
    assert len(events) == 1 and events[0].data["superseded_by"] == new_id  # the silent transition is audited
    old_id = events[0].data["confirmation_id"]
    old = await h.services.confirmations.get(old_id)
    assert old is not None and old.status == "superseded"
    with pytest.raises(DecisionError) as exc:
        await h.runtime.confirm(old_id, actor=C7, accept=True)
    assert exc.value.code == "conflict"
    assert await store_refunds(db, "O-1044") == 0
    done = await h.runtime.confirm(new_id, actor=C7, accept=True)
    assert done.result is not None and done.result["amount_minor"] == 1000
    refunds = await h.services.backend.list_refunds("C-7", order_id="O-1044")
    assert [r.amount_minor for r in refunds] == [1000]


async def test_a_second_confirm_returns_the_same_outcome_and_runs_nothing_more(db: Database) -> None:
    """Confirming twice (a double click, a replay, a retry after a lost response) executes once;
    the second answers with the stored outcome (no new agent turn), and declining it now is a conflict."""
    h = await seeded(db, proposing(SMALL_REFUND))
    first = await h.runtime.chat(principal=C7, channel="api", message="Refund $30 on O-1044, it arrived damaged.")
    conf_id = first.pending[0].id
    done = await h.runtime.confirm(conf_id, actor=C7, accept=True)
    again = await h.runtime.confirm(conf_id, actor=C7, accept=True)
    assert done.result is not None and again.result == done.result
    assert again.reply is None and again.turn is None
    with pytest.raises(DecisionError) as exc:
        await h.runtime.confirm(conf_id, actor=C7, accept=False)
    assert exc.value.code == "conflict"
    assert await store_refunds(db, "O-1044") == 1
    assert await ledger_rows(db) == 1


async def test_concurrent_confirms_execute_once(db: Database) -> None:
    """Five confirms racing on one confirmation: all answer with the one outcome, one of them
    carries the agent's reply, and exactly one refund exists."""
    h = await seeded(db, proposing(SMALL_REFUND))
    first = await h.runtime.chat(principal=C7, channel="api", message="Refund $30 on O-1044, it arrived damaged.")
    conf_id = first.pending[0].id
    outcomes = await asyncio.gather(
        *(h.runtime.confirm(conf_id, actor=C7, accept=True) for _ in range(5)), return_exceptions=True
    )
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    wins = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len({str(o.result) for o in wins}) == 1 and wins[0].result is not None
    assert sum(o.turn is not None for o in wins) == 1
    assert await store_refunds(db, "O-1044") == 1
    assert await ledger_rows(db) == 1
