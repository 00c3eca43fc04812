"""The Admin API client: one POST per operation, its token, its cost bucket, its bound.

``execute(name, variables)`` sends the package's document ``name`` (never a string built
here) to ``{base}/admin/api/{version}/graphql.json`` and returns ``data``. A ``THROTTLED``
answer or a bucket known to be short is waited out with ``asyncio.sleep``; at most
``max_concurrency`` calls to the shop are in flight. A query that meets a 5xx or a dropped
connection is tried again; a mutation is not (its outcome is unknown: the ledger reconciles
it through ``lookup_write``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from graphql import OperationDefinitionNode, OperationType
from pydantic import BaseModel, ValidationError

from shopify import documents
from shopify.auth import AuthFailed, TokenSource
from shopify.config import ShopifyConfig
from shopify.throttle import CostBucket, ThrottleStatus, requested_cost

log = logging.getLogger("signoff.shopify")

#: How many times one call waits out THROTTLED before it gives up.
MAX_THROTTLED = 8
#: Attempts of a query that met a 5xx or a dropped connection.
QUERY_ATTEMPTS = 3


class ShopifyUnavailable(Exception):
    """The store did not answer usably (5xx, network, GraphQL errors): an infrastructure
    failure, never a business refusal. Carries no token, secret or request body."""


class _Envelope(BaseModel):
    data: dict[str, Any] | None = None
    errors: list[dict[str, Any]] | None = None
    extensions: dict[str, Any] | None = None


def _is_mutation(name: str) -> bool:
    ops = [d for d in documents.document(name).definitions if isinstance(d, OperationDefinitionNode)]
    return ops[0].operation is OperationType.MUTATION


def _throttled(errors: list[dict[str, Any]] | None) -> bool:
    return any((e.get("extensions") or {}).get("code") == "THROTTLED" for e in errors or ())


class AdminClient:
    """GraphQL Admin API calls for one store."""

    def __init__(
        self,
        config: ShopifyConfig,
        tokens: TokenSource,
        *,
        session: aiohttp.ClientSession | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._tokens = tokens
        self._session = session
        self._sleep = sleep
        self._now = monotonic
        self._gate = asyncio.Semaphore(config.max_concurrency)
        self.bucket = CostBucket()
        #: Seconds spent waiting for the bucket (tests, metrics).
        self.waited_s = 0.0

    def __repr__(self) -> str:
        return f"AdminClient(shop={self.config.shop!r}, version={self.config.api_version!r})"

    def session(self) -> aiohttp.ClientSession:
        """The HTTP session (made on first use, on the running loop)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()

    async def execute(self, name: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        """The ``data`` of operation ``name`` with ``variables``; waits out throttling."""
        mutation = _is_mutation(name)
        throttled = failures = 0
        while True:
            await self._wait_for_bucket()
            try:
                async with self._gate:
                    env = await self._post(name, variables or {})
            except (aiohttp.ClientError, TimeoutError, ShopifyUnavailable, AuthFailed) as exc:
                failures += 1
                if mutation or failures >= QUERY_ATTEMPTS:
                    raise ShopifyUnavailable(f"Shopify {name}: {_describe(exc)}") from None
                await self._sleep(0.2 * 2**failures)
                continue
            self.bucket.observe(ThrottleStatus.of(env.extensions), requested_cost(env.extensions), now=self._now())
            if _throttled(env.errors):
                throttled += 1
                if throttled > MAX_THROTTLED:
                    raise ShopifyUnavailable(f"Shopify {name}: still throttled after {MAX_THROTTLED} waits")
                await self._pause(max(self.bucket.wait_s(now=self._now()), 1.0))
                continue
            if env.errors:
                messages = "; ".join(str(e.get("message", "error"))[:200] for e in env.errors[:3])
                raise ShopifyUnavailable(f"Shopify {name}: {messages}")
            if env.data is None:
                raise ShopifyUnavailable(f"Shopify {name}: no data")
            return env.data

    async def _wait_for_bucket(self) -> None:
        wait = self.bucket.wait_s(now=self._now())
        if wait > 0:
            await self._pause(wait)

    async def _pause(self, seconds: float) -> None:
        log.info("shopify: waiting %.1fs for the cost bucket of %s", seconds, self.config.shop)
        self.waited_s += seconds
        await self._sleep(seconds)

    async def _post(self, name: str, variables: dict[str, Any]) -> _Envelope:
        token = await self._tokens.token()
        headers = {"X-Shopify-Access-Token": token.get_secret_value(), "Content-Type": "application/json"}
        body = {"query": documents.text(name), "operationName": name, "variables": variables}
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_s)
        async with self.session().post(self.config.graphql_url, json=body, headers=headers, timeout=timeout) as resp:
            raw = await resp.read()
            status = resp.status
        if status == 401:
            self._tokens.invalidate(token)
            raise AuthFailed(f"Shopify refused the access token for {name} (HTTP 401)")
        if status == 429:
            return _Envelope(errors=[{"message": "Throttled", "extensions": {"code": "THROTTLED"}}])
        if status >= 500 or status != 200:
            raise ShopifyUnavailable(f"HTTP {status}")
        try:
            return _Envelope.model_validate_json(raw)
        except ValidationError:
            raise ShopifyUnavailable("the response was not a GraphQL JSON envelope") from None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ShopifyUnavailable | AuthFailed):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return "timed out"
    return type(exc).__name__
