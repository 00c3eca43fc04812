"""JWT bearer authentication for the HTTP API.

The principal comes from a verified token, never from a request body:

* HS256 with ``SIGNOFF_JWT_SECRET``, or RS256/ES256 against the keys at
  ``SIGNOFF_JWKS_URL`` (fetched in a thread, cached). The algorithm comes from
  an allow-list and decides the key source, so an HS token is never checked
  against a public key and ``none`` is never accepted.
* ``exp``, ``sub`` and ``role`` are required; ``aud``/``iss`` are checked when
  configured, and must be configured (so are required) with a JWKS. A token
  may live at most ``max_ttl_s`` (``exp - iat``, or ``exp - now`` without ``iat``).
* An HS256 secret is at least 32 bytes.
* A customer must exist in the backend; staff must exist in signoff's own
  staff (``SIGNOFF_PEOPLE_FILE`` or the dataset's list) with exactly the claimed role.
* Staff tokens signed with the shared secret are accepted in development only
  (``staff_from_secret``): in production staff come from the JWKS issuer.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import jwt
from jwt import PyJWKClient

from agent.errors import ConfigError
from bot.api import wording as say
from bot.settings import reveal
from bot.web import ApiError
from storage.identities import Staff
from tools.backend import CommerceBackend
from tools.context import Principal

Role = Literal["customer", "rep", "supervisor"]
ROLES: tuple[Role, ...] = ("customer", "rep", "supervisor")
HS_ALGORITHMS = frozenset({"HS256"})
JWKS_ALGORITHMS = frozenset({"RS256", "ES256"})
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,63}$"  # `/`: Shopify GIDs (gid://shopify/Customer/7)
MIN_SECRET_BYTES = 32
DEFAULT_MAX_TTL_S = 24 * 3600
_ID = re.compile(ID_PATTERN)


class AuthError(ApiError):
    """Authentication failed; ``code`` is unauthorized (401), forbidden (403) or unavailable (503)."""


@dataclass(frozen=True, kw_only=True)
class AuthConfig:
    """How tokens are verified. Built from settings at the composition root."""

    secret: str | None = field(default=None, repr=False)
    jwks_url: str | None = None
    audience: str | None = None
    issuer: str | None = None
    leeway_s: int = 30
    jwks_cache_s: int = 300
    #: After an unknown ``kid``, at most one forced JWKS refetch per this many seconds (PyJWT ≥ 2.14).
    jwks_cooldown_s: float = 30.0
    jwks_timeout_s: float = 5.0
    #: The longest lifetime a token may claim.
    max_ttl_s: int = DEFAULT_MAX_TTL_S
    #: Whether the shared secret may mint staff (rep, supervisor) tokens: development only. In
    #: production whoever holds the secret could otherwise approve refunds; staff come from the
    #: identity provider's asymmetric keys (JWKS) and the secret mints customer tokens at most.
    staff_from_secret: bool = False

    def __post_init__(self) -> None:
        if self.secret is not None and len(self.secret.encode()) < MIN_SECRET_BYTES:
            raise ConfigError(f"SIGNOFF_JWT_SECRET: must be at least {MIN_SECRET_BYTES} bytes for HS256")
        if self.jwks_url and not (self.audience and self.issuer):
            raise ConfigError(
                "SIGNOFF_JWT_AUDIENCE: SIGNOFF_JWT_AUDIENCE and SIGNOFF_JWT_ISSUER are required "
                "when SIGNOFF_JWKS_URL is set"
            )
        if self.max_ttl_s <= 0:
            raise ConfigError("SIGNOFF_JWT_MAX_TTL_S: must be positive")

    @property
    def configured(self) -> bool:
        return bool(self.secret or self.jwks_url)

    @classmethod
    def from_settings(cls, settings: Any) -> AuthConfig:
        if settings is None:
            return cls()
        return cls(
            secret=reveal(settings.signoff_jwt_secret),
            jwks_url=settings.signoff_jwks_url,
            audience=settings.signoff_jwt_audience,
            issuer=settings.signoff_jwt_issuer,
            max_ttl_s=settings.signoff_jwt_max_ttl_s,
            staff_from_secret=not settings.is_production,
        )


@dataclass(frozen=True, kw_only=True)
class Caller:
    """An authenticated caller. Customers are bound to their own account; staff to none yet."""

    principal: Principal
    role: Role
    #: The ``customer`` claim of a staff token: the account a new conversation binds to by default.
    default_customer: str | None = None

    @property
    def is_staff(self) -> bool:
        return self.principal.is_staff


class StaffDirectory(Protocol):
    """Who a staff token's subject is (``storage.identities.People`` or a face's port)."""

    async def staff(self, staff_id: str) -> Staff | None: ...


class Authenticator:
    """Verifies bearer tokens and resolves them to a :class:`Caller`."""

    def __init__(self, config: AuthConfig, backend: CommerceBackend, people: StaffDirectory) -> None:
        self.config = config
        self.backend = backend
        self.people = people
        self._jwks = (
            PyJWKClient(
                config.jwks_url,
                cache_keys=True,
                lifespan=config.jwks_cache_s,
                timeout=config.jwks_timeout_s,
                cooldown_duration=config.jwks_cooldown_s,
            )
            if config.jwks_url
            else None
        )

    async def authenticate(self, authorization: str | None) -> Caller:
        """The caller behind an ``Authorization`` header; raises :class:`AuthError`."""
        if not self.config.configured:
            raise AuthError("unavailable", say.AUTH_NOT_CONFIGURED)
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthError("unauthorized", say.NO_TOKEN)
        claims = await self.verify(token)
        if claims.get("role") != "customer" and not self.config.staff_from_secret and _shared_secret(token):
            raise _bad("staff tokens come from the identity provider (JWKS), not the shared secret")
        return await self._caller(claims)

    async def verify(self, token: str) -> dict[str, Any]:
        """Check signature, algorithm and registered claims; return the claims."""
        if len(token) > 8192:
            raise _bad("token too long")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise _bad("malformed token") from None
        alg = header.get("alg")
        key = await self._key_for(alg, token)
        required = (
            ["exp", "sub", "role"] + (["aud"] if self.config.audience else []) + (["iss"] if self.config.issuer else [])
        )
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[str(alg)],
                audience=self.config.audience,
                issuer=self.config.issuer,
                leeway=self.config.leeway_s,
                options={"require": required},
            )
        except jwt.ExpiredSignatureError:
            raise _bad("token expired") from None
        except jwt.InvalidAudienceError:
            raise _bad("wrong audience") from None
        except jwt.InvalidIssuerError:
            raise _bad("wrong issuer") from None
        except jwt.MissingRequiredClaimError as exc:
            raise _bad(f"missing claim {exc.claim}") from None
        except jwt.PyJWTError:
            raise _bad("signature or claims invalid") from None
        if not isinstance(claims, dict):
            raise _bad("claims are not an object")
        self._check_lifetime(claims)
        return claims

    def _check_lifetime(self, claims: dict[str, Any]) -> None:
        """Refuse a token that claims to live longer than ``max_ttl_s`` (a leaked one stays useful
        no longer than that): ``exp - iat``, or ``exp - now`` when it carries no ``iat``."""
        exp, iat = claims.get("exp"), claims.get("iat")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise _bad("exp must be a number")
        now = time.time()
        # An iat in the future buys no extra life.
        start = min(float(iat), now) if isinstance(iat, int | float) and not isinstance(iat, bool) else now
        if exp - start > self.config.max_ttl_s:
            raise _bad(f"token lifetime exceeds {self.config.max_ttl_s} seconds")

    async def _key_for(self, alg: Any, token: str) -> Any:
        if alg in HS_ALGORITHMS and self.config.secret:
            return self.config.secret
        if alg in JWKS_ALGORITHMS and self._jwks is not None:
            jwks = self._jwks
            try:
                jwk = await asyncio.to_thread(jwks.get_signing_key_from_jwt, token)
            except jwt.PyJWKClientConnectionError:
                raise AuthError("unavailable", say.KEYS_UNAVAILABLE) from None
            except jwt.PyJWTError:
                raise _bad("no matching signing key") from None
            if jwk.algorithm_name != alg:
                raise _bad("key and algorithm do not match")
            return jwk.key
        raise _bad("algorithm not allowed")

    async def _caller(self, claims: dict[str, Any]) -> Caller:
        sub, role, customer = claims.get("sub"), claims.get("role"), claims.get("customer")
        if not isinstance(sub, str) or not _ID.match(sub):
            raise _bad("sub must be an id")
        if role not in ROLES:
            raise _bad("role must be customer, rep or supervisor")
        if customer is not None and (not isinstance(customer, str) or not _ID.match(customer)):
            raise _bad("customer must be an id")
        if role == "customer":
            if customer is not None and customer != sub:
                raise _bad("a customer token binds only its own account")
            if await self.backend.get_customer(sub) is None:
                raise AuthError("forbidden", say.UNKNOWN_CUSTOMER)
            return Caller(principal=Principal(kind="customer", id=sub, customer_id=sub), role="customer")
        staff = await self.people.staff(sub)
        if staff is None or staff.role != role:
            raise AuthError("forbidden", say.UNKNOWN_STAFF)
        return Caller(principal=Principal(kind=role, id=sub), role=role, default_customer=customer)


def _shared_secret(token: str) -> bool:
    """Whether ``token`` (already verified) was signed with the shared HS256 secret."""
    return jwt.get_unverified_header(token).get("alg") in HS_ALGORITHMS


def _bad(reason: str) -> AuthError:
    return AuthError("unauthorized", say.BAD_TOKEN.format(reason=reason))


def make_token(
    secret: str,
    *,
    sub: str,
    role: str,
    customer: str | None = None,
    ttl_s: int = 3600,
    audience: str | None = None,
    issuer: str | None = None,
    now: float | None = None,
) -> str:
    """An HS256 token for ``signoff token`` and tests (``customer``: a staff token's default account)."""
    if role not in ROLES:
        raise ValueError("role must be customer, rep or supervisor")
    issued = int(now if now is not None else time.time())
    claims: dict[str, Any] = {"sub": sub, "role": role, "iat": issued, "exp": issued + ttl_s}
    if customer is not None:
        claims["customer"] = customer
    if audience is not None:
        claims["aud"] = audience
    if issuer is not None:
        claims["iss"] = issuer
    return jwt.encode(claims, secret, algorithm="HS256")


__all__ = ["AuthConfig", "AuthError", "Authenticator", "Caller", "ID_PATTERN", "ROLES", "make_token"]
