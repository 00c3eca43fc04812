"""A strict fake Bot Connector (the Teams channel service) and a local token issuer.

:class:`FakeBotConnector` serves the v3 conversation REST surface on 127.0.0.1:0,
records every call (path, lower-cased headers incl. the bearer token, body),
assigns activity ids, keeps what a person would see in each conversation after
updates and deletes, injects failures (429 with Retry-After, 5xx) and signals
arrivals with events. It refuses what the real service refuses: no bearer
token, a body that is not a message, a conversation id in the body that is not
the one in the path, an unknown conversation, an update or delete of an activity
that does not exist, an Adaptive Card attachment that is not a card.

:class:`TokenIssuer` is an RS256 key pair whose JWKS is served on 127.0.0.1, and
mints Bot Framework-style inbound tokens (issuer, audience = our app id,
``serviceurl``, optional ``tid``, ``exp``) so tests exercise real signature checks.
The Agents SDK's validator fetches the JWKS URL directly (no OpenID document).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from tests.fakes import FakeServer, RecordedRequest

BOT_FRAMEWORK_ISSUER = "https://api.botframework.com"
ADAPTIVE = "application/vnd.microsoft.card.adaptive"
SENDABLE_TYPES = {"message", "typing"}


@dataclass
class Visible:
    """One activity as a person sees it now."""

    id: str
    text: str | None
    attachments: list[dict[str, Any]]
    reply_to_id: str | None
    updates: int = 0
    deleted: bool = False

    @property
    def card(self) -> dict[str, Any] | None:
        """The first Adaptive Card attachment's content."""
        for a in self.attachments:
            if a.get("contentType") == ADAPTIVE:
                return a.get("content")
        return None


@dataclass
class _Failure:
    status: int
    retry_after: str | None
    method: str | None
    remaining: int


@dataclass
class Conversation:
    id: str
    activities: list[Visible] = field(default_factory=list)
    #: What ``GET …/members`` answers (Teams channel accounts: ``userRole``, ``tenantId``).
    members: list[dict[str, Any]] = field(default_factory=list)

    def find(self, activity_id: str) -> Visible | None:
        return next((a for a in self.activities if a.id == activity_id and not a.deleted), None)


class Invalid(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class FakeBotConnector(FakeServer):
    """The channel service a bot sends to; :attr:`base_url` is the ``serviceUrl`` (ends in ``/``)."""

    def __init__(self, *, accept_token: Callable[[str], bool] | None = None) -> None:
        super().__init__()
        self.conversations: dict[str, Conversation] = {}
        self._ids = itertools.count(1)
        self._failures: list[_Failure] = []
        self._accept_token = accept_token or (lambda token: bool(token))

    def url_prefix(self) -> str:
        return "/"

    def routes(self) -> list[web.RouteDef]:
        base = "/v3/conversations"
        return [
            web.post(base, self._handle),
            web.get(base + "/{cid}/members", self._handle),
            web.post(base + "/{cid}/activities", self._handle),
            web.post(base + "/{cid}/activities/{aid}", self._handle),
            web.put(base + "/{cid}/activities/{aid}", self._handle),
            web.delete(base + "/{cid}/activities/{aid}", self._handle),
        ]

    # -- test controls ---------------------------------------------------------------
    def open_conversation(self, conversation_id: str) -> Conversation:
        """A conversation a person started (so the bot may post into it)."""
        return self.conversations.setdefault(conversation_id, Conversation(conversation_id))

    def fail_next(
        self, count: int = 1, *, status: int = 429, retry_after: str | None = "1", method: str | None = None
    ) -> None:
        """Answer the next ``count`` matching calls with ``status`` (and Retry-After)."""
        self._failures.append(_Failure(status, retry_after, method, count))

    def visible(self, conversation_id: str) -> list[Visible]:
        """What a person sees in the conversation now (deleted activities are gone)."""
        conv = self.conversations.get(conversation_id)
        return [a for a in conv.activities if not a.deleted] if conv else []

    def calls(self, method: str | None = None) -> list[RecordedRequest]:
        return [r for r in self.requests if method is None or r.method == method]

    async def wait_for(
        self, predicate: Callable[[list[RecordedRequest]], bool], within_s: float = 5.0
    ) -> list[RecordedRequest]:
        """Wait (event-driven) until ``predicate(self.requests)`` holds."""
        async with asyncio.timeout(within_s):
            while not predicate(self.requests):
                self._arrived.clear()
                await self._arrived.wait()
        return self.requests

    # -- the service -----------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        status, reply_headers, reply = self._answer(request, headers, body)
        self.record(
            RecordedRequest(method=request.method, path=request.path, headers=headers, body=body, status=status)
        )
        return web.json_response(reply, status=status, headers=reply_headers)

    def _answer(self, request: web.Request, headers: dict[str, str], body: Any) -> tuple[int, dict[str, str], Any]:
        failure = self._take_failure(request.method)
        if failure is not None:
            extra = {"Retry-After": failure.retry_after} if failure.retry_after is not None else {}
            return (
                failure.status,
                extra,
                _error("Throttled" if failure.status == 429 else "ServiceError", f"injected {failure.status}"),
            )
        try:
            self._authorize(headers)
            return self._dispatch(request, body)
        except Invalid as bad:
            return bad.status, {}, _error(bad.code, bad.message)

    def _take_failure(self, method: str) -> _Failure | None:
        for f in self._failures:
            if f.remaining > 0 and (f.method is None or f.method == method):
                f.remaining -= 1
                return f
        return None

    def _authorize(self, headers: dict[str, str]) -> None:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme != "Bearer" or not self._accept_token(token):
            raise Invalid(401, "Unauthorized", "bearer token missing or not accepted")

    def _dispatch(self, request: web.Request, body: Any) -> tuple[int, dict[str, str], Any]:
        cid, aid = request.match_info.get("cid"), request.match_info.get("aid")
        if cid is None:
            return self._create(body)
        conv = self.conversations.get(cid)
        if conv is None:
            raise Invalid(404, "ConversationNotFound", f"no conversation {cid}")
        if request.method == "GET":  # the members
            return 200, {}, conv.members
        if request.method == "DELETE":
            target = self._existing(conv, aid)
            target.deleted = True
            return 200, {}, {}
        _check_activity(body, cid)
        if request.method == "PUT":
            target = self._existing(conv, aid)
            target.text, target.attachments = body.get("text"), list(body.get("attachments") or [])
            target.updates += 1
            return 200, {}, {"id": target.id}
        new = Visible(
            id=self._new_id(),
            text=body.get("text"),
            attachments=list(body.get("attachments") or []),
            reply_to_id=aid or body.get("replyToId"),
        )
        conv.activities.append(new)
        return 201, {}, {"id": new.id}

    def _create(self, body: Any) -> tuple[int, dict[str, str], Any]:
        if not isinstance(body, dict) or not body.get("members") or not isinstance(body.get("bot"), dict):
            raise Invalid(400, "BadArgument", "members and bot are required")
        conv = self.open_conversation(f"a:fake-conversation-{next(self._ids)}")
        reply: dict[str, Any] = {"id": conv.id}
        if isinstance(body.get("activity"), dict):
            _check_activity({**body["activity"], "conversation": {"id": conv.id}}, conv.id)
            first = Visible(
                id=self._new_id(),
                text=body["activity"].get("text"),
                attachments=list(body["activity"].get("attachments") or []),
                reply_to_id=None,
            )
            conv.activities.append(first)
            reply["activityId"] = first.id
        return 201, {}, reply

    def _existing(self, conv: Conversation, aid: str | None) -> Visible:
        found = conv.find(aid or "")
        if found is None:
            raise Invalid(404, "ActivityNotFound", f"no activity {aid}")
        return found

    def _new_id(self) -> str:
        return f"{int(time.time() * 1000)}{next(self._ids):04d}"


def _check_activity(body: Any, cid: str) -> None:
    if not isinstance(body, dict) or body.get("type") not in SENDABLE_TYPES:
        raise Invalid(400, "BadArgument", "body must be an activity of type message or typing")
    conv = body.get("conversation")
    if not isinstance(conv, dict) or conv.get("id") != cid:
        raise Invalid(400, "BadArgument", "conversation.id must be the conversation in the path")
    if body["type"] == "message" and not body.get("text") and not body.get("attachments"):
        raise Invalid(400, "BadArgument", "a message needs text or attachments")
    for a in body.get("attachments") or []:
        if not isinstance(a, dict) or not isinstance(a.get("contentType"), str):
            raise Invalid(400, "BadArgument", "attachment without contentType")
        if a["contentType"] == ADAPTIVE:
            card = a.get("content")
            if not isinstance(card, dict) or card.get("type") != "AdaptiveCard" or "version" not in card:
                raise Invalid(400, "BadArgument", "Adaptive Card attachment is not a card")


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def bearer(request: RecordedRequest) -> str | None:
    """The bearer token a recorded call carried."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token if scheme == "Bearer" else None


@functools.cache
def _private_key(name: str) -> rsa.RSAPrivateKey:
    """RSA keys are slow to make; one per role per test process is enough."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class TokenIssuer(FakeServer):
    """An RS256 signer whose JWKS is served at :attr:`jwks_url` (``GET /keys``)."""

    def __init__(self, *, kid: str = "test-key-1") -> None:
        super().__init__()
        self.kid = kid
        self._key = _private_key("signer")
        self._rogue = _private_key("rogue")

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/keys", self._keys)]

    @property
    def jwks_url(self) -> str:
        return f"{self.base_url}/keys"

    async def _keys(self, request: web.Request) -> web.Response:
        jwk = json.loads(RSAAlgorithm.to_jwk(self._key.public_key()))
        jwk.update({"kid": self.kid, "use": "sig", "alg": "RS256"})
        self.record(RecordedRequest(method="GET", path=request.path, headers={}, body=None, status=200))
        return web.json_response({"keys": [jwk]})

    def mint(
        self,
        *,
        audience: str,
        service_url: str | None,
        issuer: str = BOT_FRAMEWORK_ISSUER,
        tid: str | None = None,
        expires_in: float = 3600,
        rogue: bool = False,
        kid: str | None = None,
        algorithm: str = "RS256",
        extra: dict[str, Any] | None = None,
        drop: tuple[str, ...] = (),
    ) -> str:
        """A token as the Bot Framework channel would send it (``rogue``: signed by another key)."""
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": issuer,
            "aud": audience,
            "iat": now - 10,
            "nbf": now - 10,
            "exp": int(now + expires_in),
        }
        if service_url is not None:
            claims["serviceurl"] = service_url
        if tid is not None:
            claims["tid"] = tid
        claims.update(extra or {})
        for name in drop:
            claims.pop(name, None)
        if algorithm == "HS256":
            return jwt.encode(
                claims, "not-a-real-secret-but-long-enough-32b", algorithm="HS256", headers={"kid": kid or self.kid}
            )
        key = self._rogue if rogue else self._key
        return jwt.encode(claims, key, algorithm=algorithm, headers={"kid": kid or self.kid})


class StaticTokenProvider:
    """An outbound token provider for tests (the SDK's ``AccessTokenProviderBase`` shape):
    hands out ``token`` and records what was asked for."""

    def __init__(self, token: str = "fake-outbound-token") -> None:
        self.token = token
        self.asked: list[tuple[str, tuple[str, ...]]] = []
        self.configuration: Any = None

    def __call__(self, configuration: Any) -> StaticTokenProvider:
        """Used as the connection manager's provider factory."""
        self.configuration = configuration
        return self

    async def get_access_token(self, resource_url: str, scopes: list[str], force_refresh: bool = False) -> str:
        self.asked.append((resource_url, tuple(scopes or ())))
        return self.token

    def get_token_credential(self) -> Any:
        raise NotImplementedError("not used by the connector client")


# -- inbound activities as Teams sends them ------------------------------------------
APP_ID = "6a1c2e1e-0f5b-4a53-9a77-1d2b3c4d5e6f"
TENANT_ID = "0b9b8a7c-1111-4222-8333-944455566677"
USER_AAD_ID = "11111111-2222-4333-8444-555555555555"


def message_activity(
    *,
    service_url: str,
    text: str = "where is my order?",
    conversation_type: str = "personal",
    activity_id: str = "1700000000001",
    conversation_id: str | None = None,
    mention_bot: bool = False,
    tenant_id: str = TENANT_ID,
    **extra: Any,
) -> dict[str, Any]:
    """A ``message`` activity; ``channel`` ones carry team and channel ids, a mention adds the entity."""
    conv_id = conversation_id or (
        "19:chan@thread.tacv2;messageid=1700000000000" if conversation_type == "channel" else "a:1personal-conversation"
    )
    activity: dict[str, Any] = {
        "type": "message",
        "id": activity_id,
        "channelId": "msteams",
        "serviceUrl": service_url,
        "timestamp": "2026-12-01T10:00:00.000Z",
        "locale": "en-US",
        "from": {"id": "29:1user", "name": "Ann Example", "aadObjectId": USER_AAD_ID},
        "recipient": {"id": f"28:{APP_ID}", "name": "signoff"},
        "conversation": {
            "id": conv_id,
            "conversationType": conversation_type,
            "tenantId": tenant_id,
            **({"isGroup": True} if conversation_type != "personal" else {}),
        },
        "channelData": {"tenant": {"id": tenant_id}},
        "text": text,
        "textFormat": "plain",
    }
    if conversation_type == "channel":
        activity["channelData"].update(
            {"team": {"id": "19:team@thread.tacv2"}, "channel": {"id": "19:chan@thread.tacv2"}}
        )
    if mention_bot:
        activity["text"] = f"<at>signoff</at> {text}"
        activity["entities"] = [
            {"type": "mention", "text": "<at>signoff</at>", "mentioned": {"id": f"28:{APP_ID}", "name": "signoff"}}
        ]
    activity.update(extra)
    return activity


def card_action_activity(
    *,
    service_url: str,
    verb: str = "signoff.confirm",
    data: Any = None,
    card_activity_id: str = "1700000000500",
    **extra: Any,
) -> dict[str, Any]:
    """An ``adaptiveCard/action`` invoke as Teams sends it for an ``Action.Execute`` click."""
    activity = message_activity(service_url=service_url, activity_id="f:invoke-1", **extra)
    activity.pop("text", None)
    activity.pop("textFormat", None)
    activity.update(
        {
            "type": "invoke",
            "name": "adaptiveCard/action",
            "replyToId": card_activity_id,
            "value": {
                "action": {
                    "type": "Action.Execute",
                    "verb": verb,
                    "data": {"id": "cnf_1", "version": 1} if data is None else data,
                },
                "trigger": "manual",
            },
        }
    )
    return activity
