"""What every face shows of an approval, a confirmation, an escalation and a shadow proposal: built once, here.

A face (Slack's Block Kit, Teams' Adaptive Cards, the chat widget) renders these frozen views
and decides nothing itself: whether the item is still open (expiry included), the amount, the
ceiling and the aggregate (formatted by :func:`tools.results.format_money`, the one money
formatter), why policy routed it (a :data:`~agent.decisions.RoutingReason`, in words from
:mod:`agent.wording`), what execution did (read through the tool's :class:`~tools.registry.ToolDef`)
and who the people are. Each view carries the record's id and version: a click binds to what
was shown. Text in a view is plain (nothing escaped): each renderer escapes for its own format.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeGuard, get_args

from agent.decisions import RoutingReason
from agent.notify import EscalationNotice, ShadowNotice
from agent.wording import (
    OUTCOME_FAILED,
    OUTCOME_REOPENED,
    OUTCOME_UNKNOWN,
    ROUTING_REASONS,
    SHADOW_LABEL,
    SHADOW_WOULD_NEED,
)
from storage.records import Approval, ApprovalStatus, Confirmation, ConfirmationStatus, aware
from tools.registry import ToolDef
from tools.results import format_money

ApprovalState = Literal["open", "approved", "rejected", "expired", "superseded"]
OutcomeKind = Literal["done", "replayed", "failed", "reopened", "unknown"]
_REASONS: frozenset[str] = frozenset(get_args(RoutingReason))


@dataclass(frozen=True, kw_only=True)
class PersonView:
    """Someone on a card: their principal key (``supervisor:S-1``) and display name, if known."""

    key: str
    name: str | None = None

    @property
    def shown(self) -> str:
        """The name, else the key."""
        return self.name or self.key


@dataclass(frozen=True, kw_only=True)
class OutcomeView:
    """What carrying the action out did, in the few words a person needs."""

    kind: OutcomeKind
    #: Our words for it: the tool's ``done_phrase`` filled in ("Refunded 30.00 USD on O-1042"),
    #: or why nothing was done.
    label: str
    #: The id the action created or changed (the tool's ``id_field``), if any.
    reference: str | None = None
    #: The failure's code or detail, as the tool or gate gave it (untrusted: escape it).
    detail: str | None = None
    #: For a replay: when it had been done.
    at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class DecisionView:
    """One supervisor's decision."""

    actor: PersonView
    decision: Literal["approve", "reject"]
    comment: str | None
    at: datetime | None


@dataclass(frozen=True, kw_only=True)
class ArgumentView:
    """One argument of the exact action and where its value came from (``system_of_record``…)."""

    name: str
    value: str
    source: str | None


@dataclass(frozen=True, kw_only=True)
class EvidenceView:
    """One piece of evidence the model cited."""

    id: str
    title: str | None
    excerpt: str | None


@dataclass(frozen=True, kw_only=True)
class ApprovalView:
    """An approval as every face shows it."""

    id: str
    version: int
    tool: str
    summary: str
    state: ApprovalState
    #: Whether decisions are still taken: pending and not past its expiry.
    open: bool
    #: Whether the action moves money or cancels (a face may ask "are you sure?").
    moves_money: bool
    customer_id: str | None
    requester: PersonView
    required_role: str
    approvals_required: int
    approvals_so_far: int
    decisions: tuple[DecisionView, ...]
    decider: PersonView | None
    comment: str | None
    amount: str | None
    ceiling: str | None
    #: The amount counted against the ceiling with earlier money; ``None`` when it is the amount.
    aggregate: str | None
    reason: RoutingReason | None
    reason_text: str | None
    outcome: OutcomeView | None
    arguments: tuple[ArgumentView, ...]
    evidence: tuple[EvidenceView, ...]
    #: The model's explanation: untrusted, always labelled as such.
    rationale: str | None
    policy_version: str
    superseded_by: str | None
    expires_at: datetime
    created_at: datetime
    decided_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class ConfirmationView:
    """A confirmation as every face shows it (it may be read by another organisation)."""

    id: str
    version: int
    tool: str
    summary: str
    status: ConfirmationStatus
    open: bool
    moves_money: bool
    principal: PersonView
    #: Confirmed, and a supervisor must still approve it.
    awaiting_approval: bool
    outcome: OutcomeView | None
    decided_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class TraceView:
    """One tool call of an escalated run."""

    tool: str
    decision: str | None
    reason: str | None
    is_error: bool
    result: Any = None


@dataclass(frozen=True, kw_only=True)
class EscalationView:
    """A conversation handed to a person."""

    conversation_id: str
    channel: str
    customer_id: str | None
    #: The agent's words (untrusted).
    reason: str
    summary: str
    trace: tuple[TraceView, ...]


@dataclass(frozen=True, kw_only=True)
class ShadowView:
    """An action the agent proposed in shadow, shown to staff as a suggestion: recorded, not
    executed (nothing to approve: a person carries it out, or not, themselves)."""

    proposal_id: str
    conversation_id: str
    channel: str
    tool: str
    #: The tool's description of the exact arguments (our words, never the model's).
    summary: str
    customer_id: str | None
    requester: PersonView
    amount: str | None
    #: What it would have needed outside shadow, in words ("an approval by a supervisor").
    would_need: str
    arguments: tuple[ArgumentView, ...]
    policy_version: str
    created_at: datetime
    #: How every face marks it ("shadow: not executed").
    label: str = SHADOW_LABEL


# -- builders ---------------------------------------------------------------------------------
def approval_view(
    a: Approval, *, tool: ToolDef | None, now: datetime, names: Mapping[str, str] | None = None
) -> ApprovalView:
    """``a`` as shown at ``now``; ``tool`` is its catalogue entry, ``names`` display names by key."""
    known = names or {}
    state = _approval_state(a.status, a.expires_at, now)
    args = a.arguments if isinstance(a.arguments, dict) else {}
    routing = a.routing if isinstance(a.routing, dict) else {}
    amount, ceiling, aggregate = _figures(a, args, routing)
    reason = routing.get("reason")
    why: RoutingReason | None = reason if reason in _REASONS else None
    approvals = [d for d in a.decisions if d.decision == "approve"]
    return ApprovalView(
        id=a.id,
        version=a.version,
        tool=a.tool,
        summary=a.summary,
        state=state,
        open=state == "open",
        moves_money=_moves_money(tool),
        customer_id=a.customer_id,
        requester=_person(a.requester, known),
        required_role=a.required_role,
        approvals_required=a.approvals_required,
        approvals_so_far=len(approvals),
        decisions=tuple(
            DecisionView(actor=_person(d.actor, known), decision=d.decision, comment=d.comment, at=_time(d.at))
            for d in a.decisions
        ),
        decider=_person(a.decider, known) if a.decider else None,
        comment=a.comment,
        amount=amount,
        ceiling=ceiling,
        aggregate=aggregate,
        reason=why,
        reason_text=ROUTING_REASONS[why] if why is not None else None,
        outcome=outcome_view(a.result, tool=tool, args=args) if a.status == "approved" else None,
        arguments=tuple(_argument(k, v, a.provenance) for k, v in args.items()),
        evidence=tuple(_evidence(e) for e in a.evidence),
        rationale=a.rationale.strip() if a.rationale and a.rationale.strip() else None,
        policy_version=a.policy_version,
        superseded_by=a.superseded_by,
        expires_at=a.expires_at,
        created_at=a.created_at,
        decided_at=a.decided_at,
    )


def confirmation_view(
    c: Confirmation, *, tool: ToolDef | None, names: Mapping[str, str] | None = None
) -> ConfirmationView:
    """``c`` as its card shows it; ``tool`` is its catalogue entry."""
    stored = c.outcome or {}
    args = c.arguments if isinstance(c.arguments, dict) else {}
    executed = stored.get("decision") == "execute"
    result = stored.get("result") if executed else None
    if executed and stored.get("is_error") and isinstance(result, dict):
        result = {"status": "FAILED", **result}
    return ConfirmationView(
        id=c.id,
        version=c.version,
        tool=c.tool,
        summary=c.summary,
        status=c.status,
        open=c.status == "pending",
        moves_money=_moves_money(tool),
        principal=_person(c.principal, names or {}),
        awaiting_approval=stored.get("decision") == "approval",
        outcome=outcome_view(result, tool=tool, args=args) if executed else None,
        decided_at=c.decided_at,
    )


def escalation_view(notice: EscalationNotice) -> EscalationView:
    """An escalation from the runtime's notice (its conversation and trace entries)."""
    conv = notice.conversation
    return EscalationView(
        conversation_id=conv.id,
        channel=conv.channel,
        customer_id=conv.customer_id,
        reason=notice.reason,
        summary=notice.summary,
        trace=tuple(
            TraceView(
                tool=str(t.get("tool") or "?"),
                decision=t.get("decision") if isinstance(t.get("decision"), str) else None,
                reason=t.get("reason") if isinstance(t.get("reason"), str) else None,
                is_error=bool(t.get("is_error")),
                result=t.get("result"),
            )
            for t in notice.trace
        ),
    )


def shadow_view(notice: ShadowNotice, *, tool: ToolDef | None, names: Mapping[str, str] | None = None) -> ShadowView:
    """A shadow proposal from the runtime's notice (its exact arguments) and the tool's catalogue entry."""
    args = notice.arguments
    money = tool.money(args) if tool is not None and tool.money is not None else None
    return ShadowView(
        proposal_id=notice.proposal_id,
        conversation_id=notice.conversation.id,
        channel=notice.conversation.channel,
        tool=notice.tool,
        summary=notice.summary,
        customer_id=notice.customer_id,
        requester=_person(notice.requester, names or {}),
        amount=format_money(money.amount_minor, money.currency) if money is not None else None,
        would_need=SHADOW_WOULD_NEED.get(notice.would_need, notice.would_need),
        arguments=tuple(_argument(k, v, None) for k, v in args.items()),
        policy_version=notice.policy_version,
        created_at=notice.created_at,
    )


def outcome_view(result: Any, *, tool: ToolDef | None, args: Mapping[str, Any]) -> OutcomeView | None:
    """What an executed action's stored ``result`` says, read through its ``tool``."""
    if result is None:
        return None
    if not isinstance(result, dict):
        return OutcomeView(kind="unknown", label=OUTCOME_UNKNOWN, detail=str(result)[:200])
    reference = tool.action_id(result) if tool is not None else None
    status = str(result.get("status") or "")
    if status == "FAILED" or result.get("error"):
        detail = result.get("error") or result.get("reason")
        return OutcomeView(kind="failed", label=OUTCOME_FAILED, detail=str(detail)[:300] if detail else None)
    if status == "REOPENED":
        new = result.get("new_approval_id")
        return OutcomeView(kind="reopened", label=OUTCOME_REOPENED, reference=str(new) if new else None)
    if tool is None:
        return OutcomeView(kind="unknown", label=OUTCOME_UNKNOWN, detail=status or None)
    label = _done_label(tool, args, reference)
    if result.get("replayed") is True:
        at = _time(result.get("original_at") or result.get("executed_at") or result.get("created_at"))
        return OutcomeView(kind="replayed", label=label, reference=reference, at=at)
    return OutcomeView(kind="done", label=label, reference=reference)


# -- parts ------------------------------------------------------------------------------------
def _approval_state(status: ApprovalStatus, expires_at: datetime, now: datetime) -> ApprovalState:
    if status == "pending":
        expires, current = aware(expires_at), aware(now)
        return "expired" if expires is not None and current is not None and current >= expires else "open"
    return status


def _figures(a: Approval, args: Mapping[str, Any], routing: Mapping[str, Any]) -> tuple[str | None, ...]:
    """Amount, ceiling and aggregate as people read them (``None`` where unknown)."""
    currency = a.currency or args.get("currency")
    amount = a.amount_minor if a.amount_minor is not None else args.get("amount_minor")
    if not isinstance(currency, str) or not _minor(amount):
        return None, None, None
    ceiling, aggregate = routing.get("ceiling_minor"), routing.get("aggregate_minor")
    return (
        format_money(amount, currency),
        format_money(ceiling, currency) if _minor(ceiling) and routing.get("reason") != "risk_tier" else None,
        format_money(aggregate, currency) if _minor(aggregate) and aggregate != amount else None,
    )


def _minor(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _moves_money(tool: ToolDef | None) -> bool:
    return tool is not None and (tool.money is not None or tool.money_at_stake is not None)


def _done_label(tool: ToolDef, args: Mapping[str, Any], reference: str | None) -> str:
    if not tool.done_phrase:
        return tool.done_status.replace("_", " ").capitalize()
    amount, currency = args.get("amount_minor"), args.get("currency")
    money = format_money(amount, currency) if _minor(amount) and isinstance(currency, str) else ""
    said = tool.done_phrase.format(amount=money, order=args.get("order_id", ""), id=reference or "")
    said = " ".join(said.split())
    return said[:1].upper() + said[1:]


def _person(key: str | None, names: Mapping[str, str]) -> PersonView:
    if not key:
        return PersonView(key="", name=None)
    return PersonView(key=key, name=names.get(key))


def _argument(name: str, value: Any, provenance: Any) -> ArgumentView:
    source = provenance.get(name) if isinstance(provenance, dict) else None
    shown = value if isinstance(value, str) else _json(value)
    return ArgumentView(name=str(name), value=shown, source=str(source) if source is not None else None)


def _evidence(item: Any) -> EvidenceView:
    e = item if isinstance(item, dict) else {"id": item}
    title, excerpt = e.get("title"), e.get("excerpt")
    return EvidenceView(
        id=str(e.get("id", "?")),
        title=str(title) if title else None,
        excerpt=str(excerpt) if excerpt else None,
    )


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return aware(value)
    if isinstance(value, str) and len(value) <= 64:
        try:
            return aware(datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None
