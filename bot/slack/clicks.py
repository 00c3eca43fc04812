"""Clicks on our cards, after Slack got its 200: confirm, decline, approve, reject, feedback.

A button carries an id and a version, nothing else; the record is read again and the
runtime decides (``Runtime.confirm``, ``Runtime.decide``, which compare-and-set, so a
double or replayed click executes nothing twice). Only the acting principal's click
confirms; only a supervisor who did not request it approves; someone from another
organisation never does. Every click is audited in the one shape every face uses
(``FacePort.click_event``): ``click.decided`` when it went through, ``click.refused`` when it
changed nothing — the clicker gets an ephemeral line, and the event is within the clicker's
audit budget (agent/audit_budget.py: past it the click is answered and only counted). The card
is then redrawn from the database.
"""

from __future__ import annotations

import logging
from typing import Any

from agent.approvals import DecideResult
from agent.confirmations import ConfirmResult
from agent.errors import DecisionError
from agent.face_port import ClickAction, ClickRefusal, ClickSeen
from bot.slack import ids, present, wording
from bot.slack.face import Person, SlackFace, parse_ref
from bot.slack.replies import Where, deliver
from bot.slack.sender import SlackSendError
from storage.inbox import Inbound
from tools.context import Principal

log = logging.getLogger(__name__)

_DECIDE_REFUSAL = {
    "own_request": wording.OWN_REQUEST,
    "forbidden": wording.ONLY_SUPERVISOR,
    "expired": wording.APPROVAL_EXPIRED,
    "conflict": wording.APPROVAL_CHANGED,
    "not_found": wording.BAD_BUTTON,
}
_ACTIONS: dict[str, ClickAction] = {
    ids.CONFIRM: "confirm",
    ids.DECLINE: "decline",
    ids.APPROVE: "approve",
    ids.REJECT: "reject",
}
_CONFIRM_REFUSAL = {
    "forbidden": wording.NOT_YOURS_TO_CONFIRM,
    "not_found": wording.BAD_BUTTON,
    "conflict": wording.CONFIRMATION_GONE,
    "expired": wording.CONFIRMATION_GONE,
}


async def on_click(face: SlackFace, item: Inbound) -> None:
    p = item.payload
    action = p.get("action_id")
    external = bool(p.get("ext_shared")) or p.get("actor_team") != p.get("team")
    person = await face.person(user=p["user"], team=p["actor_team"], external=external)
    if action == ids.FEEDBACK:
        await _feedback(face, p, person)
        return
    if action not in _ACTIONS:
        return
    try:
        target, version = ids.decode_value(p.get("value"))
    except ids.BadValue:
        await refuse(face, p, seen(person, _ACTIONS[action], None), wording.BAD_BUTTON, "bad_value")
        return
    if action in (ids.CONFIRM, ids.DECLINE):
        await _confirmation(face, p, person, target, version, accept=action == ids.CONFIRM)
    elif action == ids.APPROVE:
        await _decide(face, p, person, target, version, decision="approve")


async def on_reject(face: SlackFace, item: Inbound) -> None:
    """The reject modal was submitted with a comment."""
    p = item.payload
    person = await face.person(user=p["user"], team=p["actor_team"], external=p["actor_team"] != p["team"])
    try:
        ref = ids.decode_modal_metadata(p.get("metadata"))
    except ids.BadValue:
        await face.port.click_event(seen(person, "reject", None), refused="bad_value", budget=face.click_audit)
        return
    where = {"channel": ref.channel, "message_ts": ref.ts, **p}
    await _decide(face, where, person, ref.id, ref.version, decision="reject", comment=str(p.get("comment") or ""))


# -- confirmations ---------------------------------------------------------------------------
async def _confirmation(
    face: SlackFace, p: dict[str, Any], person: Person, confirmation_id: str, version: int, *, accept: bool
) -> None:
    port = face.port
    click = seen(person, "confirm" if accept else "decline", confirmation_id)
    conf = await port.confirmation(confirmation_id)
    conv = await port.conversation(conf.conversation_id) if conf is not None else None
    if conf is None or conv is None:
        await refuse(face, p, click, wording.BAD_BUTTON, "not_found")
        return
    actor = person.principal(conv.customer_id if person.is_staff else None)
    if conf.principal != actor.key:
        await refuse(face, p, click, wording.NOT_YOURS_TO_CONFIRM, "forbidden")
        return
    if conf.version != version and conf.status == "pending":
        await refuse(face, p, click, wording.BAD_BUTTON, "conflict")
        return
    try:
        settled: ConfirmResult = await port.confirm(
            conf.id, actor=actor, accept=accept, via="button", deliver_later=True
        )
    except DecisionError as exc:
        await refuse(face, p, click, _CONFIRM_REFUSAL.get(exc.code, wording.CONFIRMATION_GONE), exc.code)
        await _redraw_confirmation(face, conf.id)
        return
    await port.click_event(click, by=actor.key)
    await _redraw_confirmation(face, conf.id)
    thread = parse_ref(conv.external_ref)
    if settled.turn is not None and thread is not None:
        meta = (conv.meta or {}).get("slack") or {}
        where = Where(
            channel=thread[1],
            thread_ts=thread[2],
            user=meta.get("user"),
            team=meta.get("team"),
            private=bool(meta.get("private")),
        )
        await deliver(face, where, settled.turn)


async def _redraw_confirmation(face: SlackFace, confirmation_id: str) -> None:
    conf = await face.port.confirmation(confirmation_id)
    ref = (conf.surfaces or {}).get("slack") if conf is not None else None
    if conf is None or not isinstance(ref, dict) or not ref.get("channel") or not ref.get("ts"):
        return
    card = present.confirmation_card(face, conf)
    try:
        await face.sender.update(str(ref["channel"]), str(ref["ts"]), card.text, card.block_list)
    except SlackSendError as exc:
        log.warning("confirmation card %s not redrawn: %s", conf.id, exc.error)


# -- approvals ---------------------------------------------------------------------------------
async def _decide(
    face: SlackFace,
    p: dict[str, Any],
    person: Person,
    approval_id: str,
    version: int,
    *,
    decision: str,
    comment: str | None = None,
) -> None:
    click = seen(person, "approve" if decision == "approve" else "reject", approval_id)
    if person.external or person.kind != "supervisor":
        await refuse(face, p, click, wording.ONLY_SUPERVISOR, "forbidden")
        return
    actor = Principal(kind="supervisor", id=str(person.id))
    try:
        decided: DecideResult = await face.port.decide(
            approval_id,
            expected_version=version,
            decision=decision,
            actor=actor,
            comment=comment,
            via={"surface": "slack", "user": person.user, "team": person.team},
        )
    except DecisionError as exc:
        await refuse(face, p, click, _DECIDE_REFUSAL.get(exc.code, wording.APPROVAL_CHANGED), exc.code)
        return
    await face.port.click_event(click, by=actor.key)
    log.info("approval %s is %s (from Slack)", approval_id, decided.approval.status)


# -- feedback ----------------------------------------------------------------------------------
async def _feedback(face: SlackFace, p: dict[str, Any], person: Person) -> None:
    try:
        turn_id, vote = ids.decode_feedback(p.get("value"))
    except ids.BadValue:
        return
    data = {"turn": turn_id, "vote": vote, "channel": "slack", "slack_user": person.user, "slack_team": person.team}
    # A vote changes nothing: within the voter's budget (one per Slack person, as refusals).
    who = f"slack:{person.team}:{person.user}"
    await face.port.face_event(
        "feedback", data, principal=person.principal().key, budget=face.click_audit, person=who, channel="slack"
    )
    await _ephemeral(face, p, wording.FEEDBACK_THANKS)


# -- refusals ----------------------------------------------------------------------------------
def seen(person: Person, action: ClickAction, target: str | None) -> ClickSeen:
    return ClickSeen(face="slack", action=action, target=target, user=person.user, team=person.team)


async def refuse(face: SlackFace, p: dict[str, Any], click: ClickSeen, text: str, reason: ClickRefusal) -> None:
    """The clicker is told why; the click, which changed nothing, is audited within their budget."""
    await face.port.click_event(click, refused=reason, budget=face.click_audit)
    await _ephemeral(face, p, text)


async def _ephemeral(face: SlackFace, p: dict[str, Any], text: str) -> None:
    channel = p.get("channel")
    if not channel:
        return
    try:
        await face.sender.ephemeral(str(channel), str(p["user"]), text, thread_ts=p.get("thread_ts") or None)
    except SlackSendError as exc:
        log.info("slack ephemeral not sent: %s", exc.error)
