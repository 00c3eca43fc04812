"""Database faults never strand an action (SQLite, fast): the reconciliation's logic.

The fault is injected where the runtime meets the database: the sandbox's refund call fails
like a dropped connection (after its write committed, or before), or ``Ledger.settle`` fails
like a read-only database. The PostgreSQL suite (``test_db_faults_pg.py``) makes the same
faults for real.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import sqlite3
from datetime import timedelta
from typing import Any, cast

import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import select, update

from agent.errors import Unavailable
from agent.metrics import Metrics, attach_metrics
from agent.reconcile import reconcile_stuck
from agent.runtime import Runtime
from agent.worker import Worker, WorkerConfig, recover
from bot.server import make_web_app
from storage.db import Database
from storage.faults import fault_kind
from storage.ledger import Ledger
from storage.models import JobRow, ToolExecutionRow
from tests.api_kit import app_of
from tests.fault_kit import ask, assert_exactly_once_and_told, refund_env, refund_fault, refunds_of, told_in
from tests.gatekeeper_kit import C7, Env, ledger_rows


async def stranded(env: Env, *, after_effect: bool) -> tuple[str, str]:
    """A confirmed refund whose call a dropped connection cut short: the confirm answers
    ``Unavailable`` and the claim stays ``executing`` with a live holder (this process)."""
    conv_id, conf_id = await ask(env)
    with refund_fault(after_effect=after_effect), pytest.raises(Unavailable):
        await env.runtime.confirm(conf_id, actor=C7, accept=True)
    assert [r["status"] for r in await ledger_rows(env.db)] == ["executing"]
    conf = await env.services.confirmations.get(conf_id)
    assert conf is not None and conf.status == "confirmed" and conf.outcome is None, conf
    return conv_id, conf_id


def test_outages_are_told_apart_from_bugs() -> None:
    """Connection loss, shutdown and read-only are outages; a constraint or a bug is not."""
    assert fault_kind(sqlite3.OperationalError("disk I/O error")) == "connection"
    assert fault_kind(sqlite3.OperationalError("attempt to write a readonly database")) == "read_only"
    assert fault_kind(ConnectionResetError()) == "connection"
    assert fault_kind(sqlite3.IntegrityError("UNIQUE constraint failed")) is None
    assert fault_kind(ValueError("bug")) is None
    try:
        raise RuntimeError("wrapped") from ConnectionRefusedError()
    except RuntimeError as exc:
        assert fault_kind(exc) == "connection"


async def test_effect_done_then_connection_lost_is_settled_done_and_told(db: Database) -> None:
    """The refund happened, the call's connection dropped: after the bound the pass finds the
    effect by ``lookup_write``, settles it done without a second refund, and tells the customer."""
    env = await refund_env(db)
    metrics = attach_metrics(env.services)
    conv_id, conf_id = await stranded(env, after_effect=True)
    assert len(await refunds_of(db)) == 1
    assert [r.result for r in await reconcile_stuck(env.runtime, older_than_s=60)] == []  # younger than the bound
    env.clock.advance(timedelta(seconds=61))
    assert [r.result for r in await reconcile_stuck(env.runtime, older_than_s=60)] == ["done"]
    await assert_exactly_once_and_told(env, conf_id, told_in(env, conv_id))
    text = metrics.render().decode()
    assert 'signoff_reconciliations_total{result="done"} 1.0' in text
    assert "signoff_ledger_stuck 1.0" in text
    assert 'signoff_database_errors_total{kind="connection"}' in text


async def test_call_cut_before_the_effect_is_released_and_carried_out_once(db: Database) -> None:
    """The connection dropped before the refund was written: the shop shows nothing, so the
    claim is released for one retry and the confirmation is carried out (not used up)."""
    env = await refund_env(db)
    conv_id, conf_id = await stranded(env, after_effect=False)
    assert await refunds_of(db) == []
    env.clock.advance(timedelta(seconds=61))
    assert [r.result for r in await reconcile_stuck(env.runtime, older_than_s=60)] == ["released"]
    await assert_exactly_once_and_told(env, conf_id, told_in(env, conv_id))


async def test_the_same_click_again_reconciles_at_once(db: Database) -> None:
    """A fault does not use up the click: sending the same confirmation again settles the
    stranded claim now (no second refund) and answers with the executed outcome."""
    env = await refund_env(db)
    conv_id, conf_id = await stranded(env, after_effect=True)
    again = await env.runtime.confirm(conf_id, actor=C7, accept=True)
    assert again.result is not None and again.result["refund_id"], again
    await assert_exactly_once_and_told(env, conf_id, told_in(env, conv_id, answered=again.reply is not None))


async def test_a_claim_whose_conversation_lease_is_held_is_left_to_its_holder(db: Database) -> None:
    """A live holder (another replica in its turn, or a stopped one) keeps the lease: the pass
    leaves its claim alone; once the lease is free it reconciles."""
    env = await refund_env(db)
    conv_id, conf_id = await stranded(env, after_effect=True)
    env.clock.advance(timedelta(seconds=61))
    other = Runtime(env.services)  # another replica's runtime: its own leases
    async with other.lock(conv_id):
        assert [r.result for r in await reconcile_stuck(env.runtime, older_than_s=60)] == ["held"]
        assert [r["status"] for r in await ledger_rows(db)] == ["executing"]
    assert await recover(env.runtime, orphan_after_s=60) == 1
    await assert_exactly_once_and_told(env, conf_id, told_in(env, conv_id))


async def test_settle_rides_out_a_read_only_window(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """``settle`` meets a read-only database twice, then gets through: the outcome is recorded on
    the request's path and the customer hears it at once."""
    env = await refund_env(db)
    conv_id, conf_id = await ask(env)
    _read_only_settles(monkeypatch, failures=2)
    done = await env.runtime.confirm(conf_id, actor=C7, accept=True)
    assert done.result is not None and done.result["refund_id"]
    await assert_exactly_once_and_told(env, conf_id, told_in(env, conv_id, answered=done.reply is not None))


async def test_settle_outlasting_its_budget_finishes_in_the_background(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only window longer than the request's budget: the customer is told the true
    outcome (the refund happened) and a background task settles the ledger once it can."""
    env = await refund_env(db)
    env.services.executor.settle_budget_s = 0.1
    conv_id, conf_id = await ask(env)
    _read_only_settles(monkeypatch, failures=6)
    done = await env.runtime.confirm(conf_id, actor=C7, accept=True)
    assert done.result is not None and done.result["refund_id"]
    assert [r["status"] for r in await ledger_rows(db)] == ["executing"]
    await asyncio.wait_for(env.services.executor.drain(), timeout=10)
    await assert_exactly_once_and_told(env, conf_id, told_in(env, conv_id, answered=done.reply is not None))


async def test_the_worker_reconciles_while_it_runs(db: Database) -> None:
    """Not only at start: a claim stranded while the worker runs is reconciled by its periodic pass."""
    env = await refund_env(db)
    worker = Worker(env.runtime, config=WorkerConfig(reconcile_every_s=0.05, orphan_after_s=60, poll_s=0.05))
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run_forever(stop))
    try:
        await asyncio.sleep(0.1)  # the start-up pass is over
        conv_id, conf_id = await stranded(env, after_effect=True)
        env.clock.advance(timedelta(seconds=61))
        for _ in range(100):
            if [r["status"] for r in await ledger_rows(db)] == ["succeeded"] and env.notifier.of("follow_up"):
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await running
    await assert_exactly_once_and_told(env, conf_id, told_in(env, conv_id))


def _read_only_settles(monkeypatch: pytest.MonkeyPatch, *, failures: int) -> None:
    settle = Ledger.settle
    left = [failures]

    async def read_only(self: Ledger, key: str, **kw: Any) -> bool:
        if left[0] > 0:
            left[0] -= 1
            raise sqlite3.OperationalError("attempt to write a readonly database")
        return await settle(self, key, **kw)

    monkeypatch.setattr(Ledger, "settle", read_only)


async def test_an_approval_cut_by_a_fault_is_not_used_up(db: Database) -> None:
    """The supervisor's approve meets a dropped connection during the refund's call: the answer
    is ``Unavailable``, the approval stays approved with no result, and the pass (the shop shows
    nothing: released) carries it out once and tells the customer it was approved and issued."""
    from tests.support import SUP_A, seeded
    from tests.test_loop_support import open_refund_approval
    from tests.test_resume import follow_up_planner

    h = await seeded(db, follow_up_planner())
    a = await open_refund_approval(h)
    with refund_fault(after_effect=False), pytest.raises(Unavailable):
        await h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_A)
    held = await h.services.approvals.get(a.id)
    assert held is not None and held.status == "approved" and held.result is None, held
    h.clock.now += timedelta(seconds=61)
    assert [r.result for r in await reconcile_stuck(h.runtime, older_than_s=60)] == ["released"]
    done = await h.services.approvals.get(a.id)
    assert done is not None and done.result is not None and done.result["status"] == "REFUNDED", done
    refunds = [
        r for r in await refunds_of(db, a.arguments["order_id"]) if r["amount_minor"] == a.arguments["amount_minor"]
    ]
    assert len(refunds) == 1
    assert h.notifier.of("follow_up") == [
        (a.conversation_id, "Good news: your refund of $189.00 was approved and issued.")
    ]


async def test_a_claim_another_live_process_holds_never_quarantines_the_safety_net_job(db: Database) -> None:
    """The confirmation's job meets 409 "being carried out" (the claim's holder is another live
    process) more often than ``max_attempts``: while it has waited less than
    ``in_progress_wait_s`` in all, those attempts are not counted (no spurious quarantine before
    the pass settles the claim); past that bound they count again (nothing waits forever); once
    the pass settles the claim the job finishes and the customer has the outcome once."""
    env = await refund_env(db)
    conv_id, conf_id = await stranded(env, after_effect=True)
    job_id = await _held_elsewhere(db, "confirmation")
    assert WorkerConfig(in_progress_wait_s=1, orphan_after_s=600).in_progress_bound_s == 670  # never below a pass
    config = WorkerConfig(max_attempts=2, in_progress_wait_s=600)
    for _ in range(4):  # twice max_attempts within the bound
        env.clock.advance(timedelta(seconds=60))
        assert await Worker(env.runtime, config=config).run_once() == 1
        job = await env.services.jobs.get(job_id)
        assert job is not None and job.status == "queued" and job.attempts == 0, job
        assert job.last_error is not None and "being carried out" in job.last_error
    env.clock.advance(timedelta(seconds=400))  # past the bound: the conflict counts
    assert await Worker(env.runtime, config=config).run_once() == 1
    job = await env.services.jobs.get(job_id)
    assert job is not None and job.status == "queued" and job.attempts == 1, job
    await Worker(env.runtime, config=config).reconcile()  # the pass settles the claim (done) and tells
    env.clock.advance(timedelta(seconds=60))
    assert await Worker(env.runtime, config=config).run_once() == 1
    job = await env.services.jobs.get(job_id)
    assert job is not None and job.status == "done", job
    await assert_exactly_once_and_told(env, conf_id, told_in(env, conv_id))


async def test_every_replica_reads_the_stuck_claims_at_scrape_time(db: Database) -> None:
    """``signoff_ledger_stuck`` is read from the ledger's in-flight rows at each scrape, in a
    process that never ran the reconciliation pass (a replica whose worker is another process)."""
    env = await refund_env(db)
    await stranded(env, after_effect=True)
    app = dataclasses.replace(app_of(cast(Any, env)), metrics=Metrics())
    assert app.metrics is not None
    async with TestClient(TestServer(make_web_app(app, metrics_render=app.metrics.render))) as client:
        assert "signoff_ledger_stuck 0.0" in await (await client.get("/metrics")).text()  # within the bound
        env.clock.advance(timedelta(seconds=61))
        assert "signoff_ledger_stuck 1.0" in await (await client.get("/metrics")).text()


async def _held_elsewhere(db: Database, job_kind: str) -> int:
    """The stranded claim's holder becomes another process, alive (our parent); the id of the one
    job of ``job_kind`` (the confirmation's safety net, the approval's resume)."""
    async with db.sessions() as s, s.begin():
        await s.execute(update(ToolExecutionRow).values(holder=f"{socket.gethostname()[:40]}:{os.getppid()}:x"))
        (job_id,) = (await s.execute(select(JobRow.id).where(JobRow.kind == job_kind))).scalars().all()
    return int(job_id)


async def test_an_approvals_resume_job_waits_for_a_claim_another_live_process_holds(db: Database) -> None:
    """The approval's resume job meets 409 "being carried out" more often than ``max_attempts``
    while the claim's holder lives: not quarantined; once the pass settles the claim the job
    finishes and the customer hears, once, that the refund was approved and issued."""
    from tests.support import SUP_A, seeded
    from tests.test_loop_support import open_refund_approval
    from tests.test_resume import follow_up_planner

    h = await seeded(db, follow_up_planner())
    a = await open_refund_approval(h)
    with refund_fault(after_effect=True), pytest.raises(Unavailable):
        await h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_A)
    job_id = await _held_elsewhere(db, "resume")
    config = WorkerConfig(max_attempts=2)
    for _ in range(4):
        h.clock.now += timedelta(seconds=30)
        assert await Worker(h.runtime, config=config).run_once() >= 1  # (the confirmation's job too, once)
        job = await h.services.jobs.get(job_id)
        assert job is not None and job.status == "queued" and job.attempts == 0, job
    await Worker(h.runtime, config=config).reconcile()
    h.clock.now += timedelta(seconds=30)
    await Worker(h.runtime, config=config).run_once()
    job = await h.services.jobs.get(job_id)
    done = await h.services.approvals.get(a.id)
    assert job is not None and job.status == "done", job
    assert done is not None and done.result is not None and done.result["status"] == "REFUNDED", done
    assert len([r for r in await refunds_of(db, "O-1042") if r["amount_minor"] == 18900]) == 1
    assert h.notifier.of("follow_up") == [
        (a.conversation_id, "Good news: your refund of $189.00 was approved and issued.")
    ]
