"""Crash safety of the loop (C1/C9): history is persisted after every iteration, never
across a model call, so a process that dies at any point is continued by a new runtime
over the same database with a protocol-valid history and no tool run twice."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agent.llm.base import ModelClient, ModelRequest
from agent.llm.testing import FunctionModel, ScriptedModel, tool_use_block
from agent.notify import RecordingNotifier
from agent.runtime import Runtime
from agent.worker import recover
from bot.app import sandbox_services
from storage.conversations import ConversationRepo
from storage.db import Database, create_database
from storage.steps import StepWrite
from tests.support import C7, SUP_A, Clock, seeded
from tests.test_loop_support import (
    SEARCH,
    SMALL_REFUND,
    advance,
    assert_history_valid,
    case_notes,
    ledger_rows,
    store_refunds,
)


class Crash(BaseException):
    """The process dies here: nothing in the runtime may catch it."""


def crash(_request: ModelRequest) -> Any:
    raise Crash("killed")


async def restart(path: Path, model: ModelClient, clock: Clock) -> tuple[Database, Runtime, RecordingNotifier]:
    """A new process: a new engine over the same SQLite file and a new runtime."""
    db = create_database(f"sqlite+aiosqlite:///{path}")
    notifier = RecordingNotifier()
    return db, Runtime(sandbox_services(db=db, model=model, notifier=notifier, clock=clock)), notifier


def results_in(request: ModelRequest) -> list[dict[str, Any]]:
    return [b for m in request.messages for b in m.content if b.get("type") == "tool_result"]


async def _confirmed_refund_then_crash(db: Database) -> tuple[Any, str]:
    """The customer asks, the model proposes a refund, the customer says yes: the runtime
    executes it, commits the result, and the process dies calling the model."""
    calls = {"n": 0}

    def planner(request: ModelRequest) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            return [tool_use_block("search_knowledge", SEARCH)]
        if calls["n"] == 2:
            return [tool_use_block("issue_refund", SMALL_REFUND)]
        if calls["n"] == 3:
            return "Shall I refund $30.00 on O-1044? Please confirm."
        raise Crash("killed after the refund ran, before the model heard of it")

    h = await seeded(db, FunctionModel(planner))
    first = await h.runtime.chat(principal=C7, channel="api", message="Refund $30 on O-1044, it is damaged.")
    with pytest.raises(Crash):
        await h.runtime.chat(principal=C7, channel="api", message="yes", conversation_id=first.conversation_id)
    assert await store_refunds(db, "O-1044") == 1
    return h, first.conversation_id


@pytest.mark.parametrize("continued_by", ["customer", "worker"])
async def test_crash_after_the_tool_ran_continues_without_running_it_again(
    db: Database, tmp_path: Path, continued_by: str
) -> None:
    """A crash after the refund's result was committed and before the next model call: a new
    runtime (the customer's next message, or the worker's recovery) continues the conversation
    with a valid history; the store has one refund and the ledger one row."""
    h, conv_id = await _confirmed_refund_then_crash(db)
    await db.dispose()
    model = ScriptedModel(["Your refund of $30.00 on O-1044 went through."])
    db2, rt2, notifier = await restart(tmp_path / "t.db", model, h.clock)
    if continued_by == "customer":
        reply = await rt2.chat(principal=C7, channel="api", message="Did it go through?", conversation_id=conv_id)
        assert reply.reply == "Your refund of $30.00 on O-1044 went through."
    else:
        advance(h.clock, 120)
        await recover(rt2, orphan_after_s=60)
        assert notifier.of("follow_up") == [(conv_id, "Your refund of $30.00 on O-1044 went through.")]
    [request] = model.requests
    assert "executed" in json.dumps(request.messages[-1].content)  # the model hears what happened
    assert await store_refunds(db2, "O-1044") == 1
    assert await ledger_rows(db2) == 1
    await assert_history_valid(rt2, conv_id, C7)
    await db2.dispose()


async def test_cancelled_turn_leaves_no_open_transaction_and_continues(db: Database, tmp_path: Path) -> None:
    """Cancelling the task while it waits on the model (a process being stopped) leaves the
    database unlocked and the history valid; the case note the model wrote is not written twice."""
    waiting = asyncio.Event()

    async def planner(request: ModelRequest) -> Any:
        if len(model.requests) == 1:
            return [tool_use_block("add_case_note", {"note": "Customer asked about O-1042."})]
        waiting.set()
        await asyncio.Event().wait()  # hangs: the model never answers

    model = FunctionModel(planner)
    h = await seeded(db, model)
    task = asyncio.create_task(h.runtime.chat(principal=C7, channel="api", message="Where is O-1042?"))
    await asyncio.wait_for(waiting.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    conv_id = model.requests[0].metadata["conversation_id"]
    history_rows = await h.services.conversations.history(conv_id)
    assert [m.role for m in history_rows] == ["user", "assistant", "user"]
    model2 = ScriptedModel(["I've noted it; O-1042 was delivered."])
    db2, rt2, _ = await restart(tmp_path / "t.db", model2, h.clock)
    r = await asyncio.wait_for(rt2.chat(principal=C7, channel="api", message="hello?", conversation_id=conv_id), 5)
    assert r.outcome == "answered"
    assert await case_notes(db2, conv_id, "note") == 1
    await assert_history_valid(rt2, conv_id, C7)
    await db2.dispose()


async def test_turn_that_gave_up_is_not_redriven_by_crash_recovery(db: Database) -> None:
    """A turn that ended with an escalation is finished: the worker's recovery does not call
    the model again nor post another follow-up over the human who has the case."""
    from agent.errors import ModelUnavailable

    def down(_request: ModelRequest) -> Any:
        raise ModelUnavailable("down", reason="unavailable")

    model = FunctionModel(down)
    h = await seeded(db, model)
    r = await h.runtime.chat(principal=C7, channel="api", message="hi")
    assert r.outcome == "gave_up"
    advance(h.clock, 600)
    await recover(h.runtime, orphan_after_s=60)
    assert len(model.requests) == 1
    assert h.notifier.of("follow_up") == []


# -- a crash between the assistant message and its tool results (Turn.repair) ----------


def crash_on_tool_results(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Make the commit that carries tool_result blocks die once (after the tools ran)."""
    real = ConversationRepo.commit
    state = {"crashed": 0}

    async def commit(self: ConversationRepo, step: StepWrite) -> int:
        carries_results = any(
            role == "user" and any(b.get("type") == "tool_result" for b in content) for role, content in step.messages
        )
        if carries_results and not state["crashed"]:
            state["crashed"] += 1
            raise Crash("killed before the tool results were committed")
        return await real(self, step)

    monkeypatch.setattr(ConversationRepo, "commit", commit)
    return state


@pytest.mark.parametrize("continued_by", ["customer", "worker"])
async def test_crash_between_tool_use_and_tool_result_is_repaired(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, continued_by: str
) -> None:
    """A step with an action stores its proposals before any tool runs. The assistant's
    tool_use is stored but its results are not: on restart the unanswered calls are answered
    first (whether the customer writes again or the worker recovers the run), so the history
    the model sees is valid."""
    uses = [
        tool_use_block("search_knowledge", SEARCH),
        tool_use_block("get_order", {"order_id": "O-1042"}),
        tool_use_block("issue_refund", SMALL_REFUND),
    ]
    model = ScriptedModel([uses])
    h = await seeded(db, model)
    state = crash_on_tool_results(monkeypatch)
    with pytest.raises(Crash):
        await h.runtime.chat(principal=C7, channel="api", message="Where is O-1042? And refund O-1044.")
    assert state["crashed"] == 1
    conv_id = model.requests[0].metadata["conversation_id"]
    history = await h.services.conversations.history(conv_id)
    assert [m.role for m in history] == ["user", "assistant"]
    await db.dispose()
    model2 = ScriptedModel(["O-1042 was delivered; the refund needs your confirmation."])
    db2, rt2, notifier = await restart(tmp_path / "t.db", model2, h.clock)
    if continued_by == "customer":
        r = await rt2.chat(principal=C7, channel="api", message="hello?", conversation_id=conv_id)
        assert r.outcome == "answered"
    else:
        advance(h.clock, 120)
        await recover(rt2, orphan_after_s=60)
        assert notifier.of("follow_up")
    [request] = model2.requests
    _search, order, refund = (json.loads(r["content"]) for r in results_in(request))
    assert order["status"] == "DELIVERED"
    assert refund["status"] == "CONFIRMATION_REQUIRED"
    await assert_history_valid(rt2, conv_id, C7)
    await db2.dispose()


@pytest.mark.parametrize("continued_by", ["customer", "worker"])
async def test_crash_during_a_read_step_leaves_the_history_as_before_the_model_call(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, continued_by: str
) -> None:
    """A step of reads only writes once, after its tools ran (issue 24): a crash before that
    write leaves no tool_use without its result, nothing was done, and on restart the model is
    simply asked again."""
    model = ScriptedModel([[tool_use_block("get_order", {"order_id": "O-1042"})]])
    h = await seeded(db, model)
    state = crash_on_tool_results(monkeypatch)
    with pytest.raises(Crash):
        await h.runtime.chat(principal=C7, channel="api", message="Where is O-1042?")
    assert state["crashed"] == 1
    conv_id = model.requests[0].metadata["conversation_id"]
    history = await h.services.conversations.history(conv_id)
    assert [m.role for m in history] == ["user"]
    await db.dispose()
    model2 = ScriptedModel([[tool_use_block("get_order", {"order_id": "O-1042"})], "O-1042 was delivered."])
    db2, rt2, notifier = await restart(tmp_path / "t.db", model2, h.clock)
    if continued_by == "customer":
        r = await rt2.chat(principal=C7, channel="api", message="hello?", conversation_id=conv_id)
        assert r.outcome == "answered"
    else:
        advance(h.clock, 120)
        await recover(rt2, orphan_after_s=60)
        assert notifier.of("follow_up")
    first, second = model2.requests
    assert results_in(first) == []
    [result] = results_in(second)
    assert json.loads(result["content"])["status"] == "DELIVERED"
    await assert_history_valid(rt2, conv_id, C7)
    await db2.dispose()


async def test_crash_after_a_confirmed_refund_ran_never_refunds_twice(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime executed the customer's confirmed refund and died before recording the
    outcome. After restart the model proposes the same refund again and the customer confirms
    again: the ledger answers with the first refund — one store refund, one ledger row."""
    script: list[Any] = [
        [tool_use_block("search_knowledge", SEARCH)],
        [tool_use_block("issue_refund", SMALL_REFUND)],
        "Shall I refund $30.00 on O-1044? Please confirm.",
    ]
    h = await seeded(db, ScriptedModel(script))
    first = await h.runtime.chat(principal=C7, channel="api", message="Refund $30 on O-1044, it is damaged.")
    real = ConversationRepo.commit
    died = {"n": 0}

    async def commit(self: ConversationRepo, step: StepWrite) -> int:
        if any(o.decision == "execute" and o.idempotency_key for o in step.outcomes) and not died["n"]:
            died["n"] += 1
            raise Crash("killed after the refund, before its outcome was stored")
        return await real(self, step)

    monkeypatch.setattr(ConversationRepo, "commit", commit)
    with pytest.raises(Crash):
        await h.runtime.chat(principal=C7, channel="api", message="yes", conversation_id=first.conversation_id)
    first_refunds = await h.services.backend.list_refunds("C-7", order_id="O-1044")
    assert len(first_refunds) == 1
    await db.dispose()
    model2 = ScriptedModel(
        [
            [tool_use_block("issue_refund", SMALL_REFUND)],
            "Please confirm the $30.00 refund.",
            "A supervisor must approve it first; it is pending.",
        ]
    )
    db2, rt2, _ = await restart(tmp_path / "t.db", model2, h.clock)
    again = await rt2.chat(principal=C7, channel="api", message="so?", conversation_id=first.conversation_id)
    assert [p.kind for p in again.pending] == ["confirmation"]
    done = await rt2.chat(principal=C7, channel="api", message="yes", conversation_id=first.conversation_id)
    # The day's aggregate now counts the refund that did happen, so this one is routed to a
    # supervisor; approved, the ledger answers with the first refund instead of paying again.
    assert done.outcome == "answered"
    [approval] = await rt2.s.approvals.pending_for_customer("C-7")
    decided = await rt2.decide(approval.id, expected_version=approval.version, decision="approve", actor=SUP_A)
    assert decided.result["status"] == "REFUNDED"
    assert decided.result["refund_id"] == first_refunds[0].id
    assert await store_refunds(db2, "O-1044") == 1
    assert await ledger_rows(db2) == 1
    await assert_history_valid(rt2, first.conversation_id, C7)
    await db2.dispose()
