"""Clicks on our cards, after Slack got its 200: confirm, decline, approve, reject, feedback.

A button carries an id and a version, nothing else; the record is read again and the
runtime decides (``Runtime.confirm``, ``Runtime.decide``, which compare-and-set, so a
double or replayed click executes nothing twice). Only the acting principal's click
confirms; only a supervisor who did not request it approves; someone from another
organisation never does. A refused click gets an ephemeral line, changes nothing and is
audited with the clicker's user and team, within the clicker's audit budget (agent/audit_budget.py:
past it the click is answered and only counted). The card is then redrawn from the database.
"""

from __future__ import annotations

import logging
from typing import Any

from agent.approvals import DecideResult
from agent.confirmations import ConfirmResult
from agent.errors import DecisionError
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
    try:
        target, version = ids.decode_value(p.get("value"))
    except ids.BadValue as exc:
        await _refuse(face, p, person, wording.BAD_BUTTON, reason=f"bad value: {exc}")
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
    except ids.BadValue as exc:
        await _audit_refusal(face, p, person, reason=f"bad modal metadata: {exc}")
        return
    where = {"channel": ref.channel, "message_ts": ref.ts, **p}
    await _decide(face, where, person, ref.id, ref.version, decision="reject", comment=str(p.get("comment") or ""))


# -- confirmations ---------------------------------------------------------------------------
async def _confirmation(
    face: SlackFace, p: dict[str, Any], person: Person, confirmation_id: str, version: int, *, accept: bool
) -> None:
    port = face.port
    conf = await port.confirmation(confirmation_id)
    conv = await port.conversation(conf.conversation_id) if conf is not None else None
    if conf is None or conv is None:
        await _refuse(face, p, person, wording.BAD_BUTTON, reason="unknown confirmation")
        return
    actor = person.principal(conv.customer_id if person.is_staff else None)
    if conf.principal != actor.key:
        await _refuse(face, p, person, wording.NOT_YOURS_TO_CONFIRM, reason="not the acting principal", target=conf.id)
        return
    if conf.version != version and conf.status == "pending":
        await _refuse(face, p, person, wording.BAD_BUTTON, reason="stale version", target=conf.id)
        return
    try:
        settled: ConfirmResult = await port.confirm(
            conf.id, actor=actor, accept=accept, via="button", deliver_later=True
        )
    except DecisionError as exc:
        await _refuse(face, p, person, _CONFIRM_REFUSAL.get(exc.code, wording.CONFIRMATION_GONE), reason=exc.code)
        await _redraw_confirmation(face, conf.id)
        return
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
    if person.external or person.kind != "supervisor":
        await _refuse(face, p, person, wording.ONLY_SUPERVISOR, reason="not a supervisor", target=approval_id)
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
        await _refuse(face, p, person, _DECIDE_REFUSAL.get(exc.code, wording.APPROVAL_CHANGED), reason=exc.code)
        return
    await face.port.face_event(
        "slack.decided",
        {"approval_id": approval_id, "decision": decision, "slack_user": person.user, "slack_team": person.team},
        principal=actor.key,
    )
    log.info("approval %s is %s (from Slack)", approval_id, decided.approval.status)


# -- feedback ----------------------------------------------------------------------------------
async def _feedback(face: SlackFace, p: dict[str, Any], person: Person) -> None:
    try:
        turn_id, vote = ids.decode_feedback(p.get("value"))
    except ids.BadValue:
        return
    data = {"turn": turn_id, "vote": vote, "channel": "slack", "slack_user": person.user, "slack_team": person.team}
    await _audit_click(face, person, "feedback", data, principal=person.principal().key)
    await _ephemeral(face, p, wording.FEEDBACK_THANKS)


async def _audit_click(
    face: SlackFace, person: Person, kind: str, data: dict[str, Any], *, principal: str | None = None
) -> None:
    """A click that changes nothing is audited within the clicker's budget (one per Slack person)."""
    who = f"slack:{person.team}:{person.user}"
    await face.port.face_event(
        kind, data, principal=principal or who, budget=face.click_audit, person=who, channel="slack"
    )


# -- refusals ----------------------------------------------------------------------------------
async def _refuse(
    face: SlackFace, p: dict[str, Any], person: Person, text: str, *, reason: str, target: str | None = None
) -> None:
    await _audit_refusal(face, p, person, reason=reason, target=target)
    await _ephemeral(face, p, text)


async def _audit_refusal(
    face: SlackFace, p: dict[str, Any], person: Person, *, reason: str, target: str | None = None
) -> None:
    data = {
        "action": str(p.get("action_id") or p.get("kind")),
        "target": target,
        "reason": reason[:200],
        "slack_user": person.user,
        "slack_team": person.team,
    }
    await _audit_click(face, person, "slack.click_refused", data)


async def _ephemeral(face: SlackFace, p: dict[str, Any], text: str) -> None:
    channel = p.get("channel")
    if not channel:
        return
    try:
        await face.sender.ephemeral(str(channel), str(p["user"]), text, thread_ts=p.get("thread_ts") or None)
    except SlackSendError as exc:
        log.info("slack ephemeral not sent: %s", exc.error)
