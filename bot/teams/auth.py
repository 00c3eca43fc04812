"""Inbound authentication for ``POST /teams/messages``.

Every request carries ``Authorization: Bearer <JWT>`` minted by the Bot Framework
channel service. Signature, audience, issuer allow-list and Entra tid-to-issuer
binding are checked by the Agents SDK's own ``JwtTokenValidator`` (RS256 against
the issuer's JWKS, 300 s leeway). Around it we add what the SDK leaves optional:
cheap pre-checks before any key fetch (algorithm, ``kid``, issuer, audience),
a mandatory ``exp``, the ``serviceurl`` claim bound to the activity's
``serviceUrl``, and the outbound host allow-list (anti-SSRF) always on.

The SDK fixes its JWKS URLs (Bot Framework's and Entra's); the supported seam to
point them elsewhere is the validator's key manager (``_jwk_client_manager``),
which :class:`_RoutedKeys` replaces per instance so tests can use a local JWKS.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import jwt
from microsoft_agents.hosting.core import OutboundHostValidator
from microsoft_agents.hosting.core.authorization import AgentAuthConfiguration, AuthenticationConstants
from microsoft_agents.hosting.core.authorization.jwt import JwtTokenValidator
from microsoft_agents.hosting.core.authorization.jwt.jwt_token_validator import _JwkClientManager

from bot.teams.config import TeamsConfig, is_loopback_host

log = logging.getLogger(__name__)

SERVICE_URL_CLAIM = "serviceurl"
ENTRA_KEYS = "https://login.microsoftonline.com/{tenant}/discovery/v2.0/keys"


class AuthFailure(Exception):
    """The request is not from the channel service we trust. ``code`` is safe to show."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, kw_only=True)
class VerifiedCaller:
    """Who signed the request. ``anonymous`` only with the explicit dev flag."""

    anonymous: bool
    claims: Mapping[str, Any] = field(default_factory=dict)

    @property
    def service_url(self) -> str | None:
        value = self.claims.get(SERVICE_URL_CLAIM)
        return value if isinstance(value, str) else None


class ServiceUrlPolicy:
    """Which channel service URLs we accept inbound and send to outbound.

    Microsoft's hosts (botframework.com, smba.trafficmanager.net, teams.microsoft.com, …)
    plus configured extra hosts, https only, never private or loopback addresses — the
    SDK's ``OutboundHostValidator``, always enabled. Configured ``http://<loopback>``
    origins are let in besides (a local fake connector).
    """

    def __init__(self, config: TeamsConfig) -> None:
        hosts = [h for h in config.service_url_allow if "://" not in h]
        self._loopback = frozenset((urlsplit(h).hostname or "").lower() for h in config.service_url_allow if "://" in h)
        self._validator = OutboundHostValidator(hosts, enabled=True)

    def allows(self, url: str) -> bool:
        """True when ``url`` may be used as a channel service URL."""
        try:
            parts = urlsplit(url)
            host = (parts.hostname or "").lower()
            _ = parts.port  # a malformed port raises here
        except ValueError:
            return False
        if host and host in self._loopback and is_loopback_host(host) and parts.scheme in ("http", "https"):
            return not parts.username and not parts.password
        return self._validator.is_allowed(url)


def same_origin(a: str, b: str) -> bool:
    """Scheme, host (case-folded) and port equal; the path may differ (as the SDK compares)."""
    try:
        pa, pb = urlsplit(a), urlsplit(b)
        return (pa.scheme.lower(), (pa.hostname or "").casefold(), pa.port) == (
            pb.scheme.lower(),
            (pb.hostname or "").casefold(),
            pb.port,
        ) and bool(pa.hostname)
    except ValueError:
        return False


class _RoutedKeys(_JwkClientManager):
    """The SDK's JWKS client cache, with its fixed JWKS URLs mapped to configured ones."""

    def __init__(self, routes: Mapping[str, str]) -> None:
        super().__init__()
        self._routes = dict(routes)

    async def get_signing_key(self, jwks_uri: str, header: dict[str, Any]) -> jwt.PyJWK:
        return await super().get_signing_key(self._routes.get(jwks_uri, jwks_uri), header)


class _Validator(JwtTokenValidator):
    def __init__(self, configuration: AgentAuthConfiguration, keys: _JwkClientManager) -> None:
        super().__init__(configuration)
        self._jwk_client_manager = keys  # an instance attribute shadows the SDK's shared cache


def sdk_auth_configuration(config: TeamsConfig) -> AgentAuthConfiguration:
    """The SDK's view of our settings: audience = app id, issuer allow-list on, never anonymous."""
    return AgentAuthConfiguration(
        client_id=config.app_id,
        tenant_id=config.tenant_id,
        client_secret=config.app_password,
        connection_name="SERVICE_CONNECTION",
        anonymous_allowed=False,
        issuers=list(config.accepted_issuers),
        validate_issuer=True,
    )


class InboundAuthenticator:
    """Verifies the bearer token of each inbound request and binds it to the activity."""

    def __init__(self, config: TeamsConfig) -> None:
        self.config = config
        self.policy = ServiceUrlPolicy(config)
        routes: dict[str, str] = {}
        if config.botframework_jwks_url:
            routes[AuthenticationConstants.PUBLIC_ABS_JWKS_URL] = config.botframework_jwks_url
        if config.entra_jwks_url:
            for tenant in (config.tenant_id, "common"):
                routes[ENTRA_KEYS.format(tenant=tenant)] = config.entra_jwks_url
        self._validator = _Validator(sdk_auth_configuration(config), _RoutedKeys(routes))
        self._issuers = frozenset(i.lower() for i in config.accepted_issuers)

    async def verify(self, authorization: str | None) -> VerifiedCaller:
        """The caller behind an ``Authorization`` header, or :class:`AuthFailure`."""
        if not authorization:
            if self.config.dev_allow_anonymous:
                return VerifiedCaller(anonymous=True)
            raise AuthFailure("missing_token", "Authorization header not found")
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or any(c.isspace() for c in token):
            raise AuthFailure("bad_token", "Invalid authorization header format")
        self._precheck(token)
        try:
            identity = await self._validator.validate_token(token)
        except (jwt.PyJWTError, ValueError, KeyError, TypeError) as exc:
            log.warning("teams token rejected: %s", type(exc).__name__)
            raise AuthFailure("bad_token", "Invalid token or authentication failed.") from None
        claims = dict(identity.claims)
        if not isinstance(claims.get("exp"), int | float):
            raise AuthFailure("bad_token", "Invalid token or authentication failed.")
        return VerifiedCaller(anonymous=False, claims=claims)

    def check_activity(self, caller: VerifiedCaller, service_url: str) -> None:
        """The activity's ``serviceUrl`` is allowed and (when signed) the one the token names."""
        if not self.policy.allows(service_url):
            log.warning("teams activity refused: service URL not allowed")
            raise AuthFailure("service_url_not_allowed", "Service URL is not allowed.")
        if caller.anonymous:
            return
        claimed = caller.service_url
        if claimed is None or not same_origin(claimed, service_url):
            log.warning("teams activity refused: serviceurl claim does not match the activity")
            raise AuthFailure("service_url_mismatch", "Service URL does not match the token.")

    def _precheck(self, token: str) -> None:
        """Refuse before fetching any key: wrong algorithm, no kid, foreign issuer or audience."""
        try:
            header = jwt.get_unverified_header(token)
            payload = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise AuthFailure("bad_token", "Invalid token or authentication failed.") from None
        iss, aud = payload.get("iss"), payload.get("aud")
        if (
            header.get("alg") != "RS256"
            or not isinstance(header.get("kid"), str)
            or not isinstance(iss, str)
            or iss.lower() not in self._issuers
            or not isinstance(aud, str)
            or aud.lower() != self.config.app_id.lower()
        ):
            log.warning("teams token rejected before key lookup")
            raise AuthFailure("bad_token", "Invalid token or authentication failed.")
