"""Strict local fakes of the APIs we call. Each binds 127.0.0.1 port 0, records
every request, and signals arrivals with events, never sleeps."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from aiohttp import web

from sandbox.slack_web import LocalServer

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
    #: Anthropic fake only: the prefix hash at each cache breakpoint, in prompt order.
    prefix_hashes: tuple[str, ...] = ()


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


class FakeServer(LocalServer):
    """Base of the fakes: an aiohttp app on 127.0.0.1:0 used as an async context manager
    (the product's own local server, which ``signoff demo --slack`` runs its Slack API on).
    Subclasses give :meth:`routes` and, when they need one, :meth:`url_prefix`."""


def json_response(status: int, body: Any, headers: dict[str, str]) -> web.Response:
    """A JSON response with the given status and extra headers."""
    return web.json_response(body, status=status, headers=headers)
