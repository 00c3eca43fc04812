"""What every HTTP face shares: bounded bodies, strict JSON, schema validation, JSON errors.

Every refusal is ``{"error": CODE, "message": TEXT}`` with the status its code maps to
(:data:`STATUS`); a client mistake is never a 5xx. Faces raise :class:`ApiError`, the
runtime's refusals are :class:`~agent.errors.DecisionError`; :func:`errors` renders both.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from agent.boundary import unavailable
from agent.errors import Busy, DecisionError, ModelUnavailable, Unavailable
from bot.api import wording as say

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: HTTP status for each error code the API can answer with.
STATUS: dict[str, int] = {
    "bad_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "own_request": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "conflict": 409,
    "expired": 410,
    "too_large": 413,
    "unsupported_media_type": 415,
    "invalid": 422,
    "rate_limited": 429,
    "internal": 500,
    "unavailable": 503,
}


class ApiError(Exception):
    """A refusal the client caused; rendered as ``{"error": code, "message": message}``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code if code in STATUS else "bad_request"
        self.message = message

    @property
    def status(self) -> int:
        return STATUS[self.code]


class InboxFull(Exception):
    """The inbound queue is at its cap (policy ``inbound.max_queued_jobs``): nothing was stored.
    HTTP faces answer 503 with ``Retry-After`` (:func:`busy_response`) so the sender retries."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"inbound queue full; retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


def busy_response(exc: InboxFull) -> web.Response:
    """503, ``Retry-After`` and the JSON error of a full inbound queue."""
    body = {"error": "unavailable", "message": say.INBOX_FULL.format(seconds=exc.retry_after_s)}
    return web.json_response(body, status=503, headers={"Retry-After": str(exc.retry_after_s)})


async def read_limited(request: web.Request, limit: int) -> bytes:
    """The raw body, refusing (413) as soon as it exceeds ``limit`` bytes."""
    if request.content_length is not None and request.content_length > limit:
        raise ApiError("too_large", say.BODY_TOO_LARGE.format(limit=limit))
    chunks: list[bytes] = []
    total = 0
    while chunk := await request.content.read(65536):
        total += len(chunk)
        if total > limit:
            raise ApiError("too_large", say.BODY_TOO_LARGE.format(limit=limit))
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(raw: bytes) -> Any:
    """Strict JSON: UTF-8 only, no NaN/Infinity, bounded nesting; 400 otherwise."""

    def _no_constants(name: str) -> Any:
        raise ValueError(name)

    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constants)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ApiError("bad_request", say.MALFORMED_JSON) from None


def validate(validator: Draft202012Validator, data: Any) -> None:
    """422 with a short message naming the field; never echoes the (possibly huge) value."""
    if not isinstance(data, dict):
        raise ApiError("invalid", say.NOT_AN_OBJECT)
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.path), str(e.validator)))
    if errors:
        raise ApiError("invalid", _describe(errors[0]))


def _describe(e: ValidationError) -> str:
    where = ".".join(str(p) for p in e.absolute_path) or "body"
    match e.validator:
        case "required":
            missing = [f for f in e.validator_value if f not in (e.instance or {})]
            return f"missing field: {', '.join(missing)[:80]}"
        case "additionalProperties":
            allowed = set(e.schema.get("properties") or {})
            extra = sorted(str(k)[:40] for k in (e.instance or {}) if k not in allowed)
            return f"unknown field: {', '.join(extra[:5])}"
        case "type":
            return f"{where}: must be of type {e.validator_value}"
        case "maxLength" | "minLength":
            return (
                f"{where}: length must be {'at most' if e.validator == 'maxLength' else 'at least'} "
                f"{e.validator_value} characters"
            )
        case "minimum" | "maximum":
            return f"{where}: out of range"
        case "enum":
            return f"{where}: must be one of {', '.join(map(str, e.validator_value))}"
        case _:
            return f"{where}: not a valid value"


def json_ok(data: Any) -> web.Response:
    """A 200 JSON response (non-ASCII kept, anything else rendered with ``str``)."""
    return web.json_response(data, dumps=dumps)


def dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, default=str)


def error_response(code: str, message: str) -> web.Response:
    """The JSON body and status of one refusal."""
    return web.json_response({"error": code, "message": message}, status=STATUS.get(code, 400))


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid",
    429: "rate_limited",
}


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map every refusal to ``{"error", "message"}``; only our own faults are 5xx."""
    try:
        response = await handler(request)
    except ApiError as exc:
        response = error_response(exc.code, exc.message)
    except DecisionError as exc:
        response = error_response(exc.code if exc.code in STATUS else "invalid", str(exc))
    except Busy:
        response = error_response("conflict", say.BUSY)
    except InboxFull as exc:
        response = busy_response(exc)
    except ModelUnavailable:
        response = error_response("unavailable", say.MODEL_UNAVAILABLE)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, "bad_request" if exc.status < 500 else "internal")
        message = (
            say.METHOD_NOT_ALLOWED.format(method=request.method)
            if exc.status == 405
            else (say.NO_SUCH_ROUTE if exc.status == 404 else exc.reason)
        )
        response = web.json_response({"error": code, "message": message}, status=exc.status)
    except (asyncio.CancelledError, KeyboardInterrupt):
        raise
    except Exception as exc:
        if unavailable(exc):
            response = unavailable_response(request, exc)
        else:
            log.exception("unhandled error in %s %s", request.method, request.path)
            response = error_response("internal", say.INTERNAL)
    if request.path.startswith(("/api/", "/email/")):
        response.headers.setdefault("Cache-Control", "no-store")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response


#: Where the server puts its database's fault counter (``Database.fault``), when it has one.
FAULTS: web.AppKey[Callable[[BaseException], object]] = web.AppKey("signoff_faults", object)  # type: ignore[arg-type]


def unavailable_response(request: web.Request, exc: BaseException) -> web.Response:
    """A database outage on any face's inbound: 503 with ``Retry-After`` (the request changed
    nothing that a retry would not find; see ``agent.boundary.unavailable``)."""
    count = request.app.get(FAULTS)
    if count is not None:
        count(exc.__cause__ if isinstance(exc, Unavailable) and exc.__cause__ else exc)
    log.warning("database unavailable in %s %s: %s", request.method, request.path, type(exc).__name__)
    response = error_response("unavailable", say.DATABASE_UNAVAILABLE)
    response.headers["Retry-After"] = str(exc.retry_after_s if isinstance(exc, Unavailable) else 2)
    return response


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON values (what a client will read back)."""
    return json.loads(dumps(value)) if value is not None else None
