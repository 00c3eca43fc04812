"""How the runtime tells the outside world about things (Slack, email, logs).

Faces implement :class:`Notifier`; the runtime never imports a face. Every
notification is best-effort and after commit: the durable state is already
written, so a failed post loses nothing (it is logged).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol

from storage.records import Approval, Conversation

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class EscalationNotice:
    conversation: Conversation
    reason: str
    summary: str
    #: Every tool call of the run: tool, gate decision, reason, result excerpt.
    trace: tuple[dict[str, Any], ...]


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
    async def approval_requested(self, approval: Approval) -> None: ...
    async def approval_decided(self, approval: Approval) -> None: ...
    async def escalated(self, notice: EscalationNotice) -> None: ...
    async def follow_up(self, conversation: Conversation, text: str) -> None:
        """A reply the agent composed after a resume (approval decided, expired)."""
        ...


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

    async def follow_up(self, conversation: Conversation, text: str) -> None:
        log.info("follow-up in %s (%d characters, not delivered: no face configured)", conversation.id, len(text))


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

    async def follow_up(self, conversation: Conversation, text: str) -> None:
        self.events.append(("follow_up", (conversation.id, text)))
        log.info("follow-up in %s", conversation.id)

    def of(self, kind: str) -> list[Any]:
        return [payload for k, payload in self.events if k == kind]
