"""The Teams face's section of the settings: ``SIGNOFF_TEAMS_*`` read into a :class:`TeamsConfig`
(``ValueError`` naming the variable). ``bot/settings.py`` holds the variables; this folder says
what they mean."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from bot.settings import Settings, reveal
from bot.teams.config import TeamsConfig, TeamsConfigError


def _csv(value: str | None) -> tuple[str, ...]:
    return tuple(x.strip() for x in (value or "").split(",") if x.strip())


def _teams_dev_checks(s: Settings, named: Mapping[str, object]) -> None:
    """The development-only Teams settings: never in production, never beside real credentials."""
    for name in ("SIGNOFF_TEAMS_DEV_JWKS_URL", "SIGNOFF_TEAMS_DEV_OUTBOUND_TOKEN"):
        if named[name] and s.is_production:
            raise ValueError(f"{name}: a development setting, refused in production")
    if s.signoff_teams_dev_outbound_token and (s.signoff_teams_app_password or s.signoff_teams_certificate_pfx):
        raise ValueError("SIGNOFF_TEAMS_DEV_OUTBOUND_TOKEN: not together with real credentials")
    if s.signoff_teams_dev_anonymous and s.is_production:
        raise ValueError("SIGNOFF_TEAMS_DEV_ANONYMOUS: lets unsigned requests in; refused in production")


def teams_config_of(s: Settings) -> TeamsConfig | None:
    """``SIGNOFF_TEAMS_*`` as a :class:`TeamsConfig`; ``ValueError`` naming the variable."""
    named = {
        "SIGNOFF_TEAMS_APP_PASSWORD": s.signoff_teams_app_password,
        "SIGNOFF_TEAMS_CERTIFICATE_PFX": s.signoff_teams_certificate_pfx,
        "SIGNOFF_TEAMS_APPROVALS_CONVERSATION": s.signoff_teams_approvals_conversation,
        "SIGNOFF_TEAMS_DEV_JWKS_URL": s.signoff_teams_dev_jwks_url,
        "SIGNOFF_TEAMS_DEV_OUTBOUND_TOKEN": s.signoff_teams_dev_outbound_token,
    }
    if not s.signoff_teams_app_id and not s.signoff_teams_tenant_id:
        stray = next((k for k, v in named.items() if v), None)
        if stray:
            raise ValueError(f"{stray}: set SIGNOFF_TEAMS_APP_ID and SIGNOFF_TEAMS_TENANT_ID to use Teams")
        return None
    for name, value in (
        ("SIGNOFF_TEAMS_APP_ID", s.signoff_teams_app_id),
        ("SIGNOFF_TEAMS_TENANT_ID", s.signoff_teams_tenant_id),
    ):
        if not value:
            raise ValueError(f"{name}: required when Teams is configured")
    if not (s.signoff_teams_app_password or s.signoff_teams_certificate_pfx or s.signoff_teams_dev_outbound_token):
        raise ValueError("SIGNOFF_TEAMS_APP_PASSWORD: required to send to Teams (or SIGNOFF_TEAMS_CERTIFICATE_PFX)")
    if s.signoff_teams_certificate_pfx is not None and not s.signoff_teams_certificate_pfx.is_file():
        raise ValueError(f"SIGNOFF_TEAMS_CERTIFICATE_PFX: no such file: {s.signoff_teams_certificate_pfx}")
    _teams_dev_checks(s, named)
    if bool(s.signoff_teams_approvals_conversation) != bool(s.signoff_teams_service_url):
        missing = (
            "SIGNOFF_TEAMS_SERVICE_URL"
            if s.signoff_teams_approvals_conversation
            else "SIGNOFF_TEAMS_APPROVALS_CONVERSATION"
        )
        raise ValueError(f"{missing}: the approvals conversation needs both its id and its service URL")
    jwks = s.signoff_teams_dev_jwks_url
    if jwks is not None:
        parts = urlsplit(jwks)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("SIGNOFF_TEAMS_DEV_JWKS_URL: must be an http(s) URL")
    endpoint = s.signoff_teams_messaging_endpoint
    if endpoint is not None and (urlsplit(endpoint).scheme != "https" or not urlsplit(endpoint).hostname):
        raise ValueError("SIGNOFF_TEAMS_MESSAGING_ENDPOINT: must be an https URL (…/teams/messages)")
    try:
        return TeamsConfig(
            app_id=s.signoff_teams_app_id or "",
            tenant_id=s.signoff_teams_tenant_id or "",
            app_password=reveal(s.signoff_teams_app_password),
            certificate_pfx=str(s.signoff_teams_certificate_pfx) if s.signoff_teams_certificate_pfx else None,
            service_url_allow=_csv(s.signoff_teams_service_url_allow),
            allowed_tenants=_csv(s.signoff_teams_allowed_tenants),
            dev_allow_anonymous=s.signoff_teams_dev_anonymous,
            botframework_jwks_url=jwks,
            entra_jwks_url=jwks,
        )
    except TeamsConfigError as exc:
        raise ValueError(_named(str(exc))) from None


def _named(message: str) -> str:
    """``SIGNOFF_X must …`` → ``SIGNOFF_X: must …``, so the line starts with the variable."""
    head, _, rest = message.partition(" ")
    if head.startswith("SIGNOFF_"):
        return message if head.endswith(":") else f"{head}: {rest}"
    name = next((w.strip(",") for w in message.split() if w.startswith("SIGNOFF_")), "SIGNOFF_TEAMS")
    return f"{name}: {message}"
