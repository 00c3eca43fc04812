"""Database faults on PostgreSQL while a supervisor's approval is carried out (the confirmed
refunds' suite is ``test_db_faults_pg.py``; the server is the test's own, tests/pg_server.py).

A supervisor approves a 189.00 refund; the fault lands on its execution:

* a read-only window opened exactly when the refund's ``settle`` starts, closed a second later;
* the settle's own session terminated before its COMMIT;
* a fast restart between the shop's write and the settle, down longer than the settle budget;
* the approval's own transition (approved, with its resume job) cut at its COMMIT (the same
  click is sent again), or committed with its answer lost (its resume job carries it out).

After recovery: exactly one refund, the approval's outcome ``REFUNDED``, the customer's
follow-up said once, and ``signoff audit verify`` passing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agent.errors import DecisionError, Unavailable
from agent.worker import Worker
from sandbox.store import SandboxStore
from storage.approvals import ApprovalRepo
from storage.ledger import Ledger
from storage.records import Approval
from tests.fault_kit import refunds_of
from tests.gatekeeper_kit import ledger_rows
from tests.pg_fault_kit import (
    audit_verifies,
    cut_before_commit,
    fresh,
    lose_the_answer,
    read_only_during,
    start_later,
)
from tests.pg_server import PgServer, available, make_server, remove
from tests.support import SUP_A, Harness, seeded
from tests.test_loop_support import open_refund_approval
from tests.test_resume import follow_up_planner

pytestmark = [
    pytest.mark.skipif(available() is not None, reason=available() or ""),
    pytest.mark.asyncio(loop_scope="module"),
]

#: Every fault is recovered from within this many seconds of its end.
RECOVERY_S = 10.0
TOLD = "Good news: your refund of $189.00 was approved and issued."


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[PgServer]:
    s = await make_server()
    yield s
    await remove(s)


async def approval_on(server: PgServer) -> tuple[str, Harness, Approval]:
    """A fresh database with the demo shop and a refund waiting for a supervisor."""
    name, db = await fresh(server)
    h = await seeded(db, follow_up_planner())
    return name, h, await open_refund_approval(h)


async def approve(h: Harness, a: Approval) -> Any:
    return await asyncio.wait_for(
        h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_A), timeout=RECOVERY_S
    )


async def assert_refunded_once_and_told(server: PgServer, name: str, h: Harness, a: Approval, tmp: Path) -> None:
    """The worker runs the approval's resume job; then one refund, a ``succeeded`` ledger row,
    the approval ``REFUNDED``, the customer told once, and the audit chain verifying."""
    h.clock.now += timedelta(seconds=30)  # the resume job is due
    await Worker(h.runtime).run_once()
    done = await h.services.approvals.get(a.id)
    assert done is not None and done.status == "approved", done
    assert done.result is not None and done.result["status"] == "REFUNDED", done.result
    refunds = await _refunds(h, a)
    assert len(refunds) == 1, refunds
    assert [r["status"] for r in await ledger_rows(h.db) if r["tool"] == "issue_refund"] == ["succeeded"]
    assert h.notifier.of("follow_up") == [(a.conversation_id, TOLD)]
    assert (await h.services.jobs.pending_count()) == 0 and not await h.services.jobs.quarantined()
    await audit_verifies(server.url(name), tmp)


async def test_read_only_window_while_the_approvals_settle_runs(
    server: PgServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name, h, a = await approval_on(server)
    try:
        window = read_only_during(monkeypatch, server, name, Ledger, "settle")
        decided = await approve(h, a)
        await window[0]
        assert decided.result is not None and decided.result["status"] == "REFUNDED", decided
        await assert_refunded_once_and_told(server, name, h, a, tmp_path)
    finally:
        await h.db.dispose()


async def test_connection_terminated_inside_the_approvals_settle(
    server: PgServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name, h, a = await approval_on(server)
    try:
        cut = cut_before_commit(monkeypatch, h.db, Ledger, "settle")
        decided = await approve(h, a)
        assert cut and decided.result is not None and decided.result["status"] == "REFUNDED", decided
        await assert_refunded_once_and_told(server, name, h, a, tmp_path)
    finally:
        await h.db.dispose()


async def test_restart_between_the_approved_refund_and_its_settle(
    server: PgServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The approve answers ``Unavailable`` (503); the background task settles the refund once the
    server is back; the resume job finishes the approval from the ledger (no second refund)."""
    name, h, a = await approval_on(server)
    try:
        h.services.executor.settle_budget_s = 0.5
        original, restarts = SandboxStore.issue_refund, []

        async def write_then_restart(self: SandboxStore, *args: Any, **kw: Any) -> Any:
            result = await original(self, *args, **kw)
            await server.stop()
            restarts.append(asyncio.create_task(start_later(server, 2.0)))
            return result

        monkeypatch.setattr(SandboxStore, "issue_refund", write_then_restart)
        with pytest.raises(Unavailable):
            await approve(h, a)
        await restarts[0]
        await asyncio.wait_for(h.services.executor.drain(), timeout=RECOVERY_S)
        monkeypatch.setattr(SandboxStore, "issue_refund", original)
        await assert_refunded_once_and_told(server, name, h, a, tmp_path)
    finally:
        await h.db.dispose()


async def test_approve_cut_at_its_commit_is_sent_again(
    server: PgServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The supervisor's approve has its session terminated at the COMMIT of the approval's
    transition (with its resume job): nothing stays, the approve answers ``Unavailable``, and the
    same click sent again (the same version) is taken and carried out: one refund, told once."""
    name, h, a = await approval_on(server)
    try:
        with monkeypatch.context() as patch:
            hit = cut_before_commit(patch, h.db, ApprovalRepo, "transition")
            with pytest.raises(Unavailable):
                await approve(h, a)
        assert hit and await _refunds(h, a) == []
        pending = await h.services.approvals.get(a.id)
        assert pending is not None and pending.status == "pending" and pending.version == 1, pending
        again = await approve(h, a)
        assert again.result is not None and again.result["status"] == "REFUNDED", again
        await assert_refunded_once_and_told(server, name, h, a, tmp_path)
    finally:
        await h.db.dispose()


async def test_approve_whose_answer_is_lost_after_its_commit_is_carried_out(
    server: PgServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The approval's transition commits and its answer is lost: the approve answers
    ``Unavailable``; the decision stands (the same click again is told it is already approved,
    409, as the API promises for a decided approval), and the resume job committed with it
    carries it out once and tells the customer."""
    name, h, a = await approval_on(server)
    try:
        with monkeypatch.context() as patch:
            hit = lose_the_answer(patch, ApprovalRepo, "transition")
            with pytest.raises(Unavailable):
                await approve(h, a)
        assert hit and await _refunds(h, a) == []
        with pytest.raises(DecisionError, match="already approved"):
            await approve(h, a)
        await assert_refunded_once_and_told(server, name, h, a, tmp_path)
    finally:
        await h.db.dispose()


async def _refunds(h: Harness, a: Approval) -> list[dict[str, Any]]:
    return [r for r in await refunds_of(h.db, a.arguments["order_id"]) if r["amount_minor"] == 18900]
