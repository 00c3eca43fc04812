"""A local HTTP server that records what it received (the simulators' base), and a hand-moved clock."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Self

from aiohttp import web


@dataclass(frozen=True, kw_only=True)
class RecordedRequest:
    """One request as the server received it, and what it answered."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int


class LocalServer:
    """An aiohttp app on 127.0.0.1, port 0, used as an async context manager; it records every
    request and wakes :meth:`wait_for_requests` (the tests' fakes are built on it too)."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.base_url = ""
        self._runner: web.AppRunner | None = None
        self._arrived = asyncio.Event()

    def routes(self) -> list[web.RouteDef]:
        """The server's routes (each subclass gives its own)."""
        raise NotImplementedError

    def url_prefix(self) -> str:
        """The path ``base_url`` ends with."""
        return ""

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.add_routes(self.routes())
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}{self.url_prefix()}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def record(self, request: RecordedRequest) -> None:
        """Keep ``request`` and wake whoever waits for requests."""
        self.requests.append(request)
        self._arrived.set()

    async def wait_for_requests(self, count: int, within_s: float = 5.0) -> list[RecordedRequest]:
        """Wait (on arrivals, never sleeping) until ``count`` requests arrived; all of them."""
        async with asyncio.timeout(within_s):
            while len(self.requests) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.requests


class FakeClock:
    """A monotonic clock tests move by hand, with a matching ``sleep`` that never sleeps.

    ``auto=True``: ``sleep(d)`` just moves the clock on by ``d``. ``auto=False``: a
    sleeper waits until :meth:`advance` passes its deadline, so a test can hold a
    channel's pacing and watch another channel go ahead.
    """

    def __init__(self, start: float = 1_000.0, *, auto: bool = True) -> None:
        self.now = start
        self.auto = auto
        self.slept: list[float] = []
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []
        self._changed = asyncio.Event()

    def __call__(self) -> float:
        """The clock's time now."""
        return self.now

    async def sleep(self, seconds: float) -> None:
        """Record the wait; move on (auto) or wait for :meth:`advance`."""
        self.slept.append(seconds)
        if self.auto or seconds <= 0:
            self.now += max(seconds, 0.0)
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, future))
        self._changed.set()
        await future

    def advance(self, seconds: float) -> None:
        """Move the clock on and wake every sleeper whose deadline has passed."""
        self.now += seconds
        due = [(t, f) for t, f in self._sleepers if t <= self.now]
        self._sleepers = [(t, f) for t, f in self._sleepers if t > self.now]
        for _, future in due:
            if not future.done():
                future.set_result(None)

    async def wait_for_sleepers(self, count: int = 1, within_s: float = 5.0) -> None:
        """Wait (on events) until ``count`` sleepers are waiting."""
        async with asyncio.timeout(within_s):
            while len(self._sleepers) < count:
                self._changed.clear()
                await self._changed.wait()
