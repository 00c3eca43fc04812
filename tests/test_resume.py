"""Suspend and resume (C8): a decision enqueues a job; a worker resumes the run with a
truthful observation, the agent posts the follow-up to the same conversation, and the
history stays valid for the next model call. Workers racing resume once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agent.llm.base import ModelRequest
from agent.llm.testing import FunctionModel, tool_use_block
from agent.runtime import Runtime
from agent.worker import Worker, WorkerConfig
from bot.app import sandbox_services
from storage.db import Database
from tests.support import C7, SUP_A, seeded
from tests.test_loop_support import (
    BIG_REFUND,
    SEARCH,
    advance,
    assert_history_valid,
    ledger_rows,
    open_refund_approval,
    store_refunds,
)


def follow_up_planner() -> FunctionModel:
    """Search, propose the big refund, then answer each runtime event truthfully from its text."""

    def plan(request: ModelRequest) -> Any:
        called = {
            b.get("name")
            for m in request.messages
            if m.role == "assistant"
            for b in m.content
            if b.get("type") == "tool_use"
        }
        if "search_knowledge" not in called:
            return [tool_use_block("search_knowledge", SEARCH)]
        if "issue_refund" not in called:
            return [tool_use_block("issue_refund", BIG_REFUND)]
        last = " ".join(b.get("text", "") for b in request.messages[-1].content if b.get("type") == "text")
        if last == "thank you":
            return "You're welcome!"
        if "was approved" in last and '"REFUNDED"' in last:
            return "Good news: your refund of $189.00 was approved and issued."
        if "was approved" in last:
            return "A supervisor approved it, but the refund could not be carried out; a colleague will follow up."
        if "was rejected" in last:
            return "I'm sorry — a supervisor declined the refund."
        if "expired" in last:
            return "The request expired before anyone could review it; nothing was refunded."
        return "Please confirm." if "CONFIRMATION" not in last else "It is waiting for a supervisor."

    return FunctionModel(plan)


def worker(rt: Runtime, name: str) -> Worker:
    return Worker(rt, config=WorkerConfig(expiry_every_s=3600), worker_id=name)


async def test_approved_resume_posts_a_truthful_follow_up_and_keeps_the_history_valid(any_db: Database) -> None:
    """After approval the resume tells the model what happened (approved and executed, with the
    refund id); the agent's follow-up goes to the same conversation; the next model call's
    history passes the strict fake."""
    model = follow_up_planner()
    h = await seeded(any_db, model)
    a = await open_refund_approval(h)
    decided = await h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_A)
    follow = await h.runtime.resume(a.id)
    assert follow is not None and follow.reply == "Good news: your refund of $189.00 was approved and issued."
    observation = json.dumps(model.requests[-1].messages[-1].content)
    assert f"Approval {a.id} was approved" in observation and decided.result["refund_id"] in observation
    assert h.notifier.of("follow_up") == [(a.conversation_id, follow.reply)]
    await assert_history_valid(h.runtime, a.conversation_id, C7)
    assert await h.runtime.resume(a.id) is None  # a second resume (a re-run job) changes nothing
    assert len(h.notifier.of("follow_up")) == 1


@pytest.mark.parametrize("outcome", ["rejected", "expired"])
async def test_rejected_or_expired_resume_says_so_and_moves_no_money(any_db: Database, outcome: str) -> None:
    """The observation after a rejection carries the comment; after expiry it says expired;
    the follow-up is truthful and nothing was refunded."""
    model = follow_up_planner()
    h = await seeded(any_db, model)
    a = await open_refund_approval(h)
    if outcome == "rejected":
        await h.runtime.decide(a.id, expected_version=1, decision="reject", actor=SUP_A, comment="Need photos")
    else:
        advance(h.clock, 86400 + 1)
        assert await h.runtime.expire_stale() == 1
    follow = await h.runtime.resume(a.id)
    assert follow is not None
    observation = " ".join(b.get("text", "") for b in model.requests[-1].messages[-1].content)
    if outcome == "rejected":
        assert "was rejected" in observation and "Need photos" in observation
        assert "declined" in follow.reply
    else:
        assert "expired" in observation and "expired" in follow.reply
    assert await store_refunds(any_db, "O-1042") == 0
    await assert_history_valid(h.runtime, a.conversation_id, C7)


async def test_worker_picks_up_the_resume_job_when_it_is_due(any_db: Database) -> None:
    """The decision enqueues a resume job (due after a short delay on the injected clock); the
    worker runs it once, posts the follow-up, and marks the job done."""
    h = await seeded(any_db, follow_up_planner())
    a = await open_refund_approval(h)
    await h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_A)
    w = worker(h.runtime, "w-1")
    assert await w.run_once() == 0  # not due yet
    advance(h.clock, 3)
    assert await w.run_once() == 1
    assert await w.run_once() == 0
    assert await h.services.jobs.pending_count(kinds=["resume"]) == 0
    assert [c for c, _ in h.notifier.of("follow_up")] == [a.conversation_id]
    assert await store_refunds(any_db, "O-1042") == 1


async def test_worker_runs_the_expiry_sweep_and_resumes_the_expired_run(any_db: Database) -> None:
    """The worker's sweep expires a stale approval and the enqueued resume follows at once."""
    h = await seeded(any_db, follow_up_planner())
    a = await open_refund_approval(h)
    advance(h.clock, 86400 + 1)
    w = Worker(h.runtime, config=WorkerConfig(expiry_every_s=0), worker_id="w-1")
    # The resume, and the confirmation's safety-net job (due too, and a no-op: it was carried out).
    assert await w.run_once() == 2
    stored = await h.services.approvals.get(a.id)
    assert stored is not None and stored.status == "expired"
    [(conv_id, text)] = h.notifier.of("follow_up")
    assert conv_id == a.conversation_id and "expired" in text


async def test_two_workers_racing_on_one_job_resume_once(any_db: Database) -> None:
    """Two workers (each with its own runtime, as two processes would) claim at the same time:
    one resumes, the model is asked once, one follow-up is posted, one observation stored."""
    model = follow_up_planner()
    h = await seeded(any_db, model)
    a = await open_refund_approval(h)
    await h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_A)
    rt2 = Runtime(sandbox_services(db=any_db, model=model, notifier=h.notifier, clock=h.clock))
    advance(h.clock, 3)
    before = len(model.requests)
    handled = await asyncio.gather(worker(h.runtime, "w-1").run_once(), worker(rt2, "w-2").run_once())
    assert sorted(handled) == [0, 1]
    assert len(model.requests) == before + 1
    assert len(h.notifier.of("follow_up")) == 1
    history = await h.services.conversations.history(a.conversation_id)
    markers = [b for m in history for b in m.content if f"Approval {a.id} " in str(b.get("text", ""))]
    assert len(markers) == 1


async def test_a_worker_that_died_holding_the_job_is_replaced_and_the_run_resumes_once(any_db: Database) -> None:
    """A worker claims the job and dies; after the lease the job is claimed again and resumed;
    the dead worker's late resume finds it already done and changes nothing."""
    h = await seeded(any_db, follow_up_planner())
    a = await open_refund_approval(h)
    await h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_A)
    advance(h.clock, 3)
    [job] = await h.services.jobs.claim("w-dead", kinds=["resume"], lease_s=60)
    assert await worker(h.runtime, "w-2").run_once() == 0  # leased
    advance(h.clock, 61)
    # The resume, and the confirmation's safety-net job (due too, and a no-op: it was carried out).
    assert await worker(h.runtime, "w-2").run_once() == 2
    assert await h.runtime.resume(str(job.payload["approval_id"])) is None
    assert len(h.notifier.of("follow_up")) == 1
    assert await store_refunds(any_db, "O-1042") == 1


@pytest.mark.parametrize("where", ["same_process", "other_process"])
async def test_resume_while_the_approved_action_is_still_running_reports_the_truth(
    any_db: Database, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """The approval's own execution is slow (a slow payment processor) and the safety-net
    resume job comes due meanwhile, in this process or another: the refund happens once, the
    stored result is REFUNDED, and the one follow-up says it was issued, never that it failed."""
    model = follow_up_planner()
    h = await seeded(any_db, model)
    other = Runtime(sandbox_services(db=any_db, model=model, notifier=h.notifier, clock=h.clock))
    resumer = h.runtime if where == "same_process" else other
    a = await open_refund_approval(h)
    store = h.services.backend
    real = store.issue_refund
    started, release = asyncio.Event(), asyncio.Event()

    async def slow_refund(*args: Any, **kwargs: Any) -> Any:
        started.set()
        await release.wait()
        return await real(*args, **kwargs)

    monkeypatch.setattr(store, "issue_refund", slow_refund)
    deciding = asyncio.create_task(h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_A))
    await asyncio.wait_for(started.wait(), 5)
    advance(h.clock, 3)
    resuming = asyncio.create_task(worker(resumer, "w-1").run_once())
    await asyncio.sleep(0.05)  # let the worker claim the job and reach the approval
    release.set()
    decided = await asyncio.wait_for(deciding, 10)
    await asyncio.wait_for(resuming, 10)
    for _ in range(3):  # a job that had to wait is retried later; run it out
        advance(h.clock, 10)
        await worker(resumer, "w-1").run_once()
    assert decided.result["status"] == "REFUNDED"
    stored = await h.services.approvals.get(a.id)
    assert stored is not None and stored.result["status"] == "REFUNDED"
    assert await store_refunds(any_db, "O-1042") == 1
    assert await ledger_rows(any_db) == 1
    follow_ups = [text for _, text in h.notifier.of("follow_up")]
    assert follow_ups == ["Good news: your refund of $189.00 was approved and issued."]
    await assert_history_valid(h.runtime, a.conversation_id, C7)


async def test_after_resume_the_conversation_goes_on(any_db: Database) -> None:
    """After the follow-up the customer can write again and the next request is valid."""
    model = follow_up_planner()
    h = await seeded(any_db, model)
    a = await open_refund_approval(h)
    await h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_A)
    await h.runtime.resume(a.id)
    r = await h.runtime.chat(principal=C7, channel="api", message="thank you", conversation_id=a.conversation_id)
    assert r.reply == "You're welcome!"
    await assert_history_valid(h.runtime, a.conversation_id, C7)
