"""Adaptive Card clicks (``Action.Execute``): answered at once, decided in the worker.

``signoff.confirm`` / ``signoff.decline`` are the acting principal's alone (``Runtime.confirm``
checks the conversation's principal); ``signoff.approve`` / ``signoff.reject`` are staff's
with the approval's role (``Runtime.decide``, version-checked with the card's version);
``signoff.takeover`` / ``signoff.handback`` / ``signoff.close`` are staff's, on the hand-off
of an escalation card (:mod:`bot.teams.takeover`).

In the request (:meth:`Clicks.answer`), within Teams' budget, nothing is decided: a click
that cannot be acted on (unknown clicker, a card they may not see, an old version) is refused
there and changes nothing — on the current card only to someone entitled to see it, else as a
bare notice (a forged id reveals nothing); any other click is persisted with its job by the
face (``Inbox.accept``, keyed by the activity, so a redelivery is one click) and answered with
the card as stored and a "working on it" notice. The worker then decides (:meth:`Clicks.decide`),
the refund or cancellation runs there, and every copy of the card is redrawn with the outcome.
A replayed or retried click finds the decision taken: the runtime returns the stored outcome
or refuses the stale version, and nothing runs twice.

Every click is audited in the one shape every face uses (``FacePort.click_event``):
``click.decided`` when it went through, ``click.refused`` (within the clicker's audit budget)
when it changed nothing, in the request or in the worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from agent import handoff
from agent.audit_budget import AuditBudget
from agent.confirmations import ConfirmResult
from agent.errors import DecisionError
from agent.face_port import ClickAction, ClickRefusal, ClickSeen, FacePort
from agent.notify import best_effort
from bot.teams import present, takeover
from bot.teams import wording as say
from bot.teams.cards import APPROVE, CONFIRM, DECLINE, REJECT, Card, with_notice
from bot.teams.delivery import SURFACE, Poster, reply_of
from bot.teams.inbound import TeamsCardAction, TeamsUser
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


def working(card: Card) -> Card:
    """The clicked card while the worker decides: as stored, without its buttons, marked "working on it"."""
    return with_notice({k: v for k, v in card.items() if k != "actions"}, say.WORKING)


def click_payload(action: TeamsCardAction, reference: Mapping[str, Any], *, at: datetime) -> dict[str, Any]:
    """What the worker needs of a click, as JSON (the inbound item's payload); ``at``: when it came."""
    return {
        "at": at.isoformat(),
        "kind": "click",
        "activity_id": action.activity_id,
        "verb": action.verb,
        "target_id": action.target_id,
        "version": action.version,
        "comment": action.comment,
        "card_activity_id": action.card_activity_id,
        "sender": asdict(action.sender),
        "tenant": action.place.tenant_id,
        "reference": dict(reference),
    }


_ACTIONS: dict[str, ClickAction] = {
    CONFIRM: "confirm",
    DECLINE: "decline",
    APPROVE: "approve",
    REJECT: "reject",
    handoff.TAKEOVER: "takeover",
    handoff.HANDBACK: "handback",
    handoff.CLOSE: "close",
    takeover.SEND_SUGGESTION: "send",
}


def seen(verb: str, target_id: str, sender: TeamsUser, tenant: str | None) -> ClickSeen:
    """A Teams click in the shape every face audits (the clicker by their Entra object id)."""
    user = sender.aad_object_id or sender.id
    return ClickSeen(face="teams", action=_ACTIONS[verb], target=target_id, user=user, team=tenant)


@dataclass(frozen=True, kw_only=True)
class Click:
    """A persisted click, read back in the worker."""

    verb: str
    target_id: str
    version: int
    comment: str | None
    card_activity_id: str | None
    sender: TeamsUser
    reference: dict[str, Any]
    tenant: str | None = None
    at: datetime | None = None

    @property
    def seen(self) -> ClickSeen:
        return seen(self.verb, self.target_id, self.sender, self.tenant)

    @classmethod
    def of(cls, payload: Mapping[str, Any]) -> Click:
        return cls(
            verb=str(payload["verb"]),
            target_id=str(payload["target_id"]),
            version=int(payload["version"]),
            comment=payload.get("comment"),
            card_activity_id=payload.get("card_activity_id"),
            sender=TeamsUser(**payload["sender"]),
            reference=dict(payload["reference"]),
            tenant=payload.get("tenant"),
            at=datetime.fromisoformat(payload["at"]) if payload.get("at") else None,
        )


@dataclass
class Clicks:
    """Card clicks of one Teams face: answered in the request, decided in the worker."""

    port: FacePort
    backend: CommerceBackend
    sender: TeamsSender
    poster: Poster
    clock: Callable[[], datetime]
    #: Refused clicks audited per person (past it: answered, only counted).
    click_audit: AuditBudget = field(default_factory=AuditBudget)

    async def _refused(self, click: ClickSeen, reason: ClickRefusal) -> None:
        await self.port.click_event(click, refused=reason, budget=self.click_audit)

    # -- in the request: read only ---------------------------------------------------------
    async def answer(self, action: TeamsCardAction) -> tuple[InvokeReply, bool]:
        """The invoke's answer, and whether the click goes to the worker (``False``: refused here,
        and audited as refused)."""
        if action.verb in takeover.VERBS:
            reply, ok = await takeover.answer(self.port, action, await identify(self.port, self.backend, action.sender))
            reason: ClickRefusal | None = None if ok else "refused"
        else:
            reply, reason = await self._answer(action)
        if reason is not None:
            await self._refused(seen(action.verb, action.target_id, action.sender, action.place.tenant_id), reason)
        return reply, reason is None

    async def _answer(self, action: TeamsCardAction) -> tuple[InvokeReply, ClickRefusal | None]:
        person = await identify(self.port, self.backend, action.sender)
        if action.verb in (CONFIRM, DECLINE):
            conf, conv = await self._confirmation(action.target_id)
            if person is None or conf is None or conv is None:
                return refusal_reply(say.NOT_FOUND if person is not None else say.NOT_ALLOWED), (
                    "not_found" if person is not None else "forbidden"
                )
            if not self.port.may_see(person.principal, conv):
                return refusal_reply(say.NOT_FOUND), "forbidden"  # someone else's looks like a missing one
            if action.version != conf.version:
                return refusal_reply(say.STALE, card=self._confirmation_card(conf)), "conflict"
            return card_reply(working(self._confirmation_card(conf))), None
        if person is None or person.staff is None:
            return refusal_reply(say.NOT_ALLOWED), "forbidden"  # not staff: not even the card is shown again
        a = await self.port.approval(action.target_id)
        if a is None:
            return refusal_reply(say.NOT_FOUND), "not_found"
        if action.version != a.version:
            return refusal_reply(say.STALE, card=await self.card(a)), "conflict"
        return card_reply(working(await self.card(a))), None

    # -- in the worker: the decision ---------------------------------------------------------
    async def decide(self, payload: Mapping[str, Any]) -> None:
        """Decide one persisted click and redraw its cards; safe to run again (a retry finds the
        decision taken and redraws)."""
        click = Click.of(payload)
        person = await identify(self.port, self.backend, click.sender)
        if person is None or (click.verb not in (CONFIRM, DECLINE) and person.staff is None):
            await self._refused(click.seen, "forbidden")
        elif click.verb in takeover.VERBS and person.staff is not None:
            await takeover.decide(
                self.port,
                self.poster,
                self.sender,
                verb=click.verb,
                target=click.target_id,
                staff=person.staff,
                at=click.at,
            )
        elif click.verb in (CONFIRM, DECLINE):
            await self._confirm(click, person)
        else:
            await self._approve(click, person)

    async def _confirm(self, click: Click, person: Person) -> None:
        conf, conv = await self._confirmation(click.target_id)
        if conf is None or conv is None or not self.port.may_see(person.principal, conv):
            await self._refused(click.seen, "not_found" if conf is None else "forbidden")
            return
        try:
            settled = await self.port.confirm(
                conf.id, actor=person.principal, accept=click.verb == CONFIRM, via="button", deliver_later=True
            )
        except DecisionError as exc:
            await self._refused(click.seen, exc.code)
            fresh = await self.port.confirmation(conf.id) or conf
            await self._redraw_confirmation(
                fresh, with_notice(self._confirmation_card(fresh), refusal_text(exc)), click
            )
            return
        await self.port.click_event(click.seen, by=person.principal.key)
        card = self._confirmation_card(settled.confirmation, decided_by=person.name)
        await self._redraw_confirmation(settled.confirmation, card, click)
        await self._follow_up(settled, conv, click.reference)

    async def _approve(self, click: Click, person: Person) -> None:
        a = await self.port.approval(click.target_id)
        if a is None:
            await self._refused(click.seen, "not_found")
            return
        try:
            out = await self.port.decide(
                a.id,
                expected_version=click.version,
                decision="approve" if click.verb == APPROVE else "reject",
                actor=person.principal,
                comment=click.comment,
                via={"surface": "teams", "user": click.sender.aad_object_id or click.sender.id},
            )
            decided, notice = out.approval, None
            await self.port.click_event(click.seen, by=person.principal.key)
        except DecisionError as exc:
            await self._refused(click.seen, exc.code)
            decided = await self.port.approval(a.id) or a
            # A retry of a decision that went through finds the version moved: the card says where it stands.
            notice = None if exc.code == "conflict" else refusal_text(exc, role=a.required_role)
        # The approvals conversation's copy is redrawn by the notifier (approval_decided); the
        # clicked copy may be another one.
        shown = decided.surfaces.get(SURFACE) or {}
        if click.card_activity_id and click.card_activity_id != shown.get("activity_id"):
            card = await self.card(decided)
            card = with_notice(card, notice) if notice else card
            await best_effort(
                self.sender.update(click.reference, activity_id=click.card_activity_id, card=card), "teams card update"
            )

    async def _confirmation(self, confirmation_id: str) -> tuple[Confirmation | None, Conversation | None]:
        conf = await self.port.confirmation(confirmation_id)
        conv = await self.port.conversation(conf.conversation_id) if conf is not None else None
        return conf, conv

    async def _redraw_confirmation(self, conf: Confirmation, card: Card, click: Click) -> None:
        """Everyone's copy of the card, not only the clicker's."""
        shown = conf.surfaces.get(SURFACE) or {}
        ref = shown.get("reference") or click.reference
        activity_id = shown.get("activity_id") or click.card_activity_id
        if activity_id:
            await best_effort(self.sender.update(ref, activity_id=activity_id, card=card), "teams card update")

    async def _follow_up(self, settled: ConfirmResult, conv: Conversation, reference: Mapping[str, Any]) -> None:
        if settled.turn is None:
            return
        ref = (conv.meta.get("teams") or {}).get("reference") or reference
        await self.poster.post(reply_of(settled.turn), ref)

    async def card(self, a: Approval) -> Card:
        """The approval's card as the database has it now."""
        names = await names_for(self.port, self.backend, a)
        return present.approval(a, tool_of=self.port.tool, now=self.clock(), names=names)

    def _confirmation_card(self, c: Confirmation, *, decided_by: str | None = None) -> Card:
        return present.confirmation(c, tool_of=self.port.tool, decided_by=decided_by)
