"""Approvals (C7, S4) on SQLite and PostgreSQL: the lifecycle
``pending → approved | rejected | expired | superseded`` through the one decision
function, version-checked, with segregation of duties, dual approval, expiry, and
preconditions and policy re-checked immediately before execution."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from agent.errors import DecisionError
from agent.policy import Ceilings
from agent.runtime import Runtime
from bot.app import sandbox_services
from storage.db import Database
from storage.records import Approval
from tests.support import C7, REP, SUP_A, SUP_B, seeded
from tests.test_loop_support import (
    BIG_REFUND,
    advance,
    audit_kinds,
    dual_policy,
    ledger_rows,
    open_refund_approval,
    policy_with,
    refund_planner,
    store_refunds,
)
from tools.context import Principal

SUP_C = Principal(kind="supervisor", id="S-9")


async def _setup(db: Database, **kwargs: Any) -> tuple[Any, Approval]:
    h = await seeded(db, refund_planner(BIG_REFUND), **kwargs)
    return h, await open_refund_approval(h)


async def _refused(coro: Any) -> str:
    with pytest.raises(DecisionError) as exc:
        await coro
    return exc.value.code


# -- allowed transitions -----------------------------------------------------------------


async def test_pending_to_approved_executes_once(any_db: Database) -> None:
    """pending → approved at the expected version; the action runs once and the result is stored."""
    h, a = await _setup(any_db)
    assert (a.status, a.version, a.approvals_required, a.required_role) == ("pending", 1, 1, "supervisor")
    out = await h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_A)
    assert (out.approval.status, out.approval.version, out.approval.decider) == ("approved", 2, "supervisor:S-3")
    assert out.result["status"] == "REFUNDED"
    stored = await h.services.approvals.get(a.id)
    assert stored is not None and stored.result == out.result
    assert await store_refunds(any_db, "O-1042") == 1
    assert await ledger_rows(any_db) == 1
    assert await h.services.jobs.pending_count(kinds=["resume"]) == 1


async def test_pending_to_rejected_runs_nothing(any_db: Database) -> None:
    """pending → rejected (a comment is required); nothing is executed; a resume is queued."""
    h, a = await _setup(any_db)
    assert await _refused(h.runtime.decide(a.id, expected_version=1, decision="reject", actor=SUP_A)) == "invalid"
    out = await h.runtime.decide(
        a.id, expected_version=1, decision="reject", actor=SUP_A, comment="Photo evidence needed first."
    )
    assert (out.approval.status, out.result) == ("rejected", None)
    assert out.approval.comment == "Photo evidence needed first."
    assert await store_refunds(any_db, "O-1042") == 0
    assert await h.services.jobs.pending_count(kinds=["resume"]) == 1


async def test_pending_to_expired_on_decision_after_expires_at(any_db: Database) -> None:
    """A decision after ``expires_at`` is refused as expired and the approval becomes expired."""
    h, a = await _setup(any_db)
    advance(h.clock, (a.expires_at - h.clock.now).total_seconds() + 1)
    assert await _refused(h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_A)) == "expired"
    stored = await h.services.approvals.get(a.id)
    assert stored is not None and stored.status == "expired"
    assert await _refused(h.runtime.decide(a.id, expected_version=2, decision="approve", actor=SUP_B)) == "expired"
    assert await store_refunds(any_db, "O-1042") == 0


async def test_expiry_sweep_expires_stale_approvals_and_enqueues_a_resume(any_db: Database) -> None:
    """``Runtime.expire_stale`` expires every pending approval past ``expires_at`` (and only
    those), enqueues its resume job, and tells the notifier; the resume says it expired."""
    h, a = await _setup(any_db)
    assert await h.runtime.expire_stale() == 0
    advance(h.clock, 86400 + 1)
    assert await h.runtime.expire_stale() == 1
    assert await h.runtime.expire_stale() == 0
    stored = await h.services.approvals.get(a.id)
    assert stored is not None and stored.status == "expired"
    assert await h.services.jobs.pending_count(kinds=["resume"]) == 1
    assert [x.status for x in h.notifier.of("approval_decided")] == ["expired"]
    follow = await h.runtime.resume(a.id)
    assert follow is not None
    assert await store_refunds(any_db, "O-1042") == 0
    assert (
        await _refused(h.runtime.decide(a.id, expected_version=stored.version, decision="approve", actor=SUP_A))
        == "expired"
    )


async def test_pending_to_superseded_by_an_edited_approval(any_db: Database) -> None:
    """Approving with edited arguments supersedes the original and judges the edit from
    scratch: the customer has not confirmed those arguments, so they are asked to; once they
    confirm, the edit (still over the ceiling) waits for its own approval, and only it runs."""
    h, a = await _setup(any_db)
    edited = {**BIG_REFUND, "amount_minor": 15000}
    out = await h.runtime.decide(
        a.id,
        expected_version=1,
        decision="approve",
        actor=SUP_A,
        edited_arguments=edited,
        comment="Partial refund: one item was fine.",
    )
    assert out.approval.status == "superseded"
    assert out.result["status"] == "CONFIRMATION_REQUIRED"
    assert await _refused(h.runtime.decide(a.id, expected_version=2, decision="approve", actor=SUP_B)) == "conflict"
    assert await store_refunds(any_db, "O-1042") == 0
    confirmed = await h.runtime.confirm(out.result["confirmation_id"], actor=C7, accept=True)
    new = confirmed.approval
    assert new is not None and new.id != a.id and new.status == "pending" and new.arguments == edited
    done = await h.runtime.decide(new.id, expected_version=1, decision="approve", actor=SUP_B)
    assert done.result["status"] == "REFUNDED" and done.result["amount_minor"] == 15000
    refunds = await h.services.backend.list_refunds("C-7", order_id="O-1042")
    assert [r.amount_minor for r in refunds] == [15000]


async def test_dual_approval_pending_v2_then_approved_by_a_second_supervisor(any_db: Database) -> None:
    """Above the higher threshold two distinct supervisors must approve: the first moves it to
    version 2 (still pending, nothing runs), the same supervisor again is refused, a second
    distinct supervisor approves and the action runs once."""
    h, a = await _setup(any_db, policy=dual_policy(10000))
    assert a.approvals_required == 2
    first = await h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_A)
    assert (first.approval.status, first.approval.version, first.result) == ("pending", 2, None)
    assert await store_refunds(any_db, "O-1042") == 0
    assert await _refused(h.runtime.decide(a.id, expected_version=2, decision="approve", actor=SUP_A)) == "conflict"
    assert await _refused(h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_B)) == "conflict"
    second = await h.runtime.decide(a.id, expected_version=2, decision="approve", actor=SUP_B)
    assert (second.approval.status, second.approval.version) == ("approved", 3)
    assert [d.actor for d in second.approval.decisions] == ["supervisor:S-3", "supervisor:S-4"]
    assert second.result["status"] == "REFUNDED"
    assert await store_refunds(any_db, "O-1042") == 1
    assert await audit_kinds(any_db, "approval.partially_approved") == 1
    assert await audit_kinds(any_db, "approval.approved") == 1


# -- disallowed transitions ---------------------------------------------------------------


async def test_approved_is_final(any_db: Database) -> None:
    """approved → anything is refused (approve again, reject, another supervisor)."""
    h, a = await _setup(any_db)
    await h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_A)
    for actor, decision, version in (
        (SUP_B, "approve", 2),
        (SUP_B, "reject", 2),
        (SUP_A, "reject", 2),
        (SUP_B, "approve", 1),
    ):
        code = await _refused(
            h.runtime.decide(a.id, expected_version=version, decision=decision, actor=actor, comment="no")
        )
        assert code == "conflict", (actor, decision, version)
    assert await store_refunds(any_db, "O-1042") == 1


async def test_rejected_cannot_be_approved(any_db: Database) -> None:
    """rejected → approved is refused at any version."""
    h, a = await _setup(any_db)
    await h.runtime.decide(a.id, expected_version=1, decision="reject", actor=SUP_A, comment="no")
    for version in (1, 2):
        assert (
            await _refused(h.runtime.decide(a.id, expected_version=version, decision="approve", actor=SUP_B))
            == "conflict"
        )
    assert await store_refunds(any_db, "O-1042") == 0


async def test_wrong_version_is_refused_and_changes_nothing(any_db: Database) -> None:
    """A decision at a stale or future version is a conflict; the approval stays as it was."""
    h, a = await _setup(any_db)
    for version in (0, 2, 7):
        assert (
            await _refused(h.runtime.decide(a.id, expected_version=version, decision="approve", actor=SUP_A))
            == "conflict"
        )
    stored = await h.services.approvals.get(a.id)
    assert stored is not None and (stored.status, stored.version, stored.decisions) == ("pending", 1, ())


@pytest.mark.parametrize("status", ["approved", "rejected", "expired", "superseded"])
async def test_repository_compare_and_set_only_moves_pending_rows(any_db: Database, status: str) -> None:
    """At the repository: a transition from any final status, or at the wrong version, moves nothing."""
    h, a = await _setup(any_db)
    moved = await h.services.approvals.transition(a.id, expected_version=1, values={"status": status})
    assert moved is not None and moved.status == status and moved.version == 2
    for version in (1, 2, 3):
        assert (
            await h.services.approvals.transition(a.id, expected_version=version, values={"status": "approved"}) is None
        )
    stored = await h.services.approvals.get(a.id)
    assert stored is not None and stored.status == status


# -- who may decide ---------------------------------------------------------------------------


async def test_a_rep_and_a_customer_may_not_decide(any_db: Database) -> None:
    """Only the required role decides: a rep and a customer are refused (forbidden)."""
    h, a = await _setup(any_db)
    assert await _refused(h.runtime.decide(a.id, expected_version=1, decision="approve", actor=REP)) == "forbidden"
    assert await _refused(h.runtime.decide(a.id, expected_version=1, decision="approve", actor=C7)) == "forbidden"
    stored = await h.services.approvals.get(a.id)
    assert stored is not None and stored.status == "pending" and stored.version == 1


async def test_the_requester_cannot_approve_their_own_request(any_db: Database) -> None:
    """Segregation of duties: a supervisor working a case in assist mode requests a refund over
    their own ceiling; they are refused (own_request), another supervisor may approve it."""
    ceilings = Ceilings(customer={"USD": 5000}, rep={"USD": 5000}, supervisor={"USD": 5000}, default=5000)
    h = await seeded(any_db, refund_planner(BIG_REFUND), policy=policy_with(ceilings=ceilings))
    sup = Principal(kind="supervisor", id="S-3", customer_id="C-7")
    a = await open_refund_approval(h, principal=sup)
    assert a.requester == "supervisor:S-3"
    assert await _refused(h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_A)) == "own_request"
    assert await store_refunds(any_db, "O-1042") == 0
    out = await h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_B)
    assert out.approval.status == "approved" and out.result["status"] == "REFUNDED"


# -- preconditions and policy re-checked at execution -------------------------------------------


async def test_refunded_meanwhile_fails_at_execution_and_moves_no_money(any_db: Database) -> None:
    """The order was refunded directly in the store while the approval waited: at execution
    the gate re-runs, the result is FAILED with the reason, and no money moves."""
    h, a = await _setup(any_db)
    await h.services.backend.issue_refund(
        "C-7",
        "O-1042",
        amount_minor=18900,
        currency="USD",
        reason_code="damaged",
        return_id=None,
        idempotency_key="direct:O-1042",
    )
    out = await h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_A)
    assert out.approval.status == "approved"
    assert out.result["status"] == "FAILED"
    assert out.result["error"] == "amount_exceeds_refundable" and out.result["refundable_minor"] == 0
    assert "precondition" in out.result["reason"]
    assert await store_refunds(any_db, "O-1042") == 1  # the direct one only
    assert await ledger_rows(any_db) == 0
    stored = await h.services.approvals.get(a.id)
    assert stored is not None and stored.result["status"] == "FAILED"


async def test_stricter_policy_while_waiting_reopens_instead_of_executing(any_db: Database) -> None:
    """Approved under the old policy but the policy changed (a second runtime with a lower dual
    threshold): execution is not attempted; a new approval needing two supervisors opens."""
    h, a = await _setup(any_db)
    assert a.approvals_required == 1
    stricter = sandbox_services(
        db=any_db, model=h.services.model, policy=dual_policy(10000, "2026.12.1"), notifier=h.notifier, clock=h.clock
    )
    rt2 = Runtime(stricter)
    out = await rt2.decide(a.id, expected_version=1, decision="approve", actor=SUP_A)
    assert out.result["status"] == "REOPENED"
    new = await h.services.approvals.get(out.result["new_approval_id"])
    assert new is not None and new.status == "pending"
    assert (new.approvals_required, new.policy_version) == (2, "2026.12.1")
    assert await store_refunds(any_db, "O-1042") == 0
    assert await ledger_rows(any_db) == 0


# -- races ------------------------------------------------------------------------------------


async def test_fifty_concurrent_decisions_by_two_supervisors_end_in_one_decision(any_db: Database) -> None:
    """50 approve/reject calls from two supervisors at once (truly parallel connections on
    PostgreSQL): exactly one decision is recorded and the action runs at most once."""
    h, a = await _setup(any_db)
    calls = []
    for i in range(50):
        actor = SUP_A if i % 2 else SUP_B
        decision = "approve" if i % 3 else "reject"
        calls.append(h.runtime.decide(a.id, expected_version=1, decision=decision, actor=actor, comment="c"))
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    wins = [o for o in outcomes if not isinstance(o, BaseException)]
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(wins) == 1, outcomes
    assert all(isinstance(e, DecisionError) and e.code == "conflict" for e in errors), errors
    final = await h.services.approvals.get(a.id)
    assert final is not None and final.status in ("approved", "rejected") and final.version == 2
    assert len(final.decisions) == 1
    assert await audit_kinds(any_db, "approval.approved", "approval.rejected") == 1
    executed = 1 if final.status == "approved" else 0
    assert await store_refunds(any_db, "O-1042") == executed
    assert await ledger_rows(any_db) == executed
    assert await audit_kinds(any_db, "approval.executed") == executed


async def test_fifty_concurrent_approvals_on_a_dual_approval_execute_once(any_db: Database) -> None:
    """Racing approvals on a two-supervisor approval: at most one decision per version, two
    distinct approvers, one execution."""
    h, a = await _setup(any_db, policy=dual_policy(10000))
    sups = [SUP_A, SUP_B, SUP_C]
    calls = [
        h.runtime.decide(a.id, expected_version=1 + (i % 2), decision="approve", actor=sups[i % 3]) for i in range(50)
    ]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(o, DecisionError) for o in outcomes if isinstance(o, BaseException))
    final = await h.services.approvals.get(a.id)
    assert final is not None
    actors = [d.actor for d in final.decisions]
    assert len(actors) == len(set(actors)) <= 2
    executed = 1 if final.status == "approved" else 0
    assert final.status in ("approved", "pending")
    assert await store_refunds(any_db, "O-1042") == executed
    assert await ledger_rows(any_db) == executed


async def test_expires_at_is_set_from_the_policy(any_db: Database) -> None:
    """Every approval has ``expires_at``: the policy's expiry for the tool after creation."""
    h, a = await _setup(any_db)
    assert a.expires_at - a.created_at == timedelta(seconds=h.services.policy.expiry_s("issue_refund"))


async def test_a_cli_decision_records_its_surface_and_operator_in_the_audit(any_db: Database) -> None:
    """``signoff approvals approve --as`` passes where the decision came from: the audit event
    names the CLI, the operating-system user and the staff id it acted as."""
    h, a = await _setup(any_db)
    via = {"surface": "cli", "operator": "ops-alice", "as": SUP_A.id}
    await h.runtime.decide(a.id, expected_version=1, decision="approve", actor=SUP_A, via=via)
    [event] = [e for e in await h.services.audit.list(kind="approval.approved")]
    assert event.data["via"] == via and event.principal == SUP_A.key


async def test_a_typed_yes_that_opens_an_approval_lists_it_once(any_db: Database) -> None:
    """The customer types "yes" to a refund above their ceiling: the answer's pending list names
    the approval once (the gate's own entry and the continuation's were both added)."""
    h = await seeded(any_db, refund_planner(BIG_REFUND))
    first = await h.runtime.chat(
        principal=C7, channel="api", message="My order O-1042 arrived damaged, please refund it."
    )
    assert [p.kind for p in first.pending] == ["confirmation"]
    yes = await h.runtime.chat(principal=C7, channel="api", message="yes", conversation_id=first.conversation_id)
    approvals = [p.id for p in yes.pending if p.kind == "approval"]
    assert len(approvals) == 1 and len(set(p.id for p in yes.pending)) == len(yes.pending), yes.pending
