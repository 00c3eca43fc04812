"""View-models the card renderers take besides the frozen records.

The runtime (or the lead's glue) builds them; :mod:`bot.teams.cards` only reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from storage.records import aware

_REF_KEYS = ("refund_id", "return_id", "message_id", "payment_id", "order_id", "id")


@dataclass(frozen=True, kw_only=True)
class People:
    """Display names for principal keys (``supervisor:S-1`` → ``Dana Lee``)."""

    names: Mapping[str, str] = field(default_factory=dict)

    def name(self, key: str | None) -> str:
        if not key:
            return "someone"
        return self.names.get(key) or key


@dataclass(frozen=True, kw_only=True)
class Routing:
    """Why an approval was routed: the amount against the ceiling it crossed."""

    amount_minor: int
    currency: str
    ceiling_minor: int
    #: Our own wording of the rule, e.g. "refunds above the supervisor ceiling".
    rule: str | None = None


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What executing the action returned, in the few words a person needs."""

    status: str | None
    reference: str | None
    replayed: bool
    original_at: datetime | None
    error: str | None = None


def outcome_of(result: Any) -> Outcome | None:
    """Read a tool result dict: ``status``, the first id, ``error``, and the replay marker
    (``"replayed": true`` with ``original_id``/``original_at``, per the API contract)."""
    if not isinstance(result, dict):
        return None
    reference = next((str(result[k]) for k in ("original_id", *_REF_KEYS) if isinstance(result.get(k), str)), None)
    status = result.get("status")
    error = result.get("error")
    return Outcome(
        status=str(status) if status is not None else None,
        reference=reference,
        replayed=result.get("replayed") is True,
        original_at=_when(result.get("original_at")),
        error=str(error) if error is not None else None,
    )


def _when(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return aware(value)
    if isinstance(value, str):
        try:
            return aware(datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


@dataclass(frozen=True, kw_only=True)
class TraceRow:
    """One tool call of the run, for the person picking up an escalation."""

    tool: str
    decision: str | None
    reason: str | None
    is_error: bool


@dataclass(frozen=True, kw_only=True)
class Escalation:
    """An escalated conversation (built from the runtime's ``EscalationNotice``)."""

    conversation_id: str
    channel: str
    customer_id: str | None
    reason: str
    summary: str
    trace: tuple[TraceRow, ...] = ()
