"""How the runtime tells the outside world about things (Slack, email, logs).

Faces implement :class:`Notifier`; the runtime never imports a face. Every
notification is best-effort and after commit: the durable state is already
written, so a failed post loses nothing (it is logged).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from agent.outcomes import TurnResult
from storage.records import Approval, Conversation

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class EscalationNotice:
    conversation: Conversation
    reason: str
    summary: str
    #: Every tool call of the run: tool, gate decision, reason, result excerpt.
    trace: tuple[dict[str, Any], ...]
    #: The hand-off a person takes over from this post (customers' conversations; ``agent/handoff.py``).
    handoff_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class ShadowNotice:
    """An action the agent proposed while its unit is in shadow: recorded, never executed.

    Staff see it as a suggestion (``agent.views.shadow_view``), built from these exact
    arguments and the gate's summary of them, never from the model's words."""

    conversation: Conversation
    proposal_id: str
    tool: str
    arguments: dict[str, Any]
    #: The tool's own description of the exact arguments (``ToolDef.describe``).
    summary: str
    #: What the gate would have asked for outside shadow: ``execute`` or ``approval``.
    would_need: str
    #: Who asked (``customer:C-7``, ``rep:S-1``).
    requester: str
    customer_id: str | None
    policy_version: str
    created_at: datetime


async def best_effort(aw: Awaitable[Any], what: str = "notification") -> bool:
    """Await a notification; a failure is logged, never raised (the state is committed already).
    True when it went out."""
    try:
        await aw
    except Exception:
        log.exception("%s failed", what)
        return False
    return True


class Notifier(Protocol):
    """Where the runtime's news goes. Faces implement it; :class:`RoutingNotifier` picks the face."""

    async def approval_requested(self, approval: Approval) -> None:
        """A new approval waits for a supervisor (show its card)."""
        ...

    async def approval_decided(self, approval: Approval) -> None:
        """An approval moved on, on whatever surface (redraw its card)."""
        ...

    async def escalated(self, notice: EscalationNotice) -> None:
        """A conversation was handed to a person (with the agent's trace)."""
        ...

    async def shadow_recorded(self, notice: ShadowNotice) -> None:
        """The agent proposed an action in shadow: show staff the suggestion ("shadow: not
        executed"), once per proposal."""
        ...

    async def follow_up(self, conversation: Conversation, result: TurnResult) -> None:
        """The agent's answer after something happened outside a turn (an approval decided, a
        confirmation carried out after a crash): deliver ``result`` where the conversation lives."""
        ...


@dataclass(frozen=True, kw_only=True)
class RoutingNotifier:
    """Each notification to the face that owns it.

    A follow-up goes to the face of the conversation's channel (``faces``); approval cards
    and escalations go to every staff surface (``staff``: the Slack approvals channel, Teams);
    whatever has no face is logged (``fallback``). One failing staff surface does not keep
    the others from hearing; a follow-up's failure is the caller's to see (it is not shown).
    """

    faces: Mapping[str, Notifier] = field(default_factory=dict)
    staff: Sequence[Notifier] = ()
    fallback: Notifier = field(default_factory=lambda: LogNotifier())
    _added: dict[str, Notifier] = field(default_factory=dict)
    _added_staff: list[Notifier] = field(default_factory=list)

    def add(self, channel: str, face: Notifier, *, staff: bool = False) -> None:
        """Plug in a face built after the runtime (it needs the runtime to act): its
        conversations' follow-ups, and with ``staff`` the approval cards and escalations."""
        self._added[channel] = face
        if staff:
            self._added_staff.append(face)

    async def approval_requested(self, approval: Approval) -> None:
        await self._broadcast("approval notification", lambda n: n.approval_requested(approval))

    async def approval_decided(self, approval: Approval) -> None:
        await self._broadcast("approval notification", lambda n: n.approval_decided(approval))

    async def escalated(self, notice: EscalationNotice) -> None:
        await self._broadcast("escalation", lambda n: n.escalated(notice))

    async def shadow_recorded(self, notice: ShadowNotice) -> None:
        await self._broadcast("shadow notification", lambda n: n.shadow_recorded(notice))

    async def follow_up(self, conversation: Conversation, result: TurnResult) -> None:
        face = self._added.get(conversation.channel) or self.faces.get(conversation.channel, self.fallback)
        await face.follow_up(conversation, result)

    async def _broadcast(self, what: str, call: Callable[[Notifier], Awaitable[None]]) -> None:
        for surface in [*self.staff, *self._added_staff] or [self.fallback]:
            await best_effort(call(surface), what)


class LogNotifier:
    """Production's notifier until a face plugs in its own: logs ids, keeps nothing.

    Summaries and follow-up texts can carry personal data (a new address, an email), so only
    ids, statuses and reason codes are logged.
    """

    async def approval_requested(self, approval: Approval) -> None:
        log.info("approval requested %s (%s, needs %s)", approval.id, approval.tool, approval.required_role)

    async def approval_decided(self, approval: Approval) -> None:
        log.info("approval %s is %s", approval.id, approval.status)

    async def escalated(self, notice: EscalationNotice) -> None:
        log.info("conversation %s escalated: %s", notice.conversation.id, notice.reason)

    async def shadow_recorded(self, notice: ShadowNotice) -> None:
        log.info("shadow proposal %s (%s) in %s: not executed", notice.proposal_id, notice.tool, notice.conversation.id)

    async def follow_up(self, conversation: Conversation, result: TurnResult) -> None:
        size = len(result.reply)
        log.info("follow-up in %s (%d characters, not delivered: no face configured)", conversation.id, size)


@dataclass
class RecordingNotifier:
    """Keeps every notification in memory (tests, the demo) and logs it. Never in production:
    its list grows with every event (the composition root uses :class:`LogNotifier`)."""

    events: list[tuple[str, Any]] = field(default_factory=list)

    async def approval_requested(self, approval: Approval) -> None:
        self.events.append(("approval_requested", approval))
        log.info("approval requested %s (%s)", approval.id, approval.tool)

    async def approval_decided(self, approval: Approval) -> None:
        self.events.append(("approval_decided", approval))
        log.info("approval %s is %s", approval.id, approval.status)

    async def escalated(self, notice: EscalationNotice) -> None:
        self.events.append(("escalated", notice))
        log.info("conversation %s escalated: %s", notice.conversation.id, notice.reason)

    async def shadow_recorded(self, notice: ShadowNotice) -> None:
        self.events.append(("shadow_recorded", notice))
        log.info("shadow proposal %s (%s): not executed", notice.proposal_id, notice.tool)

    async def follow_up(self, conversation: Conversation, result: TurnResult) -> None:
        self.events.append(("follow_up", (conversation.id, result.reply)))
        log.info("follow-up in %s", conversation.id)

    def of(self, kind: str) -> list[Any]:
        return [payload for k, payload in self.events if k == kind]
