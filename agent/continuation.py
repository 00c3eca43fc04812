"""Continuing a conversation after something happened outside a model step.

A confirmation answered, an approval decided or expired, a crash recovered: each
appends one runtime event to the history (exactly once: the event's key is
stored with it) and lets the agent answer; the answer then goes to the face
that owns the conversation. Every path that does this goes through here.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.history import event_block
from agent.host import Host
from agent.loop import run_loop
from agent.notify import best_effort
from agent.outcomes import Pending, TurnResult
from agent.turn import Turn
from storage.audit import AuditEvent
from storage.records import Conversation
from storage.steps import StepWrite


async def with_event(
    turn: Turn, text: str, *, key: str, audit: Sequence[AuditEvent] = (), pending: Sequence[Pending] = ()
) -> TurnResult | None:
    """Append the runtime event ``text`` under ``key`` and run the loop; ``None`` when the
    conversation already holds that event (someone delivered it before: nothing to do)."""
    step = StepWrite(
        conversation_id=turn.conversation.id,
        run_id=turn.run.id,
        messages=[("user", [event_block(text)])],
        run_status="running",
        audit=list(audit),
        event_key=key,
    )
    if not await turn.commit(step):
        # Delivered before — but if the process that delivered it died before the agent
        # answered, that answer is still owed: take the run over and give it, once.
        run = turn.run
        if turn.services.conversations.abandoned(run) and await turn.services.conversations.take_over_run(run):
            return await run_loop(turn)
        return None
    held = {p.id for p in turn.pending}  # an approval the gate just opened in this turn is there already
    turn.pending.extend(p for p in pending if p.id not in held)
    return await run_loop(turn)


async def deliver(rt: Host, conversation: Conversation, result: TurnResult | None) -> None:
    """Send the agent's answer to the conversation's face (best effort: the state is committed);
    once it went out, the confirmations it rendered count as shown to their principal."""
    if result is None or not result.reply:
        return
    if await best_effort(rt.s.notifier.follow_up(conversation, result), "follow-up"):
        await rt.delivered(result)
