"""The gatekeeper's closed set of decisions. Frozen, tagged data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tools.context import StaffRole, error_result

#: The gate's closed set of verdicts, as stored on a proposal and reported to a person.
DecisionTag = Literal["execute", "reject", "intercept", "confirmation", "approval", "record"]
#: Why policy sent an action to a supervisor: the gatekeeper emits these, every face names them.
RoutingReason = Literal[
    "risk_tier", "over_ceiling", "aggregate_over_ceiling", "cancellation_over_threshold", "staff_daily_over_cap"
]


@dataclass(frozen=True, kw_only=True)
class Execute:
    tag: Literal["execute"] = "execute"
    key: str | None


@dataclass(frozen=True, kw_only=True)
class Reject:
    """A refusal the model can act on; becomes an ``is_error`` tool result."""

    tag: Literal["reject"] = "reject"
    reason: str
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def as_result(self) -> dict[str, Any]:
        return error_result(self.reason, self.message, self.details)


@dataclass(frozen=True, kw_only=True)
class Intercept:
    """The same call (name + canonical arguments) ran in the last few steps."""

    tag: Literal["intercept"] = "intercept"
    previous: Any
    step: int


@dataclass(frozen=True, kw_only=True)
class NeedsConfirmation:
    """The acting principal must confirm exactly these arguments first."""

    tag: Literal["confirmation"] = "confirmation"
    summary: str
    #: What the action acts on; only a re-proposal on the same target supersedes it.
    target: str
    #: Fixed now, reused by every later attempt (a crash-recovery, a day boundary).
    key: str | None


@dataclass(frozen=True, kw_only=True)
class Routing:
    """The money at stake and the figures that sent an action to a supervisor."""

    amount_minor: int
    currency: str
    #: The limit it was compared with (a ceiling, a cancellation threshold, the dual threshold).
    ceiling_minor: int
    #: Today's aggregate including this amount (refunds made, approvals pending).
    aggregate_minor: int


@dataclass(frozen=True, kw_only=True)
class NeedsApproval:
    tag: Literal["approval"] = "approval"
    summary: str
    required_role: StaffRole
    approvals_required: int
    reason: RoutingReason
    key: str | None
    routing: Routing | None = None


@dataclass(frozen=True, kw_only=True)
class Record:
    """Shadow stage: everything checks out, but the action is recorded, not executed."""

    tag: Literal["record"] = "record"
    summary: str
    would_need: Literal["execute", "confirmation", "approval"]


Decision = Execute | Reject | Intercept | NeedsConfirmation | NeedsApproval | Record
