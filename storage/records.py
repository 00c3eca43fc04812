"""Frozen records the repositories return; ORM rows never leave ``storage/``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

#: Where every timestamp comes from: the composition root injects one (``Services.clock``).
Clock = Callable[[], datetime]


def wall_clock() -> datetime:
    """The real time, aware UTC: the clock a repository uses when none is injected."""
    return datetime.now(UTC)


def aware(ts: datetime | None) -> datetime | None:
    """Timestamps read back from SQLite are naive; they are UTC."""
    if ts is not None and ts.tzinfo is None:
        return ts.replace(tzinfo=UTC)
    return ts


ApprovalStatus = Literal["pending", "approved", "rejected", "expired", "superseded"]
ConfirmationStatus = Literal["pending", "confirmed", "declined", "superseded", "consumed"]
RunStatus = Literal["running", "waiting", "completed", "escalated", "failed"]
LedgerStatus = Literal["executing", "succeeded", "failed", "needs_human"]


@dataclass(frozen=True, kw_only=True)
class Conversation:
    """A conversation: who it is with, on which channel, and what it has loaded."""

    id: str
    channel: str
    external_ref: str | None
    principal_kind: str
    principal_id: str
    customer_id: str | None
    status: str
    loaded_groups: tuple[str, ...]
    model: str
    prompt_version: str
    next_seq: int
    meta: dict[str, Any]
    created_at: datetime
    #: The budget the (unbound) principal shares: ``tools.context.Principal.group``.
    principal_group: str | None = None


@dataclass(frozen=True, kw_only=True)
class StoredMessage:
    """One stored message of a conversation's history."""

    seq: int
    role: Literal["user", "assistant"]
    content: list[dict[str, Any]]
    run_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class Run:
    """One run of the agent: its status, steps, versions and what waits on a person."""

    id: str
    conversation_id: str
    status: RunStatus
    steps: int
    model: str
    prompt_version: str
    policy_version: str
    trace_id: str
    pending_ids: tuple[str, ...]
    state: dict[str, Any]
    holder: str | None = None


@dataclass(frozen=True, kw_only=True)
class Proposal:
    """One proposed tool call and what the gate decided."""

    id: str
    run_id: str
    conversation_id: str
    tool_use_id: str
    tool: str
    arguments: Any
    args_hash: str
    principal: str
    step: int
    #: ``None``: the model proposed it; else what the runtime acted on (``confirmation:cnf_…``).
    origin: str | None = None
    decision: str | None
    reason: str | None
    idempotency_key: str | None
    result: Any | None
    is_error: bool
    policy_version: str
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class Confirmation:
    """A confirmation of exact arguments asked of the acting person."""

    id: str
    conversation_id: str
    run_id: str
    proposal_id: str
    tool: str
    arguments: Any
    args_hash: str
    principal: str
    code: str
    summary: str
    status: ConfirmationStatus
    version: int
    created_at: datetime
    decided_at: datetime | None
    target: str | None = None
    idempotency_key: str | None = None
    shown_at: datetime | None = None
    outcome: dict[str, Any] | None = None
    surfaces: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class NewConfirmation:
    """What a turn asks to be confirmed; the repository makes it a pending confirmation (version 1)."""

    id: str
    conversation_id: str
    run_id: str
    proposal_id: str
    tool: str
    arguments: Any
    args_hash: str
    principal: str
    code: str
    summary: str
    target: str | None
    idempotency_key: str | None
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class Decision:
    """One supervisor's decision on an approval."""

    actor: str
    decision: Literal["approve", "reject"]
    comment: str | None
    at: str


@dataclass(frozen=True, kw_only=True)
class Approval:
    """An approval asked of a supervisor, with its decisions and outcome."""

    id: str
    proposal_id: str
    run_id: str
    conversation_id: str
    tool: str
    arguments: Any
    args_hash: str
    customer_id: str | None
    summary: str
    status: ApprovalStatus
    version: int
    required_role: str
    approvals_required: int
    decisions: tuple[Decision, ...]
    requester: str
    decider: str | None
    comment: str | None
    rationale: str | None
    evidence: tuple[dict[str, Any], ...]
    provenance: dict[str, Any]
    idempotency_key: str | None
    policy_version: str
    result: Any | None
    superseded_by: str | None
    #: Where it is shown, per surface (``{"slack": {"channel", "ts"}, "teams": {...}}``).
    surfaces: dict[str, Any]
    expires_at: datetime
    created_at: datetime
    decided_at: datetime | None
    amount_minor: int | None = None
    currency: str | None = None
    #: Why policy sent it here: reason, ceiling_minor, aggregate_minor, approvals_required.
    routing: dict[str, Any] | None = None

    def as_public(self) -> dict[str, Any]:
        """The JSON shape the HTTP API and CLI show."""
        return {
            "id": self.id,
            "status": self.status,
            "version": self.version,
            "tool": self.tool,
            "arguments": self.arguments,
            "summary": self.summary,
            "customerId": self.customer_id,
            "conversationId": self.conversation_id,
            "runId": self.run_id,
            "requiredRole": self.required_role,
            "approvalsRequired": self.approvals_required,
            "decisions": [d.__dict__ for d in self.decisions],
            "requester": self.requester,
            "decider": self.decider,
            "comment": self.comment,
            "rationale": {"text": self.rationale, "trust": "untrusted (written by the model)"},
            "evidence": list(self.evidence),
            "provenance": self.provenance,
            "policyVersion": self.policy_version,
            "amount": (
                {"amountMinor": self.amount_minor, "currency": self.currency} if self.amount_minor is not None else None
            ),
            "routing": self.routing,
            "result": self.result,
            "supersededBy": self.superseded_by,
            "expiresAt": self.expires_at.isoformat(),
            "createdAt": self.created_at.isoformat(),
            "decidedAt": self.decided_at.isoformat() if self.decided_at else None,
        }


@dataclass(frozen=True, kw_only=True)
class NewApproval:
    """What a turn asks a supervisor to approve; the repository makes it pending (version 1)."""

    id: str
    proposal_id: str
    run_id: str
    conversation_id: str
    tool: str
    arguments: Any
    args_hash: str
    customer_id: str | None
    summary: str
    required_role: str
    approvals_required: int
    requester: str
    rationale: str | None
    evidence: tuple[dict[str, Any], ...]
    provenance: dict[str, Any]
    idempotency_key: str | None
    policy_version: str
    expires_at: datetime
    created_at: datetime
    amount_minor: int | None = None
    currency: str | None = None
    routing: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class LedgerEntry:
    """An idempotency-ledger entry: a key, its status and the result stored under it."""

    key: str
    tool: str
    status: LedgerStatus
    result: Any | None
    proposal_id: str | None
    run_id: str | None
    arguments: Any = field(default=None)
    created_at: datetime | None = None
    holder: str | None = None
