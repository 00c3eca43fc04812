"""Admin API access tokens: a static token, or the client credentials grant.

A Dev Dashboard app installed on the store gets a token from
``POST {base}/admin/oauth/access_token`` (``grant_type=client_credentials``); it lives 24 h
(``expires_in``) and is renewed before it expires. Concurrent callers share one token request.
A token is held as :class:`SecretStr` and only unwrapped into the request header."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

import aiohttp
from pydantic import BaseModel, SecretStr, ValidationError

#: Renew this long before the token's expiry (or at half its life, if that is sooner).
RENEW_BEFORE_S = 600.0


class AuthFailed(Exception):
    """The store refused our credentials (never carries a secret)."""


class TokenSource(Protocol):
    """Where the ``X-Shopify-Access-Token`` comes from."""

    async def token(self) -> SecretStr:
        """A token valid now."""
        ...

    def invalidate(self, token: SecretStr) -> None:
        """The store refused ``token`` (401): the next call fetches a new one."""


class StaticToken:
    """An admin-created app's Admin API token (``shpat_…``)."""

    def __init__(self, token: SecretStr) -> None:
        self._token = token

    async def token(self) -> SecretStr:
        """The token."""
        return self._token

    def invalidate(self, token: SecretStr) -> None:
        """A static token cannot be renewed: the next call fails the same way."""

    def __repr__(self) -> str:
        return "StaticToken(**********)"


class _Grant(BaseModel):
    access_token: SecretStr
    expires_in: float = 86399.0
    scope: str = ""


class ClientCredentials:
    """Tokens from the client credentials grant, renewed before expiry, one request at a time."""

    def __init__(
        self,
        *,
        url: str,
        client_id: str,
        client_secret: SecretStr,
        session: Callable[[], aiohttp.ClientSession],
        monotonic: Callable[[], float] = time.monotonic,
        timeout_s: float = 20.0,
    ) -> None:
        self._url = url
        self._client_id = client_id
        self._secret = client_secret
        self._session = session
        self._now = monotonic
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._token: SecretStr | None = None
        self._renew_at = 0.0
        self._lock = asyncio.Lock()
        #: Token requests made (tests and the check command read it).
        self.requests = 0

    def __repr__(self) -> str:
        return f"ClientCredentials(client_id={self._client_id!r}, client_secret=**********)"

    async def token(self) -> SecretStr:
        """The current token, fetched (once, for every waiting caller) when missing or due."""
        if self._token is not None and self._now() < self._renew_at:
            return self._token
        async with self._lock:
            if self._token is None or self._now() >= self._renew_at:
                await self._fetch()
            assert self._token is not None
            return self._token

    def invalidate(self, token: SecretStr) -> None:
        """Forget ``token`` if it is still the current one."""
        if self._token is not None and self._token.get_secret_value() == token.get_secret_value():
            self._token = None

    async def _fetch(self) -> None:
        form = {
            "grant_type": "client_credentials",
            "client_id": self._client_id,
            "client_secret": self._secret.get_secret_value(),
        }
        self.requests += 1
        async with self._session().post(self._url, data=form, timeout=self._timeout) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise AuthFailed(f"the store refused the client credentials grant (HTTP {resp.status})")
        try:
            grant = _Grant.model_validate_json(body)
        except ValidationError:
            raise AuthFailed("the store's token response had no access_token") from None
        life = max(grant.expires_in, 1.0)
        self._token = grant.access_token
        self._renew_at = self._now() + life - min(RENEW_BEFORE_S, life / 2)
