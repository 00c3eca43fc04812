"""A per-person bound on the audit events a person's clicks add.

Feedback votes and refused clicks change nothing, yet each was an audit row: anyone who can
click could grow the append-only log without end. A person gets ``per_window`` such events per
``window_s`` seconds; past that the click is still answered, but not audited again — the
caller announces an ``audit.suppressed`` event instead (counted in
``signoff_audit_suppressed_total``, never stored). The budget is per process: each replica
bounds its own share.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable

from storage.audit import AuditEvent, AuditLog
from storage.db import Database

#: Feedback votes and refused clicks one person may have audited per window.
PER_WINDOW = 10
WINDOW_S = 60.0
#: People remembered at once (the least recently seen are forgotten first).
MAX_PEOPLE = 10_000


class AuditBudget:
    """Sliding-window counts of one kind of audit event per person."""

    def __init__(
        self,
        *,
        per_window: int = PER_WINDOW,
        window_s: float = WINDOW_S,
        max_people: int = MAX_PEOPLE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if per_window < 1 or window_s <= 0 or max_people < 1:
            raise ValueError("per_window and max_people must be >= 1 and window_s > 0")
        self.per_window, self.window_s, self.max_people, self.clock = per_window, window_s, max_people, clock
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    def allow(self, person: str) -> bool:
        """Whether ``person`` may add one more event now (and count it when so)."""
        now = self.clock()
        times = self._seen.pop(person, None) or deque()
        while times and now - times[0] >= self.window_s:
            times.popleft()
        allowed = len(times) < self.per_window
        if allowed:
            times.append(now)
        self._seen[person] = times
        while len(self._seen) > self.max_people:
            self._seen.popitem(last=False)
        return allowed

    async def append(self, db: Database, audit: AuditLog, event: AuditEvent, *, person: str, channel: str) -> bool:
        """Append ``event`` to ``audit`` within ``person``'s budget; past it, announce it as
        suppressed (a metric, no row). True when the event was appended."""
        if self.allow(person):
            await audit.append(event)
            return True
        db.announce([AuditEvent(kind="audit.suppressed", data={"kind": event.kind, "channel": channel})])
        return False


__all__ = ["MAX_PEOPLE", "PER_WINDOW", "WINDOW_S", "AuditBudget"]
