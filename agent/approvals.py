"""The one decision function (C7), resume after a decision (C8), and expiry.

``decide`` serves Slack buttons, the HTTP API and the CLI alike. Every
transition is compare-and-set on ``version`` from ``pending``; the resume job
is enqueued in the same transaction as the decision. The approved action runs
once, after the last required approval, with the whole gate re-run first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from agent import continuation
from agent.decisions import DecisionTag
from agent.errors import DecisionError, InProgress
from agent.host import Host
from agent.notify import best_effort
from agent.outcomes import TurnResult
from agent.settled import ApplyResult
from agent.tracing import traced_decision, traced_expiry
from agent.wording import APPROVED_EVENT, EXPIRED_EVENT, REJECTED_EVENT, SUPERSEDED_EVENT
from storage.audit import AuditEvent
from storage.records import Approval, Proposal
from tools.context import Principal

RESUME_JOB = "resume"
#: The deciding request normally executes and answers first; the job is the safety net.
RESUME_DELAY_S = 2.0


@dataclass(frozen=True, kw_only=True)
class DecideResult:
    approval: Approval
    result: Any | None


def _event(rt: Host, a: Approval, kind: str, actor: Principal | None, **data: Any) -> AuditEvent:
    return AuditEvent(
        kind=kind,
        run_id=a.run_id,
        proposal_id=a.proposal_id,
        principal=actor.key if actor else "system",
        tool=a.tool,
        args_hash=a.args_hash,
        idempotency_key=a.idempotency_key,
        policy_version=rt.s.policy.version,
        data={"approval_id": a.id, **data},
        ts=rt.s.clock(),
    )


async def _spend_confirmation(rt: Host, a: Approval, actor: Principal | None) -> None:
    """The requester's confirmation was for this attempt: rejected, expired or replaced, it is spent
    (else a later identical proposal would run on it without asking again)."""
    s = rt.s
    conf = await s.confirmations.find_confirmed(a.conversation_id, a.requester, a.tool, a.args_hash)
    if conf is not None:
        await s.confirmations.transition(
            conf.id,
            expected_version=conf.version,
            from_status="confirmed",
            to_status="consumed",
            at=s.clock(),
            audit=[_event(rt, a, "confirmation.consumed", actor, confirmation_id=conf.id)],
        )


@traced_decision
async def decide(
    rt: Host,
    approval_id: str,
    *,
    expected_version: int,
    decision: str,
    actor: Principal,
    comment: str | None = None,
    edited_arguments: dict[str, Any] | None = None,
    via: dict[str, str] | None = None,
) -> DecideResult:
    """Approve or reject ``approval_id`` at ``expected_version`` as ``actor``.

    ``via`` says where the decision came from, into the audit event's data (the CLI: its
    surface and the operating-system user who ran it, beside the ``--as`` staff id).

    Raises :class:`DecisionError` with code not_found, forbidden, own_request,
    conflict (version moved, already decided) or expired.
    """
    s = rt.s
    if decision not in ("approve", "reject"):
        raise DecisionError("invalid", "decision must be approve or reject")
    a = await s.approvals.get(approval_id)
    if a is None:
        raise DecisionError("not_found", "No such approval.")
    _check_decider(rt, a, actor)
    now = s.clock()
    if now >= a.expires_at:
        await _expire(rt, a)
        raise DecisionError("expired", "This approval has expired.")
    if a.version != expected_version:
        raise DecisionError("conflict", f"This approval changed (version {a.version}); reload it.")
    if decision == "reject" and not (comment and comment.strip()):
        raise DecisionError("invalid", "A rejection needs a comment.")
    if edited_arguments is not None and decision == "approve":
        return await _approve_edited(rt, a, actor, comment, edited_arguments)
    moved, final = await _record_decision(rt, a, actor, decision, comment, now, via)
    if moved.status == "rejected":
        await _spend_confirmation(rt, moved, actor)
    result = None
    if moved.status == "approved":
        result = await execute_approved(rt, moved)
        moved = await s.approvals.get(a.id) or moved
    if final:
        await _notify(rt, moved)
    return DecideResult(approval=moved, result=result)


def _check_decider(rt: Host, a: Approval, actor: Principal) -> None:
    """Who may decide ``a`` now: its required role, never the requester, each person once, while pending."""
    if actor.kind not in rt.s.policy.approvers.roles_that_may_approve or actor.kind != a.required_role:
        raise DecisionError("forbidden", f"Only a {a.required_role} may decide this approval.")
    if same_person(actor, a.requester):
        raise DecisionError("own_request", "You cannot decide an approval you requested.")
    if a.status == "expired":
        raise DecisionError("expired", "This approval has expired.")
    if a.status != "pending":
        raise DecisionError("conflict", f"This approval is already {a.status}.")
    if any(same_person(actor, d.actor) for d in a.decisions):
        raise DecisionError("conflict", "You have already approved this; a different supervisor must decide.")


async def _record_decision(
    rt: Host,
    a: Approval,
    actor: Principal,
    decision: str,
    comment: str | None,
    now: datetime,
    via: dict[str, str] | None = None,
) -> tuple[Approval, bool]:
    """Compare-and-set the decision onto ``a`` (final, with its resume job, once enough people approved
    or anyone rejected): the moved approval and whether it is final."""
    entry = {"actor": actor.key, "decision": decision, "comment": comment, "at": now.isoformat()}
    decisions = [d.__dict__ for d in a.decisions] + [entry]
    final = decision == "reject" or len(decisions) >= a.approvals_required
    values: dict[str, Any] = {"decisions": decisions}
    if final:
        values |= {
            "status": "approved" if decision == "approve" else "rejected",
            "decider": actor.key,
            "comment": comment,
            "decided_at": now,
        }
    verdict = "approval.approved" if decision == "approve" else "approval.rejected"
    kind = verdict if final else "approval.partially_approved"
    job = (RESUME_JOB, {"approval_id": a.id}, f"resume:{a.id}", RESUME_DELAY_S) if final else None
    moved = await rt.s.approvals.transition(
        a.id,
        expected_version=a.version,
        values=values,
        audit=[_event(rt, a, kind, actor, comment=bool(comment), **({"via": dict(via)} if via else {}))],
        job=job,
    )
    if moved is None:
        raise DecisionError("conflict", "Someone else decided this approval first.")
    return moved, final


def same_person(actor: Principal, key: str) -> bool:
    """Segregation of duties is about people, not roles: a rep promoted to supervisor is still
    the person who asked. Staff are one person per staff id (their Slack and Teams users map
    to it), whatever role the stored ``kind:id`` names."""
    kind, _, ident = key.partition(":")
    if actor.is_staff and kind in ("rep", "supervisor"):
        return actor.id == ident
    return actor.key == key


async def execute_approved(rt: Host, a: Approval) -> Any:
    """Run the approved action once, re-running the whole gate first; store the result."""
    if a.result is not None:
        return a.result
    conv = await rt.s.conversations.get(a.conversation_id)
    run = await rt.s.conversations.get_run(a.run_id)
    assert conv is not None and run is not None
    requester = Principal.from_key(a.requester, a.customer_id)
    async with rt.lock(conv.id):
        fresh = await rt.s.approvals.get(a.id)
        if fresh is not None and fresh.result is not None:
            return fresh.result  # another caller executed it while this one waited
        held = await rt.s.ledger.get(a.idempotency_key) if a.idempotency_key else None
        if held is not None and held.status == "executing":  # running in another process right now
            raise InProgress("This approved action is still being carried out; the result follows.")
        prop = await rt.s.conversations.proposal_for_origin(f"approval:{a.id}")
        if prop is not None and prop.decision is not None:  # it ran before a crash: record that, never re-run it
            result = _result_for_approver(rt, a, _applied(prop))
        else:
            turn = await rt.turn(conv, requester, run=run)
            applied = await rt.apply(
                turn,
                tool=a.tool,
                args=a.arguments,
                origin=f"approval:{a.id}",
                approval=a,
                proposal_id=prop.id if prop else None,
                key=a.idempotency_key,
            )
            result = _result_for_approver(rt, a, applied)
            if applied.decision != "execute" or applied.is_error:
                await _spend_confirmation(rt, a, None)  # refused at the re-check: never reusable later
        await rt.s.approvals.set_result(
            a.id, result, audit=[_event(rt, a, "approval.executed", None, status=result.get("status"))]
        )
    return result


def _applied(prop: Proposal) -> ApplyResult:
    decision = cast(DecisionTag, prop.decision or "reject")  # a stored verdict: one of the gate's tags
    return ApplyResult(decision=decision, result=prop.result, is_error=prop.is_error, approval=None)


def _result_for_approver(rt: Host, a: Approval, applied: ApplyResult) -> dict[str, Any]:
    if applied.decision == "execute" and not applied.is_error:
        body = applied.result if isinstance(applied.result, dict) else {"result": applied.result}
        tool = rt.s.registry.get(a.tool)
        return {"status": tool.done_status if tool is not None else "DONE", **body}
    if applied.decision == "approval":
        new_id = applied.approval.id if applied.approval is not None else (applied.result or {}).get("approval_id")
        return {
            "status": "REOPENED",
            "new_approval_id": new_id,
            "reason": "The policy or ceiling changed while this waited; a new approval is required.",
        }
    reason = applied.result if isinstance(applied.result, dict) else {"detail": applied.result}
    return {"status": "FAILED", "reason": "A precondition no longer holds; nothing was done.", **reason}


async def _approve_edited(
    rt: Host, a: Approval, actor: Principal, comment: str | None, edited: dict[str, Any]
) -> DecideResult:
    """An edited approval is a new proposal, judged from scratch; the old one is superseded."""
    s = rt.s
    moved = await s.approvals.transition(
        a.id,
        expected_version=a.version,
        values={"status": "superseded", "decider": actor.key, "comment": comment, "decided_at": s.clock()},
        audit=[_event(rt, a, "approval.superseded", actor, edited=True)],
    )
    if moved is None:
        raise DecisionError("conflict", "Someone else decided this approval first.")
    await _spend_confirmation(rt, moved, actor)
    conv = await s.conversations.get(a.conversation_id)
    run = await s.conversations.get_run(a.run_id)
    assert conv is not None and run is not None
    requester = Principal.from_key(a.requester, a.customer_id)
    async with rt.lock(conv.id):
        turn = await rt.turn(conv, requester, run=run)
        applied = await rt.apply(turn, tool=a.tool, args=edited, origin=f"edit:{a.id}")
        # What replaced it: the new approval, or the confirmation the customer must give first.
        new_id = applied.approval.id if applied.approval else (turn.pending[-1].id if turn.pending else None)
        if new_id:
            await s.approvals.set_superseded_by(a.id, new_id)
        text = SUPERSEDED_EVENT.format(
            id=a.id,
            summary=s.registry.tools[a.tool].describe(edited),
            outcome=json.dumps(applied.result, default=str)[:1500],
        )
        reply = await continuation.with_event(turn, text, key=f"approval:{a.id}:superseded", pending=list(turn.pending))
    await continuation.deliver(rt, conv, reply)
    final = await s.approvals.get(a.id) or moved
    return DecideResult(approval=final, result=applied.result)


@traced_expiry
async def _expire(rt: Host, a: Approval) -> bool:
    moved = await rt.s.approvals.transition(
        a.id,
        expected_version=a.version,
        values={"status": "expired", "decided_at": rt.s.clock()},
        audit=[_event(rt, a, "approval.expired", None)],
        job=(RESUME_JOB, {"approval_id": a.id}, f"resume:{a.id}", 0.0),
    )
    if moved is not None:
        await _spend_confirmation(rt, moved, None)
        await _notify(rt, moved)
    return moved is not None


async def expire_stale(rt: Host) -> int:
    """The scheduled job: every pending approval past ``expires_at`` becomes expired."""
    n = 0
    for a in await rt.s.approvals.expired_pending(rt.s.clock()):
        n += await _expire(rt, a)
    return n


async def resume(rt: Host, approval_id: str) -> TurnResult | None:
    """Resume the approval's run with an observation and post the agent's follow-up (once:
    the observation is a keyed runtime event, whatever any message says)."""
    s = rt.s
    a = await s.approvals.get(approval_id)
    if a is None or a.status in ("pending", "superseded"):
        return None
    if a.status == "approved" and a.result is None:
        await execute_approved(rt, a)
        a = await s.approvals.get(approval_id) or a
    conv = await s.conversations.get(a.conversation_id)
    run = await s.conversations.get_run(a.run_id)
    assert conv is not None and run is not None
    principal = Principal.from_key(a.requester, a.customer_id)
    async with rt.lock(conv.id):
        turn = await rt.turn(conv, principal, run=run)
        resumed = turn.event("run.resumed", data={"approval_id": a.id, "status": a.status})
        reply = await continuation.with_event(turn, _observation(a), key=f"approval:{a.id}:{a.status}", audit=[resumed])
    await continuation.deliver(rt, conv, reply)
    return reply


def _observation(a: Approval) -> str:
    if a.status == "approved":
        return APPROVED_EVENT.format(id=a.id, outcome=json.dumps(a.result, default=str)[:1500])
    if a.status == "rejected":
        return REJECTED_EVENT.format(id=a.id, comment=(a.comment or "")[:500])
    return EXPIRED_EVENT.format(id=a.id)


async def _notify(rt: Host, a: Approval) -> None:
    await best_effort(rt.s.notifier.approval_decided(a), "approval notification")
