"""The Slack face's part of :class:`~agent.notify.Notifier`.

* approval cards go to ``SIGNOFF_APPROVALS_CHANNEL`` (posted once per approval; where
  the card is, is kept on the approval's ``surfaces``), and are redrawn from the database
  with ``chat.update`` whenever the approval moves — on any surface;
* escalations go to ``SIGNOFF_ESCALATION_CHANNEL`` with the agent's trace in the thread;
* a follow-up (an approval decided, a confirmation carried out after a crash) lands in the
  thread its conversation came from, once.

Everything here happens after the state is committed: a failure is logged by the caller
(``best_effort``) and loses nothing but the post.
"""

from __future__ import annotations

import logging

from agent.notify import EscalationNotice, ShadowNotice
from agent.outcomes import TurnResult
from agent.views import escalation_view
from bot.slack import blocks, present
from bot.slack import handoff as handoffs
from bot.slack.face import SlackFace, parse_ref
from bot.slack.replies import Where, deliver, post_once
from bot.slack.sender import SlackSendError
from bot.slack.turns import publish_home
from storage.records import Approval, Conversation

log = logging.getLogger(__name__)


class SlackNotifier:
    def __init__(self, face: SlackFace) -> None:
        self.face = face

    # -- approvals ---------------------------------------------------------------------------
    async def approval_requested(self, approval: Approval) -> None:
        channel = self.face.config.approvals_channel
        if not channel:
            return
        card = await present.approval_card(self.face, approval)
        ts = await post_once(self.face, f"slack:approval:{approval.id}", channel, card)
        if ts is not None:
            await self.face.port.show_approval(approval.id, "slack", {"channel": channel, "ts": ts})
        await self._homes()

    async def approval_decided(self, approval: Approval) -> None:
        fresh = await self.face.port.approval(approval.id) or approval
        ref = (fresh.surfaces or {}).get("slack")
        if isinstance(ref, dict) and ref.get("channel") and ref.get("ts"):
            card = await present.approval_card(self.face, fresh)
            await self.face.sender.update(str(ref["channel"]), str(ref["ts"]), card.text, card.block_list)
        await self._homes()

    async def _homes(self) -> None:
        """The queue moved: every supervisor's open App Home is drawn again."""
        for user, team in list(self.face.home_viewers.items()):
            try:
                await publish_home(self.face, user, team)
            except SlackSendError as exc:
                log.info("app home of %s not republished: %s", user, exc.error)

    # -- escalations ------------------------------------------------------------------------------
    async def escalated(self, notice: EscalationNotice) -> None:
        channel = self.face.config.escalation_channel
        if not channel:
            return
        conv = notice.conversation
        view = escalation_view(notice)
        message = blocks.escalation_message(view, oncall_group=self.face.config.oncall_group)
        if notice.handoff_id is not None:
            message = handoffs.with_actions(message, conv.id, notice.handoff_id)
        key = f"slack:escalation:{conv.id}:{len(notice.trace)}:{hash(notice.reason) & 0xFFFF}"
        ts = await post_once(self.face, key, channel, message)
        if ts is None:
            return
        if notice.handoff_id is not None:
            await handoffs.posted(self.face, notice.handoff_id, channel, ts)
        for n, part in enumerate(blocks.trace_messages(view.trace)):
            await post_once(self.face, f"{key}:trace:{n}", channel, part, thread_ts=ts)

    # -- shadow proposals -------------------------------------------------------------------------
    async def shadow_recorded(self, notice: ShadowNotice) -> None:
        """The suggestion in the staff conversation's own assist thread, and its card in the
        approvals channel; each once per proposal (a repaired turn judging it again posts nothing)."""
        conv = notice.conversation
        staff = conv.principal_kind in ("rep", "supervisor")  # an assist thread: no outsider reads along
        thread = parse_ref(conv.external_ref) if staff else None
        if thread is not None:
            face = await self.face.for_team(thread[0])
            note = await present.shadow_card(face, notice, in_thread=True)
            await post_once(face, f"slack:shadow:{notice.proposal_id}:thread", thread[1], note, thread_ts=thread[2])
        channel = self.face.config.approvals_channel
        if channel:
            card = await present.shadow_card(self.face, notice)
            await post_once(self.face, f"slack:shadow:{notice.proposal_id}", channel, card)

    # -- follow-ups -------------------------------------------------------------------------------
    async def follow_up(self, conversation: Conversation, result: TurnResult) -> None:
        thread = parse_ref(conversation.external_ref)
        if thread is None:
            log.warning("follow-up for %s has no Slack thread", conversation.id)
            return
        meta = (conversation.meta or {}).get("slack") or {}
        where = Where(
            channel=thread[1],
            thread_ts=thread[2],
            user=meta.get("user"),
            team=meta.get("team"),
            private=bool(meta.get("private")),
        )
        await deliver(await self.face.for_team(thread[0]), where, result)

    async def home_changed(self, user: str, team: str) -> None:
        """Republish one person's App Home (after the queue changed)."""
        await publish_home(self.face, user, team)
