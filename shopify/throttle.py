"""Shopify's cost bucket: each call costs points; the bucket refills at ``restoreRate`` a second.

Every response reports ``extensions.cost.throttleStatus``; :class:`CostBucket` remembers the
last one and says how long to wait before a call of a given cost fits, so a busy shop is
waited out (never an error the customer sees) and the wait is an ``asyncio.sleep``, never a
blocked loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Until a response says otherwise: what a query of ours costs, roughly.
DEFAULT_COST = 50.0
#: The longest a single wait may be (a shop reporting nonsense cannot park a turn for hours).
MAX_WAIT_S = 30.0


@dataclass(frozen=True, kw_only=True)
class ThrottleStatus:
    """``extensions.cost.throttleStatus`` of one response."""

    maximum: float
    available: float
    restore_rate: float

    @classmethod
    def of(cls, extensions: Any) -> ThrottleStatus | None:
        """The status in a response's ``extensions``, if it has a well-formed one."""
        try:
            status = extensions["cost"]["throttleStatus"]
            return cls(
                maximum=float(status["maximumAvailable"]),
                available=float(status["currentlyAvailable"]),
                restore_rate=float(status["restoreRate"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


def requested_cost(extensions: Any) -> float | None:
    """``extensions.cost.requestedQueryCost``, if present."""
    try:
        return float(extensions["cost"]["requestedQueryCost"])
    except (KeyError, TypeError, ValueError):
        return None


class CostBucket:
    """The shop's bucket as last reported, refilled by the clock in between."""

    def __init__(self) -> None:
        self._status: ThrottleStatus | None = None
        self._at = 0.0
        self.cost = DEFAULT_COST

    def observe(self, status: ThrottleStatus | None, cost: float | None, *, now: float) -> None:
        """Remember a response's bucket (and what the call asked for)."""
        if status is not None:
            self._status, self._at = status, now
        if cost is not None and cost > 0:
            self.cost = cost

    def wait_s(self, *, now: float, cost: float | None = None) -> float:
        """Seconds until a call of ``cost`` points fits in the bucket (0: now)."""
        s = self._status
        if s is None or s.restore_rate <= 0:
            return 0.0
        need = min(cost if cost is not None else self.cost, s.maximum)
        have = min(s.maximum, s.available + (now - self._at) * s.restore_rate)
        if have >= need:
            return 0.0
        return min(MAX_WAIT_S, (need - have) / s.restore_rate)
