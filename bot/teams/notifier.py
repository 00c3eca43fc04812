"""The Teams face as a :class:`~agent.notify.Notifier`.

Follow-ups of Teams conversations (``RoutingNotifier.faces["teams"]``) are posted with the
conversation's stored reference, once per answer. With an approvals conversation
configured it is also a staff surface (``RoutingNotifier.staff``): each new approval's card
is posted there once and its place kept in the approval's ``surfaces["teams"]``; whenever
an approval moves on — decided in Teams, Slack, the API or the CLI, or expired — that card
is redrawn from the database for everyone. Escalations go to the same conversation; one that
opened a hand-off carries Take over, Hand back and Close (``bot/teams/takeover.py``). The
agent's proposals in shadow go there too (a card marked "shadow: not executed", once per proposal).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from agent.notify import EscalationNotice, ShadowNotice
from agent.outcomes import TurnResult
from agent.views import escalation_view
from bot.teams import takeover
from bot.teams.cards import escalation_card
from bot.teams.delivery import SURFACE, reply_of
from bot.teams.face import TeamsFace
from bot.teams.present import shadow
from bot.teams.sender import TeamsDeliveryError
from storage.records import Approval, Conversation

log = logging.getLogger(__name__)


class TeamsNotifier:
    """Posts the runtime's news into Teams through one :class:`TeamsFace`."""

    def __init__(self, face: TeamsFace) -> None:
        self.face = face

    async def follow_up(self, conversation: Conversation, result: TurnResult) -> None:
        reference = (conversation.meta.get("teams") or {}).get("reference")
        if not isinstance(reference, dict):
            raise TeamsDeliveryError(f"conversation {conversation.id} has no Teams reference")
        await self.face.poster.post(reply_of(result), reference)

    async def approval_requested(self, approval: Approval) -> None:
        ref = self.face.approvals_reference
        if ref is None:
            return
        card = await self.face.clicks.card(approval)
        activity_id = await self.face.poster.once(
            f"teams:approval:{approval.id}", lambda: self.face.sender.send(ref, card=card)
        )
        if activity_id is not None:
            await self.face.port.show_approval(approval.id, SURFACE, {"reference": ref, "activity_id": activity_id})

    async def approval_decided(self, approval: Approval) -> None:
        fresh = await self.face.port.approval(approval.id) or approval
        shown: dict[str, Any] = fresh.surfaces.get(SURFACE) or {}
        if not shown.get("reference") or not shown.get("activity_id"):
            return
        card = await self.face.clicks.card(fresh)
        await self.face.sender.update(shown["reference"], activity_id=str(shown["activity_id"]), card=card)

    async def escalated(self, notice: EscalationNotice) -> None:
        ref = self.face.approvals_reference
        if ref is None:
            return
        conv = notice.conversation
        card = escalation_card(escalation_view(notice), handoff_id=notice.handoff_id)
        digest = hashlib.sha256(f"{notice.reason}\x1f{notice.summary}".encode()).hexdigest()[:16]
        activity_id = await self.face.poster.once(
            f"teams:escalation:{conv.id}:{digest}", lambda: self.face.sender.send(ref, card=card)
        )
        if notice.handoff_id is not None and activity_id is not None:
            await takeover.posted(self.face.port, notice.handoff_id, ref, activity_id)

    async def shadow_recorded(self, notice: ShadowNotice) -> None:
        ref = self.face.approvals_reference
        if ref is None:
            return
        card = shadow(notice, tool_of=self.face.port.tool)
        await self.face.poster.once(f"teams:shadow:{notice.proposal_id}", lambda: self.face.sender.send(ref, card=card))
