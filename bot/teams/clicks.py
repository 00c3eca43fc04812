"""Adaptive Card clicks (``Action.Execute``): authorized, decided by the runtime, redrawn.

``signoff.confirm`` / ``signoff.decline`` are the acting principal's alone (``Runtime.confirm``
checks the conversation's principal); ``signoff.approve`` / ``signoff.reject`` are staff's
with the approval's role (``Runtime.decide``, version-checked with the card's version). The
clicker's card is replaced by one drawn from the database afterwards; a refused click
changes nothing and shows the refusal — on the current card only to someone entitled to
see it, else as a bare notice (a forged id reveals nothing). A replayed click finds the
decision taken: the runtime returns the stored outcome or refuses the stale version, and
nothing runs twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agent.confirmations import ConfirmResult
from agent.errors import DecisionError
from agent.notify import best_effort
from agent.runtime import Runtime
from bot.teams import present
from bot.teams import wording as say
from bot.teams.cards import APPROVE, CONFIRM, DECLINE, Card
from bot.teams.delivery import SURFACE, Poster, reply_of
from bot.teams.inbound import TeamsCardAction
from bot.teams.invoke import InvokeReply, card_reply, refusal_reply
from bot.teams.people import Person, identify, names_for
from bot.teams.sender import TeamsSender
from storage.records import Approval, Confirmation, Conversation
from tools.backend import CommerceBackend

log = logging.getLogger(__name__)


def refusal_text(exc: DecisionError, *, role: str | None = None) -> str:
    """Our words for the runtime's refusal codes (never its exception text)."""
    return {
        "not_found": say.NOT_FOUND,
        "forbidden": say.WRONG_ROLE.format(role=role) if role else say.NOT_ALLOWED,
        "own_request": say.OWN_REQUEST,
        "expired": say.EXPIRED,
        "conflict": say.ALREADY,
    }.get(exc.code, say.NOT_ALLOWED)


@dataclass
class Clicks:
    """Decides card clicks for one Teams face."""

    runtime: Runtime
    backend: CommerceBackend
    sender: TeamsSender
    poster: Poster
    clock: Callable[[], datetime]
    #: How long a click waits for the agent's follow-up turn before answering with the card.
    budget_s: float = 4.0
    _background: set[asyncio.Task[None]] = field(default_factory=set)

    async def handle(self, action: TeamsCardAction, reference: Mapping[str, Any]) -> InvokeReply:
        person = await identify(self.runtime.s.people, self.backend, action.sender)
        if action.verb in (CONFIRM, DECLINE):
            return await self._confirmation(action, person, reference)
        return await self._approval(action, person)

    # -- confirmations --------------------------------------------------------------
    async def _confirmation(
        self, action: TeamsCardAction, person: Person | None, reference: Mapping[str, Any]
    ) -> InvokeReply:
        s = self.runtime.s
        conf = await s.confirmations.get(action.target_id)
        conv = await s.conversations.get(conf.conversation_id) if conf is not None else None
        if person is None or conf is None or conv is None or not self.runtime.may_see(person.principal, conv):
            return refusal_reply(say.NOT_FOUND if person is not None else say.NOT_ALLOWED)
        if action.version != conf.version:
            return refusal_reply(say.STALE, card=self._confirmation_card(conf))
        task = asyncio.create_task(
            self.runtime.confirm(
                conf.id, actor=person.principal, accept=action.verb == CONFIRM, via="button", deliver_later=True
            )
        )
        done, _ = await asyncio.wait({task}, timeout=self.budget_s)
        if not done:
            # The answer is recorded; the agent is still writing: its words follow in the chat.
            self._finish_later(task, conv, reference)
            fresh = await s.confirmations.get(conf.id) or conf
            card = self._confirmation_card(fresh, decided_by=person.name)
            await self._redraw_confirmation(fresh, card, action, reference)
            return card_reply(card)
        try:
            settled = task.result()
        except DecisionError as exc:
            fresh = await s.confirmations.get(conf.id) or conf
            return refusal_reply(refusal_text(exc), card=self._confirmation_card(fresh))
        card = self._confirmation_card(settled.confirmation, decided_by=person.name)
        await self._redraw_confirmation(settled.confirmation, card, action, reference)
        await self._follow_up(settled, conv, reference)
        return card_reply(card)

    async def _redraw_confirmation(
        self, conf: Confirmation, card: Card, action: TeamsCardAction, reference: Mapping[str, Any]
    ) -> None:
        """Everyone's copy of the card, not only the clicker's."""
        shown = conf.surfaces.get(SURFACE) or {}
        ref = shown.get("reference") or reference
        activity_id = shown.get("activity_id") or action.card_activity_id
        if activity_id:
            await best_effort(self.sender.update(ref, activity_id=activity_id, card=card), "teams card update")

    async def _follow_up(self, settled: ConfirmResult, conv: Conversation, reference: Mapping[str, Any]) -> None:
        if settled.turn is None:
            return
        ref = (conv.meta.get("teams") or {}).get("reference") or reference
        await best_effort(self.poster.post(reply_of(settled.turn), ref), "teams follow-up")

    def _finish_later(self, task: asyncio.Task[ConfirmResult], conv: Conversation, ref: Mapping[str, Any]) -> None:
        async def finish() -> None:
            try:
                settled = await task
            except DecisionError:
                return
            await self._follow_up(settled, conv, ref)

        later = asyncio.create_task(finish(), name=f"teams-confirm-{conv.id}")
        self._background.add(later)
        later.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a Teams confirmation's follow-up failed", exc_info=task.exception())

    # -- approvals ------------------------------------------------------------------
    async def _approval(self, action: TeamsCardAction, person: Person | None) -> InvokeReply:
        if person is None or person.staff is None:
            return refusal_reply(say.NOT_ALLOWED)  # not staff: not even the card is shown again
        s = self.runtime.s
        a = await s.approvals.get(action.target_id)
        if a is None:
            return refusal_reply(say.NOT_FOUND)
        if action.version != a.version:
            return refusal_reply(say.STALE, card=await self.card(a))
        try:
            out = await self.runtime.decide(
                a.id,
                expected_version=action.version,
                decision="approve" if action.verb == APPROVE else "reject",
                actor=person.principal,
                comment=action.comment,
            )
        except DecisionError as exc:
            fresh = await s.approvals.get(a.id) or a
            return refusal_reply(refusal_text(exc, role=a.required_role), card=await self.card(fresh))
        # Everyone's copy is redrawn by the notifier (approval_decided), on every surface.
        return card_reply(await self.card(out.approval))

    async def card(self, a: Approval) -> Card:
        """The approval's card as the database has it now."""
        names = await names_for(self.runtime.s.people, self.backend, a)
        return present.approval(a, registry=self.runtime.s.registry, now=self.clock(), names=names)

    def _confirmation_card(self, c: Confirmation, *, decided_by: str | None = None) -> Card:
        return present.confirmation(c, registry=self.runtime.s.registry, decided_by=decided_by)
