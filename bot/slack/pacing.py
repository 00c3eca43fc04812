"""Per-channel pacing: Slack takes about one message a second per channel.

Each channel gets a FIFO lane drained by its own background task, so a busy
channel waits its turn while every other channel proceeds — there is no global
lock. Lanes end when they run dry; the task set is owned here, failures are
logged, and :meth:`ChannelPacer.aclose` drains or cancels what is left.
The clock and the sleep are injectable so tests never wait for real.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class PacerClosed(RuntimeError):
    """The pacer is shutting down and takes no more work."""


@dataclass
class _Lane:
    jobs: deque[tuple[Callable[[], Awaitable[Any]], asyncio.Future[Any]]] = field(default_factory=deque)


class ChannelPacer:
    """Runs calls for a channel one at a time, at least ``interval_s`` apart (start to start)."""

    def __init__(self, *, interval_s: float = 1.0, clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._sleep = sleep
        self._lanes: dict[str, _Lane] = {}
        self._last: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    async def run(self, channel: str, call: Callable[[], Awaitable[T]]) -> T:
        """Queue ``call`` on ``channel``'s lane and return its result (or raise its error)."""
        if self._closed:
            raise PacerClosed("the sender is closed")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        lane = self._lanes.get(channel)
        if lane is None:
            lane = self._lanes[channel] = _Lane()
            task = asyncio.create_task(self._drain(channel, lane), name=f"slack-pacer:{channel}")
            self._tasks.add(task)
            task.add_done_callback(self._finished)
        lane.jobs.append((call, future))
        return await future

    def busy(self) -> bool:
        """Whether any lane still has work (queued or running)."""
        return bool(self._lanes)

    async def aclose(self, *, drain_s: float = 5.0) -> None:
        """Stop taking work, give queued calls ``drain_s`` to finish, then cancel the rest."""
        self._closed = True
        pending = set(self._tasks)
        if pending:
            _, still = await asyncio.wait(pending, timeout=drain_s)
            for task in still:
                task.cancel()
            if still:
                await asyncio.gather(*still, return_exceptions=True)
        self._lanes.clear()

    async def _drain(self, channel: str, lane: _Lane) -> None:
        try:
            while lane.jobs:
                call, future = lane.jobs[0]
                if not future.done():  # else the caller gave up waiting
                    wait = self._last.get(channel, float("-inf")) + self.interval_s - self._clock()
                    if wait > 0:
                        await self._sleep(wait)
                    self._last[channel] = self._clock()
                    await _settle(future, call)
                lane.jobs.popleft()
        finally:
            # Only a cancelled lane leaves jobs behind: their callers must not wait forever.
            for _, future in lane.jobs:
                if not future.done():
                    future.set_exception(PacerClosed("the sender closed before this was sent"))
            lane.jobs.clear()
            if self._lanes.get(channel) is lane:
                del self._lanes[channel]
            self._forget_idle()

    def _forget_idle(self) -> None:
        if len(self._last) > 1024:
            cutoff = self._clock() - self.interval_s
            self._last = {c: t for c, t in self._last.items() if t > cutoff or c in self._lanes}

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("slack pacer lane failed", exc_info=task.exception())


async def _settle(future: asyncio.Future[Any], call: Callable[[], Awaitable[Any]]) -> None:
    """Run ``call`` and hand its outcome to ``future`` (the waiting caller)."""
    try:
        result = await call()
    except asyncio.CancelledError:
        if not future.done():
            future.set_exception(PacerClosed("cancelled while sending"))
        raise
    except Exception as exc:  # the caller re-raises it; the lane carries on
        if not future.done():
            future.set_exception(exc)
    else:
        if not future.done():
            future.set_result(result)
