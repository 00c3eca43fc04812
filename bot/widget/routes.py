"""The widget's HTTP surface: its script, and its API on the widget's origin (``/widget/api``)
and behind the Shopify app proxy (the storefront's ``/apps/signoff/*`` forwarded to
``/shopify/proxy/*``: the script at ``…/signoff.js``, the API at ``…/api``, and both again
under ``…/widget/`` for a proxy that forwards the widget's own paths).

Every answer is ``no-store``; cross-site answers carry CORS headers for allowed origins only.
Nothing here decides: messages go to the inbox, clicks to ``FacePort.confirm``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bot.web import ApiError, error_response, parse_json, read_limited
from bot.widget import stream, verify
from bot.widget.sessions import Visitor

if TYPE_CHECKING:
    from bot.widget.face import WidgetFace

MAX_BODY = 16 * 1024
MAX_TEXT = 4000
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PROXY = "/shopify/proxy"
PREFIXES = ("/widget/api", f"{PROXY}/api", f"{PROXY}/widget/api")
SCRIPTS = ("/widget/signoff.js", f"{PROXY}/signoff.js", f"{PROXY}/widget/signoff.js")
#: The widget's own assets: nothing but itself.
ASSET_CSP = "default-src 'none'; frame-ancestors 'none'"
_VERBS = {"confirm": True, "decline": False}


@functools.cache
def script() -> bytes:
    return resources.files("bot.widget").joinpath("static/signoff.js").read_bytes()


async def signoff_js(request: web.Request) -> web.Response:
    return web.Response(
        body=script(),
        content_type="text/javascript",
        charset="utf-8",
        headers={
            "Cache-Control": "public, max-age=300",
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": ASSET_CSP,
            "Cross-Origin-Resource-Policy": "cross-origin",
        },
    )


def _text(body: dict[str, Any], name: str, limit: int) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise ApiError("invalid", f"{name}: a string of 1 to {limit} characters")
    return value


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await read_limited(request, MAX_BODY)
    if not raw.strip():
        return {}
    if request.content_type != "application/json":
        raise ApiError("unsupported_media_type", "send application/json")
    data = parse_json(raw)
    if not isinstance(data, dict):
        raise ApiError("invalid", "body: must be an object")
    return data


class Routes:
    def __init__(self, face: WidgetFace) -> None:
        self.face = face

    def guarded(self, handler: Handler) -> Handler:
        """CORS and ``no-store`` on every answer, refusals included."""

        async def run(request: web.Request) -> web.StreamResponse:
            try:
                response = await handler(request)
            except ApiError as exc:
                response = error_response(exc.code, exc.message)
            if not response.prepared:
                response.headers.setdefault("Cache-Control", "no-store")
                response.headers.setdefault("X-Content-Type-Options", "nosniff")
                self.face.sessions.cors(request, response)
            return response

        return run

    async def preflight(self, request: web.Request) -> web.StreamResponse:
        self.face.sessions.cross_site(request)
        return web.Response(status=204)

    async def open(self, request: web.Request) -> web.StreamResponse:
        await _body(request)
        visitor, secret = await self.face.sessions.open(request)
        # A page-held session's secret is the page's to keep; a cookie's never reaches script.
        held = secret if secret is not None and visitor.page_held else None
        body = {
            "session": held or visitor.session.id,
            "customer": visitor.session.customer_id,
            "via": visitor.session.verified_via,
        }
        response = web.json_response(body)
        self.face.sessions.remember(response, visitor, secret)
        return response

    async def _visitor(self, request: web.Request) -> Visitor:
        return await self.face.sessions.current(request)

    async def message(self, request: web.Request) -> web.StreamResponse:
        visitor = await self._visitor(request)
        body = await _body(request)
        text = _text(body, "text", MAX_TEXT)
        client_id = _text(body, "clientId", 64)
        if not client_id.replace("-", "").isalnum():
            raise ApiError("invalid", "clientId: letters, digits and dashes")
        await self._within_limits(visitor)
        await self.face.accept(visitor, client_id=client_id, text=text.strip(), person=body.get("person") is True)
        return web.json_response({"id": client_id}, status=202)

    async def _within_limits(self, visitor: Visitor) -> None:
        store, limits = self.face.sessions.store, self.face.config.limits
        sid = visitor.session.id
        this_minute, today = await store.counts(sid, "user", limits.minute, limits.day)
        if this_minute >= limits.messages_per_minute:
            raise ApiError("rate_limited", "too many messages; wait a minute")
        if today >= limits.messages_per_day:
            raise ApiError("rate_limited", "too many messages today")

    async def events(self, request: web.Request) -> web.StreamResponse:
        visitor = await self._visitor(request)
        response = web.StreamResponse()
        self.face.sessions.cors(request, response)
        try:
            return await stream.serve(
                request,
                visitor.session.id,
                self.face.sessions.store,
                self.face.config,
                self.face.watch,
                cors=response.headers,
            )
        except (ConnectionResetError, ConnectionError):
            return response

    async def click(self, request: web.Request) -> web.StreamResponse:
        visitor = await self._visitor(request)
        verb = request.match_info.get("verb", "")
        confirmation_id = request.match_info.get("id", "")
        body = await _body(request)
        version = body.get("version")
        if verb not in _VERBS or not isinstance(version, int) or isinstance(version, bool) or len(confirmation_id) > 64:
            raise ApiError("invalid", "version: the card's version")
        outcome = await self.face.answer(visitor, confirmation_id, version=version, accept=_VERBS[verb])
        if "error" in outcome:
            raise ApiError(
                outcome["error"], "no such confirmation" if outcome["error"] == "not_found" else "stale card"
            )
        return web.json_response(outcome)

    async def verify(self, request: web.Request) -> web.StreamResponse:
        """``{"order", "email"}`` verifies by an order; ``{"email"}`` sends a code to the address on
        file; ``{"code"}`` enters it."""
        visitor = await self._visitor(request)
        body = await _body(request)
        port, backend = self.face.port, self.face.backend
        if "code" in body:
            outcome = await verify.enter_code(port, visitor, _text(body, "code", 16))
        elif "order" in body:
            order, email = _text(body, "order", 64), _text(body, "email", 254)
            outcome = await verify.by_order(port, backend, visitor, order, email)
        elif "email" in body:
            outcome = await verify.request_code(
                port, backend, visitor, _text(body, "email", 254), mailer=self.face.mailer
            )
        else:
            raise ApiError("invalid", 'send {"order", "email"}, {"email"} or {"code"}')
        return await self._verified(visitor, outcome)

    async def _verified(self, visitor: Visitor, outcome: str) -> web.StreamResponse:
        if outcome == "verified":
            await self.face.verified(visitor)
        return web.json_response({"outcome": outcome}, status=429 if outcome == "limit" else 200)


def widget_routes(face: WidgetFace) -> list[web.RouteDef]:
    r = Routes(face)
    g = r.guarded
    out = [web.get(path, signoff_js) for path in SCRIPTS]
    for p in PREFIXES:
        out += [
            web.post(f"{p}/session", g(r.open)),
            web.post(f"{p}/messages", g(r.message)),
            web.get(f"{p}/stream", g(r.events), allow_head=False),
            web.post(p + "/confirmations/{id}/{verb}", g(r.click)),
            web.post(f"{p}/verify", g(r.verify)),
            web.options(p + "/{tail:.*}", g(r.preflight)),
        ]
    return out


__all__ = ["ASSET_CSP", "MAX_TEXT", "widget_routes"]
