"""Acting on what a person settled: a confirmation's yes, an approver's decision, a proposal
a crash interrupted. The whole gate runs again on the exact arguments shown, under the money
lock when it moves money, and its outcome is stored with the gate's audit event in one write."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent import steps
from agent.decisions import DecisionTag
from agent.errors import InProgress
from agent.gatekeeper import Proposed, args_hash
from agent.history import new_id
from agent.services import Services
from agent.turn import Turn
from storage.records import Approval
from storage.steps import NewProposal, ProposalOutcome, StepWrite


@dataclass(frozen=True, kw_only=True)
class ApplyResult:
    """How the gate decided an action a person settled, and what came of it."""

    decision: DecisionTag
    result: Any
    is_error: bool
    approval: Approval | None

    def outcome(self) -> dict[str, Any]:
        """The stored form (a confirmation's ``outcome``)."""
        return {
            "decision": self.decision,
            "result": self.result,
            "is_error": self.is_error,
            "approval_id": self.approval.id if self.approval else None,
        }


async def apply(
    s: Services,
    turn: Turn,
    *,
    tool: str,
    args: Any,
    origin: str,
    approval: Approval | None = None,
    proposal_id: str | None = None,
    key: str | None = None,
    confirmation_id: str | None = None,
) -> ApplyResult:
    """Judge and act on an action that a human settled (confirmed or approved).

    The whole gate runs again: preconditions are re-checked immediately before
    execution, and a verdict that changed while it waited is not executed.
    ``proposal_id`` re-judges a proposal persisted earlier (a confirmation's, or one
    a crash interrupted); ``key`` is the idempotency key fixed when the action was
    first judged; ``confirmation_id`` stores the outcome on that confirmation in the
    same transaction as the proposal's.
    """
    p = Proposed(tool=tool, args=args, hash=args_hash(tool, args))
    prop_id = proposal_id or await _propose(turn, p, origin)
    ctx = steps.tool_context(turn, prop_id)
    try:
        async with steps.money_lock(turn, tool):
            decision = await steps.decide(
                turn, p, prop_id, ctx, resumed=proposal_id is not None, approval=approval, dedup=False, key=key
            )
            result, is_error, used_key = await steps.act(turn, decision, p, prop_id, ctx, approval=approval)
    finally:
        await steps.announce(turn)  # the card of an approval it opened, the money lock released
    if is_error and isinstance(result, dict) and result.get("error") == "in_progress":
        # Another live process is carrying this very proposal out: its outcome will be recorded.
        raise InProgress("This action is being carried out right now; its outcome follows.")
    new_approval = await s.approvals.get(turn.pending[-1].id) if decision.tag == "approval" else None
    applied = ApplyResult(decision=decision.tag, result=result, is_error=is_error, approval=new_approval)
    await _record_applied(
        turn,
        p,
        prop_id,
        applied,
        origin=origin,
        key=used_key,
        confirmation_id=confirmation_id,
        reason=getattr(decision, "reason", None),
    )
    return applied


async def _record_applied(
    turn: Turn,
    p: Proposed,
    prop_id: str,
    applied: ApplyResult,
    *,
    origin: str,
    key: str | None,
    confirmation_id: str | None,
    reason: str | None,
) -> None:
    """Store a settled action's outcome, its gate event and the run's state in one write."""
    outcome = ProposalOutcome(
        id=prop_id,
        decision=applied.decision,
        reason=reason,
        result=applied.result,
        is_error=applied.is_error,
        idempotency_key=key,
    )
    gate = turn.event(
        f"gate.{applied.decision}",
        proposal_id=prop_id,
        tool=p.tool,
        args_hash=p.hash,
        idempotency_key=key,
        data={"origin": origin, "is_error": applied.is_error, "reason": reason},
    )
    await turn.commit(
        StepWrite(
            conversation_id=turn.conversation.id,
            run_id=turn.run.id,
            outcomes=[outcome],
            audit=[gate],
            run_state=turn.run_state(),
            pending_ids=[x.id for x in turn.pending],
            confirmation_outcome=(confirmation_id, applied.outcome()) if confirmation_id else None,
        )
    )


async def _propose(turn: Turn, p: Proposed, origin: str) -> str:
    """Record a runtime proposal (what a person settled, re-judged now) with its audit event; its id."""
    prop_id = new_id("prop")
    prop = NewProposal(
        id=prop_id,
        tool_use_id=f"runtime:{origin.partition(':')[2] or origin}",
        origin=origin,
        tool=p.tool,
        arguments=p.args,
        args_hash=p.hash,
        principal=turn.principal.key,
        step=turn.facts.step,
        policy_version=turn.policy.version,
    )
    event = turn.event("proposal", proposal_id=prop_id, tool=p.tool, args_hash=p.hash, data={"origin": origin})
    await turn.commit(
        StepWrite(conversation_id=turn.conversation.id, run_id=turn.run.id, new_proposals=[prop], audit=[event])
    )
    return prop_id
