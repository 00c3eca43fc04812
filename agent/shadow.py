"""Shadow as staff see it (C16): the agent's proposal is recorded, never executed, and shown
to staff as a suggestion; the person it spoke with is never told it was done.

When the gate decides ``record`` for a proposal, :func:`recorded`:

* tells every staff surface (``Notifier.shadow_recorded``): the Slack assist thread the
  conversation is in, and a card marked "shadow: not executed" in the approvals channel
  (Teams: the approvals conversation), each built from the exact arguments and posted once
  per proposal;
* hands a customer's conversation to a person (a hand-off, once while one is active), without
  counting the run as escalated: the stage asked for it, not the agent, so the rollout
  report's escalation rate stays the agent's own;
* keeps the summary on the turn, so the turn's answer never says it happened
  (:func:`agent.claims.shadow_answer`).
"""

from __future__ import annotations

from agent import gates
from agent.decisions import Record
from agent.gatekeeper import Proposed
from agent.notify import ShadowNotice, best_effort
from agent.turn import Turn

#: The hand-off's reason (audit, the staff post).
REASON = "shadow_proposal"
#: What the model reads in the tool result, to a customer and to staff.
TOLD_CUSTOMER = (
    "Shadow mode: nothing was executed. A person from the team has the case and will follow up. "
    "Tell the customer honestly that it has not been done and that a person will follow up; never say it was done."
)
TOLD_STAFF = (
    "Shadow mode: nothing was executed. It is shown to staff as a suggestion; tell the rep honestly "
    "that it has not been done and is theirs to carry out, or not."
)


async def recorded(turn: Turn, decision: Record, p: Proposed, proposal_id: str) -> str:
    """Show staff the proposal, hand a customer's conversation to a person; what the model is told."""
    s = turn.services
    notice = ShadowNotice(
        conversation=turn.conversation,
        proposal_id=proposal_id,
        tool=p.tool,
        arguments=p.args if isinstance(p.args, dict) else {},
        summary=decision.summary,
        would_need=decision.would_need,
        requester=turn.principal.key,
        customer_id=turn.principal.customer_id,
        policy_version=turn.policy.version,
        created_at=s.clock(),
    )
    await best_effort(s.notifier.shadow_recorded(notice), "shadow notification")
    turn.recorded.append(decision.summary)
    if turn.conversation.principal_kind != "customer":
        return TOLD_STAFF
    if await s.handoffs.active_for(turn.conversation.id) is None:
        summary = f"Shadow: the agent proposed {decision.summary}; nothing was executed. A person decides and replies."
        await gates.escalate(turn, REASON, summary, run=False)
    return TOLD_CUSTOMER


__all__ = ["REASON", "recorded"]
