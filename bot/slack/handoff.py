"""The Slack face's part of a hand-off to a person (``agent/handoff.py`` decides).

* the escalation post gets **Take over**, **Hand back** and **Close** (rendered here, never
  from model text) and its thread becomes the hand-off's staff thread;
* a click there (after Slack's 200, from the inbox) is checked — staff of our own workspace
  only — and handed to the runtime's rules; the outcome is said in the thread once;
* a reply in that thread by the owner is queued for the customer (once per Slack message,
  whatever Slack redelivers); a ``note:`` line is a note for the agent; anyone else's reply
  stays in the thread;
* the relay's Slack ends: the customer's messages and the SLA re-page into the thread, and a
  person's reply to a Slack Connect customer in the customer's own thread;
* the agent's suggested replies in the thread, marked as suggestions and link-free
  (``bot/links.unlink``), with **Send**: a person's Send is their own reply, relayed (once)
  only if they own the hand-off (``agent/handoff_suggest.py`` decides).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from slack_sdk.models.blocks import ActionsBlock, ButtonElement, PlainTextObject

from agent import handoff, handoff_suggest
from agent.face_port import ClickAction
from agent.handoff import Person as Staff
from agent.handoff_relay import Deliver, PostKind, SuggestionPost, ThreadPost
from agent.notify import best_effort
from bot.links import unlink
from bot.slack import blocks, clicks, wording
from bot.slack.face import Person, SlackFace, parse_ref, thread_ref
from bot.slack.mrkdwn import clip, subteam
from bot.slack.replies import plain, post_once
from bot.slack.view_models import Outbound
from storage.handoffs import Handoff, Suggestion
from storage.inbox import Inbound
from storage.records import Conversation

log = logging.getLogger(__name__)

SURFACE = "slack"
ACTIONS_BLOCK = "signoff.handoff.actions"
SUGGESTION_BLOCK = "signoff.suggestion.actions"
#: Every click this module handles: the hand-off's buttons and a suggestion's Send.
CLICKS = frozenset({*handoff.ACTIONS, handoff_suggest.SEND})


def with_actions(message: Outbound, conversation_id: str, handoff_id: str) -> Outbound:
    """The escalation post with the hand-off's buttons (their value: the two ids, nothing else)."""
    value = handoff.encode_value(conversation_id, handoff_id)
    buttons = [
        ButtonElement(text=PlainTextObject(text=label), action_id=action, value=value, style=style)
        for label, action, style in (
            (wording.TAKEOVER_BUTTON, handoff.TAKEOVER, "primary"),
            (wording.HANDBACK_BUTTON, handoff.HANDBACK, None),
            (wording.CLOSE_BUTTON, handoff.CLOSE, None),
        )
    ]
    extra = (
        blocks.context_block(wording.HANDOFF_HOW).to_dict(),
        ActionsBlock(block_id=ACTIONS_BLOCK, elements=buttons).to_dict(),
    )
    return Outbound(text=message.text, blocks=(*message.blocks, *extra))


async def posted(face: SlackFace, handoff_id: str, channel: str, ts: str) -> None:
    """The escalation post went out: its thread is where this hand-off's replies arrive."""
    team, _ = await face.who_am_i()
    ref = thread_ref(team or "", channel, ts)
    await face.port.handoffs.posted(handoff_id, SURFACE, {"channel": channel, "ts": ts}, thread=ref)


async def is_thread(face: SlackFace, team: str, channel: str, thread_ts: str) -> bool:
    """Whether ``thread_ts`` in ``channel`` is a hand-off's staff thread."""
    return await face.port.handoffs.in_thread(thread_ref(team, channel, thread_ts)) is not None


async def _staff(face: SlackFace, person: Person) -> Staff | None:
    if not person.is_staff or person.external:
        return None
    on_file = await face.port.staff(str(person.id))
    return Staff(principal=person.principal(), name=on_file.name if on_file is not None else str(person.id))


# -- clicks ------------------------------------------------------------------------------------
async def on_click(face: SlackFace, item: Inbound) -> None:
    """Take over, Hand back, Close or a suggestion's Send, by a person of our own workspace on staff."""
    p = item.payload
    external = bool(p.get("ext_shared")) or p.get("actor_team") != p.get("team")
    person = await face.person(user=p["user"], team=p["actor_team"], external=external)
    action = p.get("action_id")
    verb = _VERBS.get(str(action))
    if verb is None:
        return
    staff = await _staff(face, person)
    if staff is None:
        await clicks.refuse(face, p, clicks.seen(person, verb, None), wording.HANDOFF_STAFF_ONLY, "forbidden")
        return
    if p.get("action_id") == handoff_suggest.SEND:
        await _send(face, item, person, staff)
        return
    try:
        conversation_id, handoff_id = handoff.decode_value(p.get("value"))
    except handoff.BadValue:
        await clicks.refuse(face, p, clicks.seen(person, verb, None), wording.BAD_BUTTON, "bad_value")
        return
    click, desk = clicks.seen(person, verb, handoff_id), face.port.handoffs
    if action == handoff.TAKEOVER:
        done = await desk.take_over(handoff_id, conversation_id, staff, clicked_at=_when(p.get("action_ts")))
        said = wording.HANDOFF_TAKEN
    else:
        done = await desk.end(handoff_id, conversation_id, staff, close=action == handoff.CLOSE)
        said = wording.HANDOFF_CLOSED if action == handoff.CLOSE else wording.HANDOFF_RETURNED
    if not done.done:
        text = wording.HANDOFF_REFUSED.get(done.reason, wording.BAD_BUTTON)
        await clicks.refuse(face, p, click, text, done.reason or "unknown")
        return
    assert done.handoff is not None
    await face.port.click_event(click, by=staff.principal.key)
    await _say(face, done.handoff, f"slack:handoff:{item.id}", said.format(name=clip(staff.name, 200)))


#: The hand-off buttons as every face audits their clicks.
_VERBS: dict[str, ClickAction] = {
    handoff.TAKEOVER: "takeover",
    handoff.HANDBACK: "handback",
    handoff.CLOSE: "close",
    handoff_suggest.SEND: "send",
}


async def _send(face: SlackFace, item: Inbound, person: Person, staff: Staff) -> None:
    """Send of a suggestion: the clicker's own reply, exactly as shown to them (link-free)."""
    p = item.payload
    try:
        conversation_id, suggestion_id = handoff_suggest.decode_value(p.get("value"))
    except handoff.BadValue:
        await clicks.refuse(face, p, clicks.seen(person, "send", None), wording.BAD_BUTTON, "bad_value")
        return
    done = await face.port.handoffs.send_suggestion(suggestion_id, conversation_id, staff, shown=unlink)
    if not done.done:
        text = wording.HANDOFF_REFUSED.get(done.reason, wording.BAD_BUTTON)
        await clicks.refuse(face, p, clicks.seen(person, "send", suggestion_id), text, done.reason)
        return
    assert done.handoff is not None
    await face.port.click_event(clicks.seen(person, "send", suggestion_id), by=staff.principal.key)
    said = wording.SUGGESTION_SENT.format(name=clip(staff.name, 200))
    await _say(face, done.handoff, f"slack:suggestion:{suggestion_id}:sent", said)
    await _spent(face, done.handoff, suggestion_id, said)


async def _spent(face: SlackFace, h: Handoff, suggestion_id: str, said: str) -> None:
    """The suggestion's post loses its Send once sent (best effort: the relay is already queued)."""
    sug = await face.port.handoffs.suggestion(suggestion_id)
    ref = h.surfaces.get(SURFACE) or {}
    if sug is None or not (ref.get("channel") and ref.get("ts")):
        return
    channel, thread = str(ref["channel"]), str(ref["ts"])
    key = f"slack:handoff:suggest:{sug.id}"
    ts = await post_once(face, key, channel, suggestion_message(sug), thread)  # its ts: it went out before
    if ts is not None:
        sent = suggestion_message(sug, sent=said)
        await best_effort(face.sender.update(channel, ts, sent.text, sent.block_list), "suggestion update")


def _when(action_ts: object) -> datetime | None:
    """When Slack says the button was clicked (``action_ts``, seconds)."""
    try:
        return datetime.fromtimestamp(float(str(action_ts)), tz=UTC)
    except (TypeError, ValueError, OverflowError):
        return None


async def _say(face: SlackFace, h: Handoff, key: str, text: str) -> None:
    ref = h.surfaces.get(SURFACE) or {}
    if ref.get("channel") and ref.get("ts"):
        await post_once(face, key, str(ref["channel"]), plain(face, text), str(ref["ts"]))


# -- replies in the thread -------------------------------------------------------------------
async def on_thread_message(face: SlackFace, item: Inbound) -> bool:
    """A message in a hand-off's staff thread: the owner's reply is relayed (once), a ``note:``
    line noted, anything else left in the thread. False when the thread is no hand-off's."""
    p = item.payload
    if p["thread_ts"] == p["ts"] or p.get("dm"):
        return False
    h = await face.port.handoffs.in_thread(thread_ref(p["team"], p["channel"], p["thread_ts"]))
    if h is None:
        return False
    person = await face.person(user=p["user"], team=p["actor_team"], external=bool(p.get("ext_shared")))
    staff = await _staff(face, person)
    text = str(p.get("text") or "").strip()
    if staff is None or not text:
        return True
    if text.lower().startswith(handoff.NOTE_PREFIX):
        await face.port.handoffs.add_note(h, staff, text[len(handoff.NOTE_PREFIX) :])
        return True
    await face.port.handoffs.relay_reply(h, staff, text, key=f"slack:{p['team']}:{p['channel']}:{p['ts']}")
    return True


# -- the relay's Slack ends ------------------------------------------------------------------
def thread_post(face: SlackFace) -> ThreadPost:
    """The staff surface: a customer's message, or the SLA re-page, into the hand-off's thread."""

    async def post(h: Handoff, kind: PostKind, text: str, key: str) -> None:
        ref = h.surfaces.get(SURFACE) or {}
        if not (ref.get("channel") and ref.get("ts")):
            return
        if kind == "customer":
            said = wording.HANDOFF_CUSTOMER.format(text=clip(text, 2900))
        else:
            group = subteam(face.config.oncall_group)
            said = wording.HANDOFF_REPAGE.format(group=group) if group else wording.HANDOFF_REPAGE_NO_GROUP
        await post_once(face, f"slack:{key}", str(ref["channel"]), plain(face, said), str(ref["ts"]))

    return post


def suggestion_message(suggestion: Suggestion, *, sent: str | None = None) -> Outbound:
    """The agent's suggestion as we render it: marked as one, its text link-free and escaped,
    and Send (its value: the two ids, never the text) — or, once ``sent``, who sent it."""
    text = clip(unlink(suggestion.text), 2800)
    if sent is not None:
        return Outbound(
            text=wording.SUGGESTION_FALLBACK.format(text=text),
            blocks=(blocks._section(text).to_dict(), blocks.context_block(sent).to_dict()),
        )
    send = ButtonElement(
        text=PlainTextObject(text=wording.SUGGESTION_SEND_BUTTON),
        action_id=handoff_suggest.SEND,
        value=handoff_suggest.encode_value(suggestion),
        style="primary",
    )
    return Outbound(
        text=wording.SUGGESTION_FALLBACK.format(text=text),
        blocks=(
            blocks.context_block(wording.SUGGESTION_MARK).to_dict(),
            blocks._section(text).to_dict(),
            ActionsBlock(block_id=SUGGESTION_BLOCK, elements=[send]).to_dict(),
        ),
    )


def suggestion_post(face: SlackFace) -> SuggestionPost:
    """The agent's suggested reply into the hand-off's thread, once per suggestion."""

    async def post(h: Handoff, suggestion: Suggestion) -> None:
        ref = h.surfaces.get(SURFACE) or {}
        if ref.get("channel") and ref.get("ts"):
            key = f"slack:handoff:suggest:{suggestion.id}"
            await post_once(face, key, str(ref["channel"]), suggestion_message(suggestion), str(ref["ts"]))

    return post


def customer_delivery(face: SlackFace) -> Deliver:
    """A person's reply to a customer who wrote in Slack (Slack Connect, a DM): in their own thread."""

    async def deliver(conversation: Conversation, text: str, name: str, key: str) -> None:
        thread = parse_ref(conversation.external_ref)
        if thread is None:
            log.warning("hand-off reply for %s has no Slack thread", conversation.id)
            return
        said = wording.HANDOFF_FROM_PERSON.format(name=clip(name, 200), text=clip(text, 2800))
        speaker = await face.for_team(thread[0])
        await post_once(speaker, f"slack:{key}", thread[1], plain(face, said), thread[2])

    return deliver
