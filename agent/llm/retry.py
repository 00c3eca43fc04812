"""How the provider adapters send: retries with backoff, and the outbound tripwire.

Shared by :mod:`agent.llm.anthropic` and :mod:`agent.llm.openai_compat`. An
adapter turns one HTTP attempt into either a result, a :class:`Retryable`
(429, 529, 5xx, connection trouble) or a final :class:`ModelUnavailable`
(a 4xx is our bug and is never retried); :func:`send_with_retries` does the rest.
"""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

from agent.errors import ModelUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How often and how patiently to retry one model call."""

    max_retries: int = 4
    backoff_base_s: float = 0.5
    backoff_max_s: float = 20.0

    def delay(self, retry: int, retry_after_s: float | None, rand: Callable[[], float]) -> float:
        """Seconds to wait before retry number ``retry`` (0-based).

        The server's ``retry-after`` wins when it gave one; otherwise exponential
        backoff with jitter in [50%, 100%] of the step. Both are capped at
        ``backoff_max_s``.
        """
        if retry_after_s is not None:
            return max(0.0, min(retry_after_s, self.backoff_max_s))
        step = min(self.backoff_base_s * (2**retry), self.backoff_max_s)
        return step * (0.5 + rand() / 2)


class Retryable(Exception):
    """One attempt failed in a way that a later attempt may not (raised inside an attempt)."""

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
        request_id: str | None = None,
    ):
        super().__init__(detail)
        self.detail = detail
        self.status = status
        self.retry_after_s = retry_after_s
        self.request_id = request_id


def is_retryable_status(status: int) -> bool:
    """429 (rate limited), 529 (overloaded) and every 5xx."""
    return status == 429 or status >= 500


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms``, then ``retry-after``
    as seconds or as an HTTP date; None when absent or unreadable."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return float(millis) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return email.utils.mktime_tz(parsed) - (time.time() if now is None else now)


async def send_with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    what: str,
    sleep: Sleep = asyncio.sleep,
    rand: Callable[[], float] = random.random,
) -> T:
    """Run ``attempt`` until it returns, retrying :class:`Retryable` failures.

    Raises :class:`ModelUnavailable` (reason ``unavailable``) once
    ``policy.max_retries`` retries are spent; any other exception passes through.
    """
    retry = 0
    while True:
        try:
            return await attempt()
        except Retryable as exc:
            if retry >= policy.max_retries:
                raise ModelUnavailable(
                    f"{what}: gave up after {retry + 1} attempts: {exc.detail}",
                    reason="unavailable",
                    request_id=exc.request_id,
                ) from exc
            delay = policy.delay(retry, exc.retry_after_s, rand)
            log.warning(
                "%s: attempt %d failed (%s); retrying in %.3fs",
                what,
                retry + 1,
                exc.detail,
                delay,
                extra={"status": exc.status, "request_id": exc.request_id},
            )
            await sleep(delay)
            retry += 1


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
