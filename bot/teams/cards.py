"""Adaptive Cards (schema 1.5) for confirmations, approvals and escalations: pure functions.

Every piece of data — summaries, names, arguments, evidence, the model's rationale —
goes into ``TextRun`` inlines, which Adaptive Cards never parse as markdown, after
:func:`neutralize` has defanged links and mentions, dropped control characters and
cut it to size. Only our own wording goes into ``TextBlock``. Buttons are
``Action.Execute`` with a verb and ``{"id", "version"}``, never arguments.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from bot.teams import wording as say
from bot.teams.views import Escalation, Outcome, People, Routing, outcome_of
from storage.records import Approval, Confirmation, aware

Card = dict[str, Any]
SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
VERSION = "1.5"
CONFIRM, DECLINE = "signoff.confirm", "signoff.decline"
APPROVE, REJECT = "signoff.approve", "signoff.reject"
COMMENT_INPUT = "comment"
#: Teams refuses messages over ~28 KB; cards stay well under it whatever the input.
MAX_CARD_BYTES = 24_000
LIMITS = {
    "summary": 600,
    "name": 80,
    "value": 200,
    "excerpt": 300,
    "rationale": 1200,
    "comment": 500,
    "args": 12,
    "evidence": 4,
    "trace": 12,
    "decisions": 5,
}

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SCHEME = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{1,20}):(?=//)")
_BARE = re.compile(r"(?i)\b(www|mailto|tel|sip|file)([.:])")
_AT = re.compile(r"(?i)<(/?)at>")
_ZWSP = "\u200b"
_ZERO_DECIMAL = {"JPY", "KRW", "VND", "CLP", "ISK", "UGX", "XAF", "XOF", "PYG"}
_THREE_DECIMAL = {"BHD", "KWD", "OMR", "JOD", "TND", "IQD", "LYD"}


def neutralize(text: Any, limit: int) -> str:
    """Literal, harmless, bounded text: no links, no mentions, no control or bidi characters."""
    s = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    s = s[: limit * 4]
    s = _CONTROL.sub("", s.replace("\r\n", "\n").replace("\t", " "))
    s = _SCHEME.sub(lambda m: m.group(1) + ":" + _ZWSP, s)
    s = _BARE.sub(lambda m: m.group(1) + _ZWSP + m.group(2), s)
    s = _AT.sub(lambda m: "‹" + m.group(1) + "at›", s)
    return s if len(s) <= limit else s[: limit - 1].rstrip() + "…"


def when(ts: datetime | None) -> str:
    """A timestamp as people read it, in UTC."""
    if ts is None:
        return "an unknown time"
    return (aware(ts) or ts).strftime("%Y-%m-%d %H:%M UTC")


def money(minor: int, currency: str) -> str:
    """Integer minor units as an amount: ``18900, "USD"`` → ``189.00 USD``."""
    code = currency.upper()[:3]
    digits = 0 if code in _ZERO_DECIMAL else 3 if code in _THREE_DECIMAL else 2
    return f"{minor / 10**digits:,.{digits}f} {code}"


# -- building blocks ------------------------------------------------------------------
def _heading(text: str, *, color: str = "Default") -> Card:
    return {"type": "TextBlock", "text": text, "weight": "Bolder", "size": "Medium", "wrap": True, "color": color}


def _note(text: str, *, subtle: bool = True) -> Card:
    return {"type": "TextBlock", "text": text, "wrap": True, "isSubtle": subtle, "spacing": "Small"}


def _literal(text: Any, limit: int, **run: Any) -> Card:
    return {"type": "RichTextBlock", "inlines": [{"type": "TextRun", "text": neutralize(text, limit), **run}]}


def _fact(label: str, value: Any, limit: int, *, tail: str | None = None) -> Card:
    inlines: list[Card] = [
        {"type": "TextRun", "text": f"{label}: ", "weight": "Bolder"},
        {"type": "TextRun", "text": neutralize(value, limit)},
    ]
    if tail:
        inlines.append({"type": "TextRun", "text": f" — {tail}", "italic": True, "isSubtle": True})
    return {"type": "RichTextBlock", "inlines": inlines, "spacing": "Small"}


def _section(title: str, items: list[Card], *, style: str | None = None) -> Card:
    box: Card = {
        "type": "Container",
        "separator": True,
        "spacing": "Medium",
        "items": [{"type": "TextBlock", "text": title, "weight": "Bolder", "wrap": True}, *items],
    }
    if style:
        box["style"] = style
    return box


def _banner(text: str, style: str) -> Card:
    return {
        "type": "Container",
        "style": style,
        "spacing": "Medium",
        "items": [{"type": "RichTextBlock", "inlines": [{"type": "TextRun", "text": text, "weight": "Bolder"}]}],
    }


def _execute(title: str, verb: str, target_id: str, version: int, *, style: str, inputs: str) -> Card:
    return {
        "type": "Action.Execute",
        "title": title,
        "verb": verb,
        "style": style,
        "data": {"id": target_id, "version": version},
        "associatedInputs": inputs,
    }


def _card(body: list[Card], actions: list[Card] | None = None) -> Card:
    card: Card = {
        "type": "AdaptiveCard",
        "$schema": SCHEMA,
        "version": VERSION,
        "body": body,
        "msteams": {"width": "Full"},
    }
    if actions:
        card["actions"] = actions
    return card


def _outcome_lines(outcome: Outcome | None) -> list[Card]:
    if outcome is None:
        return []
    if outcome.replayed:
        text = say.REPLAYED.format(when=when(outcome.original_at)) if outcome.original_at else say.REPLAYED_UNDATED
        lines = [_literal(text, 200, weight="Bolder")]
    elif outcome.error:
        lines = [_literal(say.NOT_DONE.format(error=neutralize(outcome.error, 80)), 200, weight="Bolder")]
    elif outcome.status and outcome.reference:
        lines = [_literal(say.DONE_REF.format(status=outcome.status, ref=outcome.reference), 200)]
    elif outcome.status:
        lines = [_literal(say.DONE.format(status=outcome.status), 200)]
    else:
        return []
    if outcome.replayed and outcome.reference:
        lines.append(_literal(outcome.reference, LIMITS["name"], isSubtle=True))
    return lines


# -- confirmation ---------------------------------------------------------------------
def confirmation_card(c: Confirmation, *, decided_by: str | None = None, outcome: Outcome | None = None) -> Card:
    """What the acting principal (often a customer) confirms: the action in human terms,
    from the runtime's ``summary``; after a decision, the outcome, who and when, no buttons."""
    summary = _literal(c.summary, LIMITS["summary"], weight="Bolder")
    if c.status == "pending":
        return _fit(
            _card(
                [_heading(say.CONFIRM_TITLE), summary, _note(say.CONFIRM_HINT)],
                [
                    _execute(say.CONFIRM, CONFIRM, c.id, c.version, style="positive", inputs="none"),
                    _execute(say.DECLINE, DECLINE, c.id, c.version, style="destructive", inputs="none"),
                ],
            )
        )
    who = neutralize(decided_by or "you", LIMITS["name"])
    if c.status in ("confirmed", "consumed"):
        head, banner = say.CONFIRMED, _banner(say.CONFIRMED_BY.format(who=who, when=when(c.decided_at)), "good")
    elif c.status == "declined":
        head, banner = say.DECLINED, _banner(say.DECLINED_BY.format(who=who, when=when(c.decided_at)), "attention")
    else:
        head, banner = say.SUPERSEDED_TITLE, _banner(say.SUPERSEDED_CONFIRMATION, "warning")
    return _fit(_card([_heading(head), summary, banner, *_outcome_lines(outcome)]))


# -- approval -------------------------------------------------------------------------
def approval_card(
    a: Approval, *, people: People | None = None, routing: Routing | None = None, now: datetime | None = None
) -> Card:
    """The supervisor's card: the exact action with each argument's provenance, the
    requester and account, the amount against the ceiling, evidence, the model's
    rationale labelled untrusted, decisions so far, and Approve / Reject (with a required
    comment) while it is pending; the outcome once it is decided."""
    people = people or People()
    current, expires = aware(now), aware(a.expires_at)
    open_ = a.status == "pending" and not (current is not None and expires is not None and current >= expires)
    body = [
        _heading(_approval_title(a, open_), color="Default" if open_ else "Accent"),
        _literal(a.summary, LIMITS["summary"], weight="Bolder"),
    ]
    if a.approvals_required > 1:
        done = sum(1 for d in a.decisions if d.decision == "approve")
        body.append(_note(say.PROGRESS.format(done=done, needed=a.approvals_required), subtle=False))
    body += _approval_facts(a, people, routing)
    body.append(_section(say.ARGUMENTS, _arguments(a)))
    body.append(_section(say.EVIDENCE, _evidence(a)))
    if a.rationale:
        body.append(
            _section(say.RATIONALE_LABEL, [_literal(a.rationale, LIMITS["rationale"], italic=True)], style="warning")
        )
    body += _decisions(a, people)
    if open_:
        body.append(
            {
                "type": "Input.Text",
                "id": COMMENT_INPUT,
                "label": say.REJECT_INPUT_LABEL,
                "isMultiline": True,
                "maxLength": LIMITS["comment"],
                "isRequired": True,
                "errorMessage": say.REJECT_INPUT_ERROR,
            }
        )
        return _fit(
            _card(
                body,
                [
                    _execute(say.APPROVE, APPROVE, a.id, a.version, style="positive", inputs="none"),
                    _execute(say.REJECT, REJECT, a.id, a.version, style="destructive", inputs="auto"),
                ],
            )
        )
    body += _closing(a)
    return _fit(_card(body))


def _approval_title(a: Approval, open_: bool) -> str:
    if open_:
        return say.APPROVAL_TITLE
    return {"approved": say.APPROVED_TITLE, "rejected": say.REJECTED_TITLE, "superseded": say.SUPERSEDED_TITLE}.get(
        a.status, say.EXPIRED_TITLE
    )


def _approval_facts(a: Approval, people: People, routing: Routing | None) -> list[Card]:
    facts = [_fact(say.REQUESTED_BY, people.name(a.requester), LIMITS["name"])]
    if a.customer_id:
        facts.append(_fact(say.ACCOUNT, a.customer_id, LIMITS["name"]))
    if routing is not None:
        amount = money(routing.amount_minor, routing.currency)
        ceiling = money(routing.ceiling_minor, routing.currency)
        facts.append(
            _fact(say.AMOUNT, say.AMOUNT_VS_CEILING.format(amount=amount, ceiling=ceiling), 120, tail=routing.rule)
        )
    facts += [
        _fact(say.NEEDS_ROLE, a.required_role, LIMITS["name"]),
        _fact(say.EXPIRES, when(a.expires_at), 40),
        _fact(say.POLICY, a.policy_version, 40),
    ]
    return facts


def _arguments(a: Approval) -> list[Card]:
    args = a.arguments if isinstance(a.arguments, dict) else {"arguments": a.arguments}
    rows = []
    for name in sorted(args)[: LIMITS["args"]]:
        source = a.provenance.get(name) if isinstance(a.provenance, dict) else None
        rows.append(
            _fact(
                neutralize(name, 40), args[name], LIMITS["value"], tail=say.SOURCE.get(str(source)) if source else None
            )
        )
    if len(args) > LIMITS["args"]:
        rows.append(_note(say.MORE.format(count=len(args) - LIMITS["args"])))
    return rows


def _evidence(a: Approval) -> list[Card]:
    if not a.evidence:
        return [_note(say.NO_EVIDENCE)]
    items: list[Card] = []
    for e in a.evidence[: LIMITS["evidence"]]:
        e = e if isinstance(e, dict) else {"id": e}
        items.append(_fact(neutralize(e.get("id", "?"), 80), e.get("title") or "", LIMITS["name"]))
        if e.get("excerpt"):
            items.append(_literal(e["excerpt"], LIMITS["excerpt"], italic=True, isSubtle=True))
    if len(a.evidence) > LIMITS["evidence"]:
        items.append(_note(say.MORE.format(count=len(a.evidence) - LIMITS["evidence"])))
    return items


def _decisions(a: Approval, people: People) -> list[Card]:
    out: list[Card] = []
    for d in a.decisions[: LIMITS["decisions"]]:
        template = say.DECISION_APPROVE if d.decision == "approve" else say.DECISION_REJECT
        at = outcome_when(d.at)
        out.append(
            _literal(
                template.format(who=neutralize(people.name(d.actor), LIMITS["name"]), when=at), 200, weight="Bolder"
            )
        )
        if d.comment:
            out.append(_fact(say.COMMENT, d.comment, LIMITS["comment"]))
    return out


def outcome_when(at: str) -> str:
    try:
        return when(datetime.fromisoformat(at.replace("Z", "+00:00")))
    except (ValueError, AttributeError):
        return neutralize(at, 40)


def _closing(a: Approval) -> list[Card]:
    if a.status == "approved":
        return [_banner(say.APPROVED_TITLE, "good"), *_outcome_lines(outcome_of(a.result))]
    if a.status == "rejected":
        return [_banner(say.REJECTED_TITLE, "attention")]
    if a.status == "superseded":
        return [_banner(say.SUPERSEDED, "warning")]
    return [_banner(say.EXPIRED_ON.format(when=when(a.expires_at)), "warning")]


# -- escalation -----------------------------------------------------------------------
def escalation_card(e: Escalation) -> Card:
    """For the person who picks a conversation up: why, the agent's summary, and every tool call."""
    body = [
        _heading(say.ESCALATION_TITLE, color="Attention"),
        _fact(say.ESCALATION_REASON, e.reason, 200),
        _literal(e.summary, LIMITS["summary"]),
        _fact(say.ESCALATION_CONVERSATION, f"{e.conversation_id} ({e.channel})", 120),
    ]
    if e.customer_id:
        body.append(_fact(say.ESCALATION_CUSTOMER, e.customer_id, LIMITS["name"]))
    rows = [
        _fact(
            neutralize(t.tool, 40),
            " · ".join(x for x in (t.decision, t.reason) if x) or "—",
            160,
            tail="error" if t.is_error else None,
        )
        for t in e.trace[: LIMITS["trace"]]
    ]
    if len(e.trace) > LIMITS["trace"]:
        rows.append(_note(say.MORE.format(count=len(e.trace) - LIMITS["trace"])))
    body.append(_section(say.ESCALATION_TRACE, rows or [_note(say.NO_TRACE)]))
    return _fit(_card(body))


# -- notices --------------------------------------------------------------------------
def notice_card(text: str) -> Card:
    """A one-line card (refusals, errors)."""
    return _card([_literal(text, 400, weight="Bolder")])


def with_notice(card: Card, text: str) -> Card:
    """``card`` with a notice on top (a refusal shown to the one who clicked)."""
    return {**card, "body": [_banner(neutralize(text, 300), "attention"), *card.get("body", [])]}


def _fit(card: Card) -> Card:
    size = len(json.dumps(card, ensure_ascii=False).encode())
    if size > MAX_CARD_BYTES:  # the limits above keep every card below this; a guard, not a path
        raise ValueError(f"card too large ({size} bytes)")
    return card
