"""``POST /teams/messages``: authenticate → bounded read → parse → bind → ``accept``.

The route does no work of its own. ``accept(activity, raw, reference)`` is the
runtime's door (the lead implements it with the durable inbound queue: dedupe on
``activity.dedup_key`` and persist before returning). Messages and other
activities are answered 202 once ``accept`` returns; an ``adaptiveCard/action``
invoke is answered with the :class:`InvokeReply` ``accept`` returns, synchronously,
so ``accept`` must decide a click quickly (Teams waits only seconds for it).
Nothing reaches ``accept`` unless the token verified and the activity's
``serviceUrl`` is allowed and is the one the token names.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from aiohttp import web

from bot.teams.auth import AuthFailure, InboundAuthenticator
from bot.teams.inbound import ActivityError, TeamsActivity, TeamsCardAction, TeamsIgnored, parse_activity
from bot.teams.invoke import InvokeReply, bad_request_reply, default_reply
from bot.web import InboxFull, busy_response

log = logging.getLogger(__name__)

PATH = "/teams/messages"
Accept: TypeAlias = Callable[[TeamsActivity, dict[str, Any], dict[str, Any]], Awaitable[InvokeReply | None]]


def teams_routes(
    accept: Accept,
    *,
    auth: InboundAuthenticator,
    path: str = PATH,
    passthrough: tuple[type[Exception], ...] = (),
) -> list[web.RouteDef]:
    """The Teams messaging endpoint as aiohttp routes, for ``app.router.add_routes``."""

    async def messages(request: web.Request) -> web.Response:
        return await handle(request, accept, auth, passthrough)

    return [web.post(path, messages)]


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": code, "message": message}, status=status)


async def handle(
    request: web.Request,
    accept: Accept,
    auth: InboundAuthenticator,
    passthrough: tuple[type[Exception], ...] = (),
) -> web.Response:
    """One inbound request; every refusal is JSON ``{"error", "message"}`` and touches nothing."""
    try:
        caller = await auth.verify(request.headers.get("Authorization"))
    except AuthFailure as failure:
        return _error(401, failure.code, failure.message)
    raw = await _read_json(request, auth.config.max_body_bytes)
    if isinstance(raw, web.Response):
        return raw
    service_url = raw.get("serviceUrl")
    if not isinstance(service_url, str):
        return _error(400, "bad_activity", "invalid activity: serviceUrl is required")
    try:
        auth.check_activity(caller, service_url)
    except AuthFailure as failure:
        return _error(401, failure.code, failure.message)
    try:
        parsed = parse_activity(raw)
    except ActivityError as bad:
        if bad.invoke:
            return web.json_response(bad_request_reply(bad.message).body, status=200)
        return _error(400, "bad_activity", bad.message)
    activity = parsed.activity
    if (activity.place.tenant_id or "").lower() not in auth.config.tenants:
        log.warning("teams activity refused: tenant not allowed")
        return _error(403, "tenant_not_allowed", "This tenant may not use this bot.")
    if isinstance(activity, TeamsIgnored):
        return web.json_response({}, status=200)
    try:
        reply = await accept(activity, raw, parsed.reference)
    except InboxFull as exc:
        return busy_response(exc)
    except passthrough:
        raise  # e.g. a database outage: nothing was taken; the web middleware answers 503
    except Exception:
        log.exception("teams accept failed for %s", activity.dedup_key)
        return _error(500, "internal", "The activity could not be taken; retry later.")
    if isinstance(activity, TeamsCardAction):
        answer = reply or default_reply()
        return web.json_response(answer.body, status=answer.status)
    return web.json_response({}, status=202)


async def _read_json(request: web.Request, limit: int) -> dict[str, Any] | web.Response:
    if request.content_length is not None and request.content_length > limit:
        return _error(413, "too_large", f"The body is over {limit} bytes.")
    body = bytearray()
    while chunk := await request.content.read(min(64 * 1024, limit + 1 - len(body))):
        body += chunk
        if len(body) > limit:
            return _error(413, "too_large", f"The body is over {limit} bytes.")
    try:
        raw = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return _error(400, "bad_json", "The body is not JSON.")
    if not isinstance(raw, dict):
        return _error(400, "bad_activity", "The body must be a JSON object (an activity).")
    return raw
