"""How far behind the event loop runs: the worker's brake when its turns would make the loop slow.

``signoff serve`` runs the worker on the web server's loop. Turns wait on the model most of the
time, so many overlap cheaply; but when they are busy with the CPU (a fast model, a burst of short
turns, the offline planner), every turn's step that is ready runs before the loop looks at its
sockets again, and ``/healthz`` and every other request wait that long. The worker reads
:class:`LoopLag` and takes no new job while the loop is behind (it always keeps one running), so
the number of turns running at once follows what the CPU sustains instead of a fixed 32.

The lag is how late a timer fires: one is set every ``interval`` seconds, and the difference
between when it was due and when it ran is the time the loop spent on other work.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class LoopLag:
    """The loop's most recent lag, from a timer every ``interval`` seconds while started."""

    def __init__(self, *, interval: float = 0.01) -> None:
        if interval <= 0:
            raise ValueError("the lag timer's interval must be positive")
        self.interval = interval
        #: Seconds the last timer fired late (0 before the first).
        self.last = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def running(self) -> bool:
        return self._handle is not None

    def start(self) -> None:
        """Start timing this loop (idempotent); :meth:`stop` ends it."""
        if self._handle is None:
            self._arm(asyncio.get_running_loop())

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        self._due = loop.time() + self.interval
        self._handle = loop.call_at(self._due, self._fired, loop)

    def _fired(self, loop: asyncio.AbstractEventLoop) -> None:
        self.last = max(0.0, loop.time() - self._due)
        self._arm(loop)
        self._release()

    def behind(self, limit: float) -> bool:
        """Whether the loop is more than ``limit`` seconds behind: the last timer fired that late,
        or the one due now is already that late."""
        if self._handle is None:
            return False
        late_now = asyncio.get_running_loop().time() - self._due
        return self.last > limit or late_now > limit

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._release()

    def _release(self) -> None:
        """Wake every :meth:`tick` waiting."""
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def tick(self) -> None:
        """Until the next timer has fired (what was ready before it has run)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter

    @contextlib.contextmanager
    def timing(self) -> Iterator[LoopLag]:
        """Timing for as long as the block lasts."""
        self.start()
        try:
            yield self
        finally:
            self.stop()


__all__ = ["LoopLag"]
