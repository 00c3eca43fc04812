"""Wake-ups between processes on SQLite, which has no ``NOTIFY``: a cheap read, often.

On PostgreSQL another process's job or widget event wakes the worker and the streams at once
(:mod:`storage.notify`). On SQLite a separate ``signoff worker`` (or ``serve --no-worker`` beside
it) used to wait for the other side's poll: the worker's claim every 0.5 s, the widget's store
poll every 1 s. While something listens, a probe now asks the database a one-row question every
:data:`EVERY_S` (every :data:`IDLE_S` after :data:`QUIET_S` of finding nothing) and wakes the
listener when the answer says there is something to do:

* the worker: "is a job of my kinds due?" (the claim's own condition, through ``ix_jobs_claim``),
  so it claims only when the claim will find something, whoever queued it; its own jobs, claimed
  at once through the in-process wake, are no longer due when the probe looks;
* the widget's streams: "which events were stored after the last one I saw?" (by id), each
  named with its session and position, as PostgreSQL's notifications are.

A probe is a read: in WAL it takes no lock and never waits on a writer, and a file database runs
it on the event loop's thread with the stdlib driver (:meth:`storage.db.Database.read`), tens of
microseconds. Like a notification it is a hint, never the record: the polls stay in place, and a
probe that fails is logged and tried again at the next tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator

log = logging.getLogger(__name__)

#: Seconds between two probes while they find something (the longest a wake-up waits then).
EVERY_S = 0.05
#: After :data:`QUIET_S` seconds of probes that found nothing, they come this far apart: a quiet
#: process's probe costs ~5 looks a second, not 20 (on a shared machine a look after a pause
#: takes ~0.5 ms of CPU, its code and data gone cold), and the first wake-up after a quiet
#: spell waits at most this long.
IDLE_S = 0.2
QUIET_S = 5.0

#: One probe: looks once, and says whether it found something to wake its listener for.
Look = Callable[[], Awaitable[bool]]


@contextlib.contextmanager
def probing(
    look: Look, *, every_s: float = EVERY_S, idle_s: float = IDLE_S, quiet_s: float = QUIET_S
) -> Iterator[None]:
    """While the block lasts, ``await look()`` every ``every_s`` seconds in a task of its own,
    every ``idle_s`` once ``quiet_s`` seconds of looks have found nothing."""
    if not 0 < every_s <= idle_s or quiet_s < 0:
        raise ValueError("a probe's intervals must be positive, the idle one no shorter")
    task = asyncio.get_running_loop().create_task(_forever(look, every_s, idle_s, quiet_s), name="signoff-probe")
    try:
        yield
    finally:
        task.cancel()


async def _forever(look: Look, every_s: float, idle_s: float, quiet_s: float) -> None:
    failing, quiet = False, 0.0
    while True:  # the first look at once (a probe may note where it starts), then apart
        found = False
        try:
            found = await look()
        except Exception as exc:  # the database away for a moment: the next tick tries again
            if not failing:
                log.warning("probe: the database did not answer (%s); trying again", type(exc).__name__)
            failing = True
        else:
            failing = False
        quiet = 0.0 if found else quiet + (every_s if quiet < quiet_s else idle_s)
        await asyncio.sleep(every_s if quiet < quiet_s else idle_s)


__all__ = ["EVERY_S", "IDLE_S", "QUIET_S", "Look", "probing"]
