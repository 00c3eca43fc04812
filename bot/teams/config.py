"""The Teams face's settings, as one small frozen dataclass built by the composition root.

Environment variables (resolved in ``bot/settings.py``, never here):

``SIGNOFF_TEAMS_APP_ID``            the bot's Entra app (client) id; inbound token audience
``SIGNOFF_TEAMS_TENANT_ID``         the Entra tenant the bot is registered in (single-tenant)
``SIGNOFF_TEAMS_APP_PASSWORD``      client secret for outbound tokens (or the certificate below)
``SIGNOFF_TEAMS_CERTIFICATE_PFX``   path to a PFX certificate instead of the secret
``SIGNOFF_TEAMS_SERVICE_URL_ALLOW`` extra service-URL hosts (comma separated) beyond Microsoft's own
``SIGNOFF_TEAMS_ALLOWED_TENANTS``   tenants whose users may reach the bot (default: the bot's tenant)
``SIGNOFF_TEAMS_DEV_ANONYMOUS``     ``true`` lets requests without a token in (local emulator only)
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
BOT_FRAMEWORK_ISSUER = "https://api.botframework.com"
DEFAULT_MAX_BODY = 256 * 1024
LOOPBACK_NAMES = frozenset({"localhost"})


class TeamsConfigError(ValueError):
    """A Teams setting is missing or malformed; the message names it."""


def is_loopback_host(host: str) -> bool:
    """``127.0.0.0/8``, ``::1`` or ``localhost``."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, kw_only=True)
class TeamsConfig:
    """Everything the Teams face needs; validated on construction."""

    app_id: str
    tenant_id: str
    app_password: str | None = field(default=None, repr=False)
    certificate_pfx: str | None = None
    #: Extra allowed service-URL hosts (https only). An ``http://127.0.0.1`` (or other
    #: loopback) entry lets a local fake connector in: tests and local development.
    service_url_allow: tuple[str, ...] = ()
    #: Tenants (``channelData.tenant.id``) allowed to reach the bot; empty means the bot's own.
    allowed_tenants: tuple[str, ...] = ()
    #: Requests without an Authorization header are let in. Local emulator only; never in production.
    dev_allow_anonymous: bool = False
    #: Accepted token issuers; empty means Bot Framework plus this tenant's Entra v1/v2 issuers.
    issuers: tuple[str, ...] = ()
    #: JWKS URL overrides (tests point these at a local key server); ``None`` keeps Microsoft's.
    botframework_jwks_url: str | None = None
    entra_jwks_url: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY

    def __post_init__(self) -> None:
        if not GUID.match(self.app_id):
            raise TeamsConfigError("SIGNOFF_TEAMS_APP_ID must be a GUID (the bot's Entra app id)")
        if not GUID.match(self.tenant_id):
            raise TeamsConfigError("SIGNOFF_TEAMS_TENANT_ID must be a GUID (the bot's Entra tenant id)")
        if self.app_password and self.certificate_pfx:
            raise TeamsConfigError("set SIGNOFF_TEAMS_APP_PASSWORD or SIGNOFF_TEAMS_CERTIFICATE_PFX, not both")
        for tenant in self.allowed_tenants:
            if not GUID.match(tenant):
                raise TeamsConfigError(f"SIGNOFF_TEAMS_ALLOWED_TENANTS: {tenant!r} is not a GUID")
        for entry in self.service_url_allow:
            _check_allow_entry(entry)
        if self.max_body_bytes < 1024:
            raise TeamsConfigError("max_body_bytes must be at least 1024")

    @property
    def accepted_issuers(self) -> tuple[str, ...]:
        """The issuers a token may carry."""
        if self.issuers:
            return self.issuers
        return (
            BOT_FRAMEWORK_ISSUER,
            f"https://sts.windows.net/{self.tenant_id}/",
            f"https://login.microsoftonline.com/{self.tenant_id}/v2.0",
        )

    @property
    def tenants(self) -> frozenset[str]:
        """Tenants allowed to reach the bot (lower-cased)."""
        return frozenset(t.lower() for t in (self.allowed_tenants or (self.tenant_id,)))

    @property
    def has_outbound_credentials(self) -> bool:
        return bool(self.app_password or self.certificate_pfx)


def _check_allow_entry(entry: str) -> None:
    if "://" not in entry:
        if not entry or "/" in entry or is_loopback_host(entry):
            raise TeamsConfigError(f"SIGNOFF_TEAMS_SERVICE_URL_ALLOW: {entry!r} is not a public host name")
        return
    parts = urlsplit(entry)
    if parts.scheme != "http" or not parts.hostname or not is_loopback_host(parts.hostname):
        raise TeamsConfigError(
            f"SIGNOFF_TEAMS_SERVICE_URL_ALLOW: {entry!r}: only a bare host (https) or an http loopback origin"
        )
