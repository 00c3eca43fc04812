"""Adaptive Cards (schema 1.5) for confirmations, approvals, escalations and shadow proposals: pure functions.

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

from agent.views import ApprovalView, ConfirmationView, EscalationView, OutcomeView, ShadowView
from bot.links import unlink
from bot.teams import wording as say
from storage.records import aware

Card = dict[str, Any]
SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
VERSION = "1.5"
CONFIRM, DECLINE = "signoff.confirm", "signoff.decline"
APPROVE, REJECT = "signoff.approve", "signoff.reject"
#: The hand-off's verbs: the contract's strings (``agent.handoff``'s, which cards do not import).
TAKEOVER, HANDBACK, CLOSE = "signoff.takeover", "signoff.handback", "signoff.close"
#: A suggestion's Send (``agent.handoff_suggest.SEND``).
SEND_SUGGESTION = "signoff.suggestion.send"
SUGGESTION_LIMIT = 3000
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
_AT = re.compile(r"(?i)<(/?)at>")


def neutralize(text: Any, limit: int) -> str:
    """Literal, harmless, bounded text: no links, no mentions, no control or bidi characters."""
    s = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    s = s[: limit * 4]
    s = _CONTROL.sub("", s.replace("\r\n", "\n").replace("\t", " "))
    s = unlink(s)
    s = _AT.sub(lambda m: "‹" + m.group(1) + "at›", s)
    return s if len(s) <= limit else s[: limit - 1].rstrip() + "…"


def when(ts: datetime | None) -> str:
    """A timestamp as people read it, in UTC."""
    if ts is None:
        return "an unknown time"
    return (aware(ts) or ts).strftime("%Y-%m-%d %H:%M UTC")


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


def _outcome_lines(outcome: OutcomeView | None) -> list[Card]:
    if outcome is None:
        return []
    ref = neutralize(outcome.reference, LIMITS["name"]) if outcome.reference else None
    label = neutralize(outcome.label, 200)
    match outcome.kind:
        case "replayed":
            text = say.REPLAYED.format(when=when(outcome.at)) if outcome.at else say.REPLAYED_UNDATED
            lines = [_literal(text, 200, weight="Bolder"), _literal(label, 200, isSubtle=True)]
        case "failed":
            detail = f" ({neutralize(outcome.detail, 80)})" if outcome.detail else ""
            return [_literal(label + detail, 300, weight="Bolder")]
        case "reopened":
            return [_literal(label, 300, weight="Bolder")]
        case "done":
            lines = [_literal(say.DONE.format(label=label), 300)]
        case _:
            detail = f": {neutralize(outcome.detail, 60)}" if outcome.detail else ""
            return [_literal(label + detail, 300)]
    if ref:
        lines.append(_literal(say.REFERENCE.format(ref=ref), 200, isSubtle=True))
    return lines


# -- confirmation ---------------------------------------------------------------------
def confirmation_card(c: ConfirmationView) -> Card:
    """What the acting principal (often a customer) confirms: the action in human terms,
    from the runtime's ``summary``; after a decision, the outcome, who and when, no buttons."""
    summary = _literal(c.summary, LIMITS["summary"], weight="Bolder")
    if c.open:
        return _fit(
            _card(
                [_heading(say.CONFIRM_TITLE), summary, _note(say.CONFIRM_HINT)],
                [
                    _execute(say.CONFIRM, CONFIRM, c.id, c.version, style="positive", inputs="none"),
                    _execute(say.DECLINE, DECLINE, c.id, c.version, style="destructive", inputs="none"),
                ],
            )
        )
    who = neutralize(c.principal.name or "you", LIMITS["name"])
    if c.status in ("confirmed", "consumed"):
        head, banner = say.CONFIRMED, _banner(say.CONFIRMED_BY.format(who=who, when=when(c.decided_at)), "good")
    elif c.status == "declined":
        head, banner = say.DECLINED, _banner(say.DECLINED_BY.format(who=who, when=when(c.decided_at)), "attention")
    else:
        head, banner = say.SUPERSEDED_TITLE, _banner(say.SUPERSEDED_CONFIRMATION, "warning")
    waiting = [_note(say.AWAITING_APPROVAL, subtle=False)] if c.awaiting_approval else []
    return _fit(_card([_heading(head), summary, banner, *waiting, *_outcome_lines(c.outcome)]))


# -- approval -------------------------------------------------------------------------
def approval_card(a: ApprovalView) -> Card:
    """The supervisor's card: the exact action with each argument's provenance, the
    requester and account, the amount against the ceiling and why it was routed, evidence,
    the model's rationale labelled untrusted, decisions so far, and Approve / Reject (with a
    required comment) while it is open; the outcome once it is decided or expired."""
    body = [
        _heading(_APPROVAL_TITLES[a.state], color="Default" if a.open else "Accent"),
        _literal(a.summary, LIMITS["summary"], weight="Bolder"),
    ]
    if a.approvals_required > 1:
        body.append(_note(say.PROGRESS.format(done=a.approvals_so_far, needed=a.approvals_required), subtle=False))
    body += _approval_facts(a)
    body.append(_section(say.ARGUMENTS, _arguments(a)))
    body.append(_section(say.EVIDENCE, _evidence(a)))
    if a.rationale:
        body.append(
            _section(say.RATIONALE_LABEL, [_literal(a.rationale, LIMITS["rationale"], italic=True)], style="warning")
        )
    body += _decisions(a)
    if a.open:
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


_APPROVAL_TITLES = {
    "open": say.APPROVAL_TITLE,
    "approved": say.APPROVED_TITLE,
    "rejected": say.REJECTED_TITLE,
    "superseded": say.SUPERSEDED_TITLE,
    "expired": say.EXPIRED_TITLE,
}


def _approval_facts(a: ApprovalView) -> list[Card]:
    facts = [_fact(say.REQUESTED_BY, a.requester.shown, LIMITS["name"])]
    if a.customer_id:
        facts.append(_fact(say.ACCOUNT, a.customer_id, LIMITS["name"]))
    if a.amount is not None:
        facts.append(_fact(say.AMOUNT, _amount(a), 160))
    if a.reason_text:
        facts.append(_fact(say.ROUTED, a.reason_text, 200))
    facts += [
        _fact(say.NEEDS_ROLE, a.required_role, LIMITS["name"]),
        _fact(say.EXPIRES, when(a.expires_at), 40),
        _fact(say.POLICY, a.policy_version, 40),
    ]
    return facts


def _amount(a: ApprovalView) -> str:
    if a.ceiling is None:
        return str(a.amount)
    if a.aggregate is not None:
        return say.AMOUNT_WITH_AGGREGATE.format(amount=a.amount, ceiling=a.ceiling, aggregate=a.aggregate)
    return say.AMOUNT_VS_CEILING.format(amount=a.amount, ceiling=a.ceiling)


def _arguments(a: ApprovalView) -> list[Card]:
    rows = []
    for arg in sorted(a.arguments, key=lambda x: x.name)[: LIMITS["args"]]:
        source = say.SOURCE.get(arg.source) if arg.source else None
        rows.append(_fact(neutralize(arg.name, 40), arg.value, LIMITS["value"], tail=source))
    if len(a.arguments) > LIMITS["args"]:
        rows.append(_note(say.MORE.format(count=len(a.arguments) - LIMITS["args"])))
    return rows


def _evidence(a: ApprovalView) -> list[Card]:
    if not a.evidence:
        return [_note(say.NO_EVIDENCE)]
    items: list[Card] = []
    for e in a.evidence[: LIMITS["evidence"]]:
        items.append(_fact(neutralize(e.id, 80), e.title or "", LIMITS["name"]))
        if e.excerpt:
            items.append(_literal(e.excerpt, LIMITS["excerpt"], italic=True, isSubtle=True))
    if len(a.evidence) > LIMITS["evidence"]:
        items.append(_note(say.MORE.format(count=len(a.evidence) - LIMITS["evidence"])))
    return items


def _decisions(a: ApprovalView) -> list[Card]:
    out: list[Card] = []
    for d in a.decisions[: LIMITS["decisions"]]:
        template = say.DECISION_APPROVE if d.decision == "approve" else say.DECISION_REJECT
        who = neutralize(d.actor.shown, LIMITS["name"])
        out.append(_literal(template.format(who=who, when=when(d.at)), 200, weight="Bolder"))
        if d.comment:
            out.append(_fact(say.COMMENT, d.comment, LIMITS["comment"]))
    return out


def _closing(a: ApprovalView) -> list[Card]:
    if a.state == "approved":
        return [_banner(say.APPROVED_TITLE, "good"), *_outcome_lines(a.outcome)]
    if a.state == "rejected":
        return [_banner(say.REJECTED_TITLE, "attention")]
    if a.state == "superseded":
        return [_banner(say.SUPERSEDED, "warning")]
    return [_banner(say.EXPIRED_ON.format(when=when(a.expires_at)), "warning")]


# -- escalation -----------------------------------------------------------------------
def escalation_card(e: EscalationView, *, handoff_id: str | None = None) -> Card:
    """For the person who picks a conversation up: why, the agent's summary, and every tool call;
    with a hand-off, Take over, Hand back and Close (``Action.Execute``, data: its id only)."""
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
    if handoff_id is None:
        return _fit(_card(body))
    body.append(_note(say.HANDOFF_HOW))
    actions = [
        _execute(say.TAKEOVER_BUTTON, TAKEOVER, handoff_id, 1, style="positive", inputs="none"),
        _execute(say.HANDBACK_BUTTON, HANDBACK, handoff_id, 1, style="default", inputs="none"),
        _execute(say.CLOSE_BUTTON, CLOSE, handoff_id, 1, style="default", inputs="none"),
    ]
    return _fit(_card(body, actions))


def suggestion_text(text: str) -> str:
    """The agent's suggested reply exactly as its card shows it (and as Send sends it)."""
    return neutralize(text, SUGGESTION_LIMIT)


def suggestion_card(text: str, suggestion_id: str) -> Card:
    """The agent's suggestion under the escalation card: marked as one, literal, with Send."""
    body = [_note(say.SUGGESTION_MARK, subtle=False), _literal(text, SUGGESTION_LIMIT)]
    send = _execute(say.SUGGESTION_SEND_BUTTON, SEND_SUGGESTION, suggestion_id, 1, style="positive", inputs="none")
    return _fit(_card(body, [send]))


# -- shadow suggestion ---------------------------------------------------------------------
def shadow_card(v: ShadowView) -> Card:
    """The agent's proposal in shadow as staff see it: marked "shadow: not executed", the exact
    action from its stored arguments, who asked, the account and the amount; no actions."""
    body = [
        _heading(say.SHADOW_TITLE.format(label=v.label), color="Warning"),
        _literal(v.summary, LIMITS["summary"], weight="Bolder"),
        _fact(say.REQUESTED_BY, v.requester.shown, LIMITS["name"]),
    ]
    if v.customer_id:
        body.append(_fact(say.ACCOUNT, v.customer_id, LIMITS["name"]))
    if v.amount is not None:
        body.append(_fact(say.AMOUNT, v.amount, 160))
    body += [
        _fact(say.SHADOW_WOULD_NEED, v.would_need, 200),
        _fact(say.ESCALATION_CONVERSATION, f"{v.conversation_id} ({v.channel})", 120),
        _fact(say.POLICY, v.policy_version, 40),
    ]
    rows = [_fact(neutralize(a.name, 40), a.value, LIMITS["value"]) for a in v.arguments[: LIMITS["args"]]]
    body += [_section(say.ARGUMENTS, rows or [_note("—")]), _note(say.SHADOW_NOTE)]
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
