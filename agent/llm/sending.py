"""What the provider adapters share around their vendor SDK: the outbound tripwire, one
deadline per call, and the honest give-up.

The official SDKs (``anthropic``, ``openai``) retry by themselves: 408, 409, 429 and
every 5xx (Anthropic's 529 included) and connection errors, ``max_retries`` times,
waiting what ``retry-after-ms``/``retry-after`` ask or backing off exponentially with
jitter. What no SDK does is kept here:

* a deadline over the whole call, retries and their waits included, so that a provider
  asking for a long wait never keeps a customer's turn (and its conversation lock)
  hanging past ``deadline_s``;
* one :class:`ModelUnavailable` when the SDK has given up, saying how many attempts
  were made (the SDKs send ``x-stainless-retry-count`` with every attempt);
* the breaker predicate, and the tripwire that refuses non-loopback hosts in tests.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Awaitable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit

from agent.errors import ModelUnavailable

T = TypeVar("T")

#: Statuses the SDKs retry on their own; after their last retry we report the provider down.
_TRANSIENT = frozenset({408, 409, 429})


def is_transient(status: int) -> bool:
    """408, 409, 429 and every 5xx: worth another attempt, so the SDK made them."""
    return status in _TRANSIENT or status >= 500


def attempts_made(request: Any) -> int | None:
    """How many HTTP attempts the SDK made, read off the last one's ``x-stainless-retry-count``."""
    headers: Mapping[str, str] | None = getattr(request, "headers", None)
    raw = headers.get("x-stainless-retry-count") if headers is not None else None
    try:
        return int(raw) + 1 if raw is not None else None
    except ValueError:
        return None


def gave_up(provider: str, detail: str, *, attempts: int | None, request_id: str | None = None) -> ModelUnavailable:
    """The SDK spent its retries (or the deadline ran out): reason ``unavailable``."""
    tried = f"after {attempts} attempt{'s' if attempts != 1 else ''}" if attempts else "after retrying"
    return ModelUnavailable(f"{provider}: gave up {tried}: {detail}", reason="unavailable", request_id=request_id)


def rejected(
    provider: str,
    status: int,
    request_id: str | None,
    detail: str,
    metadata: Mapping[str, str],
    *,
    logger: logging.Logger,
) -> ModelUnavailable:
    """A non-transient 4xx is our bug: logged at ERROR (on the adapter's ``logger``) with the
    request id, never retried."""
    logger.error(
        "%s rejected the request: HTTP %s, request id %s: %s",
        provider,
        status,
        request_id,
        detail[:500],
        extra={"status": status, "request_id": request_id, "metadata": dict(metadata)},
    )
    return ModelUnavailable(
        f"{provider} rejected the request (HTTP {status}, request id {request_id})",
        reason="bad_request",
        request_id=request_id,
    )


async def within_deadline(call: Awaitable[T], *, deadline_s: float, provider: str) -> T:
    """Await ``call`` (the SDK's whole retrying call); past ``deadline_s`` give up honestly."""
    scope = asyncio.timeout(deadline_s)
    try:
        async with scope:
            return await call
    except TimeoutError:
        if not scope.expired():
            raise
        raise gave_up(provider, f"no answer within the {deadline_s:g} s deadline", attempts=None) from None


def counts_against_provider(exc: BaseException) -> bool:
    """Breaker predicate: a rejected request (our bug) proves the provider is up."""
    return not (isinstance(exc, ModelUnavailable) and exc.reason == "bad_request")


# --- outbound tripwire ------------------------------------------------------


class RealModelCallBlocked(RuntimeError):
    """A model client tried to reach a non-loopback host while real calls are blocked.

    Deliberately not a :class:`ModelUnavailable`: the loop must not turn it into
    a polite escalation that lets a test pass.
    """


class _Outbound:
    # Process-wide on purpose: a client driven from a worker thread or a fresh
    # event loop must trip it too, which a ContextVar would not guarantee.
    loopback_only = False


def is_loopback_url(url: str) -> bool:
    """True when ``url`` points at 127.0.0.0/8, ::1 or localhost."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_outbound(base_url: str, *, client: str) -> None:
    """Raise :class:`RealModelCallBlocked` if blocking is on and ``base_url`` is not loopback."""
    if _Outbound.loopback_only and not is_loopback_url(base_url):
        raise RealModelCallBlocked(
            f"{client} refused to call {base_url}: real model calls are blocked in tests "
            "(point it at a local fake, or mark the test allow_model_requests)"
        )


@contextmanager
def outbound_loopback_only(enabled: bool) -> Iterator[None]:
    """Within the block, model clients may (``False``) or may not (``True``) leave loopback."""
    previous = _Outbound.loopback_only
    _Outbound.loopback_only = enabled
    try:
        yield
    finally:
        _Outbound.loopback_only = previous
