"""The Teams face's staff side of a hand-off to a person (``agent/handoff.py`` decides).

* the escalation card gets **Take over**, **Hand back** and **Close** (``Action.Execute``,
  rendered by ``cards.escalation_card``); the card's reply chain becomes a staff thread of the
  hand-off (``handoff_threads``: ``teams:chain:…`` of the channel and the card's activity id);
* a click is answered in the request (refused there, persisting nothing, when it plainly
  cannot act: not staff, an unknown or ended hand-off, someone else's) and decided in the
  worker like every Teams click; the outcome is said in the reply chain once;
* a reply in the chain by the owner is relayed to the customer (once per activity); a
  ``note:`` reply is a note for the agent; anyone else's stays in the chain;
* the relay's Teams staff ends: the customer's messages and the SLA re-page into the chain,
  and the agent's suggestions there as cards with **Send** (the owner's own reply, once).

Teams delivers a channel reply to the bot when it mentions the bot (``HANDOFF_HOW`` says so).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agent import handoff
from agent.face_port import FacePort
from agent.handoff_relay import PostKind, SuggestionPost, ThreadPost
from bot.links import unlink
from bot.teams import wording as say
from bot.teams.cards import SEND_SUGGESTION, suggestion_card, suggestion_text
from bot.teams.delivery import SURFACE, Poster
from bot.teams.inbound import TeamsCardAction
from bot.teams.invoke import InvokeReply, message_reply, refusal_reply
from bot.teams.people import Person
from bot.teams.sender import TeamsSender
from storage.handoffs import Handoff, Suggestion
from storage.identities import Staff

log = logging.getLogger(__name__)

VERBS = frozenset({handoff.TAKEOVER, handoff.HANDBACK, handoff.CLOSE, SEND_SUGGESTION})
_CHAIN = ";messageid="


def chain_key(channel: str, root: str) -> str:
    """The staff thread of the reply chain under message ``root`` in ``channel``."""
    return "teams:chain:" + hashlib.sha256(f"{channel}\x1f{root}".encode()).hexdigest()[:40]


def chain_thread(conversation_id: str) -> str | None:
    """The staff thread of a channel reply chain (``19:…@thread.tacv2;messageid=ROOT``), else None."""
    base, sep, root = conversation_id.partition(_CHAIN)
    return chain_key(base, root) if sep and root else None


async def posted(port: FacePort, handoff_id: str, reference: Mapping[str, Any], activity_id: str) -> None:
    """The escalation card went out: replies to it (its reply chain) are this hand-off's."""
    channel = str(reference["conversation"]["id"]).partition(_CHAIN)[0]
    ref = {"reference": dict(reference), "activity_id": activity_id}
    await port.handoffs.posted(handoff_id, SURFACE, ref, thread=chain_key(channel, activity_id))


def _staff(staff: Staff) -> handoff.Person:
    return handoff.Person(principal=Person(staff=staff).principal, name=staff.name)


# -- clicks ------------------------------------------------------------------------------------
async def answer(port: FacePort, action: TeamsCardAction, person: Person | None) -> tuple[InvokeReply, bool]:
    """In the request: refuse what plainly cannot act (persisting nothing), else "working on it"."""
    if person is None or person.staff is None:
        return refusal_reply(say.NOT_ALLOWED), False
    if action.verb == SEND_SUGGESTION:
        return await _answer_send(port, action.target_id, person.staff)
    h = await port.handoffs.get(action.target_id)
    if h is None:
        return refusal_reply(say.NOT_FOUND), False
    if not h.active:
        return refusal_reply(say.HANDOFF_ENDED), False
    mine = h.state == "taken" and h.owner == person.staff.id
    if action.verb == handoff.TAKEOVER and mine:
        return refusal_reply(say.HANDOFF_YOURS), False
    if action.verb != handoff.TAKEOVER and h.state == "taken" and not mine and person.staff.role != "supervisor":
        return refusal_reply(say.HANDOFF_NOT_YOURS), False
    return message_reply(say.HANDOFF_WORKING), True


async def _answer_send(port: FacePort, suggestion_id: str, staff: Staff) -> tuple[InvokeReply, bool]:
    sug = await port.handoffs.suggestion(suggestion_id)
    h = await port.handoffs.get(sug.handoff_id) if sug is not None else None
    if h is None:
        return refusal_reply(say.NOT_FOUND), False
    if not h.active:
        return refusal_reply(say.HANDOFF_ENDED), False
    if h.state != "taken" or h.owner != staff.id:
        return refusal_reply(say.SUGGESTION_NOT_OWNER), False
    return message_reply(say.HANDOFF_WORKING), True


async def decide(
    port: FacePort, poster: Poster, sender: TeamsSender, *, verb: str, target: str, staff: Staff, at: datetime | None
) -> None:
    """In the worker: the click through the rules; the outcome said once under the card."""
    person = _staff(staff)
    if verb == SEND_SUGGESTION:
        await _send(port, poster, sender, target, person)
        return
    h = await port.handoffs.get(target)
    if h is None:
        return
    if verb == handoff.TAKEOVER:
        done = await port.handoffs.take_over(h.id, h.conversation_id, person, clicked_at=at)
        said = say.HANDOFF_TAKEN
    else:
        done = await port.handoffs.end(h.id, h.conversation_id, person, close=verb == handoff.CLOSE)
        said = say.HANDOFF_CLOSED if verb == handoff.CLOSE else say.HANDOFF_RETURNED
    if not done.done or done.handoff is None:
        log.info("teams hand-off click on %s not applied: %s", h.id, done.reason)
        return
    moved = done.handoff
    key = f"teams:handoff:{moved.id}:{moved.state}:{moved.version}"
    await _in_chain(poster, sender, moved, key, said.format(name=" ".join(staff.name.split())[:100]))


async def _send(
    port: FacePort, poster: Poster, sender: TeamsSender, suggestion_id: str, person: handoff.Person
) -> None:
    """Send of a suggestion: the clicker's own reply, exactly as its card showed it; once."""
    sug = await port.handoffs.suggestion(suggestion_id)
    if sug is None:
        return
    done = await port.handoffs.send_suggestion(sug.id, sug.conversation_id, person, shown=suggestion_text)
    if not done.done or done.handoff is None:
        log.info("teams suggestion %s not sent: %s", sug.id, done.reason)
        return
    said = say.SUGGESTION_SENT.format(name=" ".join(person.name.split())[:100])
    await _in_chain(poster, sender, done.handoff, f"teams:suggestion:{sug.id}:sent", said)


def suggestion_post(poster: Poster, sender: TeamsSender) -> SuggestionPost:
    """The agent's suggested reply as a card under the escalation card, once per suggestion."""

    async def post(h: Handoff, suggestion: Suggestion) -> None:
        shown = h.surfaces.get(SURFACE) or {}
        ref, card = shown.get("reference"), shown.get("activity_id")
        if isinstance(ref, dict) and card:
            made = suggestion_card(suggestion.text, suggestion.id)
            key = f"teams:handoff:suggest:{suggestion.id}"
            await poster.once(key, lambda: sender.reply(ref, reply_to_id=str(card), card=made))

    return post


# -- replies in the chain ------------------------------------------------------------------
async def on_chain_message(port: FacePort, payload: Mapping[str, Any], staff: Staff, text: str) -> bool:
    """A staff message in a hand-off's reply chain: the owner's reply relayed (once per
    activity), a ``note:`` noted, anything else left there. False when it is no hand-off's chain."""
    thread = chain_thread(str(payload.get("conversation_id") or ""))
    h = await port.handoffs.in_thread(thread) if thread else None
    if h is None:
        return False
    person = _staff(staff)
    if text.lower().startswith(handoff.NOTE_PREFIX):
        await port.handoffs.add_note(h, person, text[len(handoff.NOTE_PREFIX) :])
        return True
    digest = hashlib.sha256(f"{payload['conversation_id']}\x1f{payload['activity_id']}".encode()).hexdigest()[:40]
    await port.handoffs.relay_reply(h, person, text, key=f"teams:{digest}")
    return True


def thread_post(poster: Poster, sender: TeamsSender) -> ThreadPost:
    """The staff surface: a customer's message (link-free), or the SLA re-page, under the card."""

    async def post(h: Handoff, kind: PostKind, text: str, key: str) -> None:
        said = say.HANDOFF_CUSTOMER.format(text=unlink(text)[:3000]) if kind == "customer" else say.HANDOFF_REPAGE
        await _in_chain(poster, sender, h, f"teams:{key}", said)

    return post


async def _in_chain(poster: Poster, sender: TeamsSender, h: Handoff, key: str, text: str) -> None:
    shown = h.surfaces.get(SURFACE) or {}
    ref, card = shown.get("reference"), shown.get("activity_id")
    if isinstance(ref, dict) and card:
        await poster.once(key, lambda: sender.reply(ref, reply_to_id=str(card), text=text))


__all__ = [
    "VERBS",
    "answer",
    "chain_key",
    "chain_thread",
    "decide",
    "on_chain_message",
    "posted",
    "suggestion_post",
    "thread_post",
]
