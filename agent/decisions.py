"""The gatekeeper's closed set of decisions. Frozen, tagged data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tools.context import error_result


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
    tag: Literal["confirmation"] = "confirmation"
    summary: str


@dataclass(frozen=True, kw_only=True)
class NeedsApproval:
    tag: Literal["approval"] = "approval"
    summary: str
    required_role: str
    approvals_required: int
    reason: str
    key: str | None


@dataclass(frozen=True, kw_only=True)
class Record:
    """Shadow stage: everything checks out, but the action is recorded, not executed."""

    tag: Literal["record"] = "record"
    summary: str
    would_need: str  # execute | confirmation | approval


Decision = Execute | Reject | Intercept | NeedsConfirmation | NeedsApproval | Record
