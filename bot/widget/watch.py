"""What wakes an open widget stream: this process's writes at once; other processes' writes at
once on PostgreSQL (``NOTIFY``, :mod:`storage.notify`) and within a probe's tick on SQLite
(:mod:`storage.probe`, 50 ms), and within a poll interval anyway — one query for all of the
process's streams, not one per stream.

A write in this process wakes its session's streams through :data:`events.HUB` (``emit``).
Another process's writes (a second replica, the worker on its own) are found by the face's one
:class:`Watch`: every ``interval`` it asks the store once for the largest ``seq`` of each session
that has an open stream here (``WidgetStore.latest``, in chunks of :data:`CHUNK` sessions), and
wakes through the hub the sessions where a stream has seen less. A stream reads its store only
when woken (and, as a net under all this, after a long quiet: ``WidgetConfig.reread_s``). The
poller starts with the first stream that listens and ends at its first tick after the last one
has gone (or when the face closes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

from bot.widget.events import HUB
from storage.widget import WidgetStore

log = logging.getLogger(__name__)

#: Sessions asked about in one query.
CHUNK = 500


@dataclass(eq=False)
class Ear:
    """One open stream: the hub's wake-up, and the last ``seq`` it has read past (``None``: it has
    not read yet, and will)."""

    session_id: str
    woken: asyncio.Event
    seen: int | None = None


class Watch:
    """The poller of one process's open widget streams (owned by the face)."""

    def __init__(self, store: WidgetStore, *, interval: float, chunk: int = CHUNK) -> None:
        if interval <= 0 or chunk <= 0:
            raise ValueError("the widget's poll interval and chunk must be positive")
        self._store = store
        self._interval = interval
        self._chunk = chunk
        self._ears: dict[str, set[Ear]] = {}
        self._task: asyncio.Task[None] | None = None
        self._soon = asyncio.Event()  # poll before the interval is out

    @property
    def running(self) -> bool:
        """Whether the poller is running (there is, or was a moment ago, an open stream)."""
        return self._task is not None

    @contextlib.contextmanager
    def listen(self, session_id: str) -> Iterator[Ear]:
        """An open stream of ``session_id`` for as long as the block lasts."""
        with HUB.listen(session_id) as woken:
            ear = Ear(session_id, woken)
            self._ears.setdefault(session_id, set()).add(ear)
            if self._task is None:
                self._task = asyncio.get_running_loop().create_task(self._run(), name="widget-watch")
            try:
                yield ear
            finally:
                ears = self._ears.get(session_id)
                if ears is not None:
                    ears.discard(ear)
                    if not ears:
                        del self._ears[session_id]

    async def poll(self) -> list[str]:
        """One look at the store; wakes (and returns) the sessions where an open stream is behind."""
        ids = list(self._ears)
        behind: list[str] = []
        for i in range(0, len(ids), self._chunk):
            latest = await self._store.latest(ids[i : i + self._chunk])
            # Compared with what the streams have seen now, after the query: a stream that read
            # past ``top`` meanwhile is not woken; one mid-read is woken and simply reads again.
            for session_id, top in latest.items():
                if self._wake_behind(session_id, top):
                    behind.append(session_id)
        return behind

    def _wake_behind(self, session_id: str, top: int) -> bool:
        """Wake ``session_id``'s streams if one has read less than ``top``."""
        if any(e.seen is not None and top > e.seen for e in self._ears.get(session_id, ())):
            HUB.wake(session_id)
            return True
        return False

    def _heard(self, session_id: str | None, seq: int) -> None:
        """Some process stored event ``seq`` of ``session_id``; ``None``: some may have been
        missed (the listener reconnected, or a burst), so the store is polled now."""
        if session_id is None:
            self._soon.set()
        else:
            self._wake_behind(session_id, seq)

    async def _run(self) -> None:
        try:
            with self._store.hearing(self._heard):
                while self._ears:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._soon.wait(), timeout=self._interval)
                    self._soon.clear()
                    try:
                        await self.poll()
                    except Exception:  # the database away for a moment: the next tick tries again
                        log.warning("widget.watch: polling the store failed", exc_info=True)
        finally:
            self._task = None

    async def close(self) -> None:
        """Stop the poller (the face closing); streams still open stop being polled."""
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


__all__ = ["CHUNK", "Ear", "Watch"]
