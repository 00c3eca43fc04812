"""Strict local fakes of the APIs we call. Each binds 127.0.0.1 port 0, records
every request, and signals arrivals with events, never sleeps."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Self, TypeAlias

from aiohttp import web

#: A responder's answer: a (partial) success body, or ``(status, headers, body)``.
Reply: TypeAlias = dict[str, Any] | tuple[int, dict[str, str], Any]
Responder: TypeAlias = Callable[[dict[str, Any]], Reply | Awaitable[Reply]]


@dataclass(frozen=True, kw_only=True)
class RecordedRequest:
    """One request as the fake received it, and what it answered."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any
    status: int
    #: Anthropic fake only: sha256 of the canonical cached prefix (None without cache_control).
    prefix_hash: str | None = None


def scripted(*replies: Reply | Responder) -> Responder:
    """A responder that answers with ``replies`` in order (a callable entry is called with
    the body); once they are used up it answers 400 ``fake script exhausted``."""
    queue = list(replies)

    async def respond(body: dict[str, Any]) -> Reply:
        if not queue:
            return (
                400,
                {},
                {"error": {"type": "invalid_request_error", "message": "fake script exhausted"}},
            )
        reply = queue.pop(0)
        return await call_responder(reply, body) if callable(reply) else reply

    return respond


async def call_responder(responder: Responder, body: dict[str, Any]) -> Reply:
    """Call a sync or async responder."""
    reply = responder(body)
    if inspect.isawaitable(reply):
        reply = await reply
    return reply


class FakeServer:
    """Base of the fakes: an aiohttp app on 127.0.0.1:0 used as an async context manager."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.base_url = ""
        self._runner: web.AppRunner | None = None
        self._arrived = asyncio.Event()

    def routes(self) -> list[web.RouteDef]:
        """The fake's routes (subclasses)."""
        raise NotImplementedError

    def url_prefix(self) -> str:
        """What follows ``http://127.0.0.1:port`` in :attr:`base_url`."""
        return ""

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.add_routes(self.routes())
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}{self.url_prefix()}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def record(self, request: RecordedRequest) -> None:
        """Store a request and wake anyone waiting in :meth:`wait_for_requests`."""
        self.requests.append(request)
        self._arrived.set()

    async def wait_for_requests(self, count: int, within_s: float = 5.0) -> list[RecordedRequest]:
        """Wait until at least ``count`` requests arrived (event-driven)."""
        async with asyncio.timeout(within_s):
            while len(self.requests) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.requests


def json_response(status: int, body: Any, headers: dict[str, str]) -> web.Response:
    """A JSON response with the given status and extra headers."""
    return web.json_response(body, status=status, headers=headers)
