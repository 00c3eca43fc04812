"""Production by default: what development mode and the development flags allow, and where.

``SIGNOFF_ENV`` is ``production`` unless set to ``development`` (``make demo``, ``signoff demo``
and the tests do). Only development seeds the demo data and its staff, accepts staff tokens
from the shared HS256 secret, and honours the development flags below; the settings refuse the
flags in production (bot/settings.py). A development flag also refuses a listen address that is
not loopback, and every start with development mode or a flag on logs a loud warning.
"""

from __future__ import annotations

import logging

from agent.errors import ConfigError
from bot.settings import Settings
from bot.teams.config import is_loopback_host

log = logging.getLogger(__name__)


def dev_flags(settings: Settings) -> tuple[str, ...]:
    """The development flags that are on, by variable name."""
    on = {
        "SIGNOFF_TEAMS_DEV_ANONYMOUS": settings.signoff_teams_dev_anonymous,
        "SIGNOFF_TEAMS_DEV_JWKS_URL": bool(settings.signoff_teams_dev_jwks_url),
        "SIGNOFF_TEAMS_DEV_OUTBOUND_TOKEN": bool(settings.signoff_teams_dev_outbound_token),
    }
    return tuple(name for name, value in on.items() if value)


def refuse_public_listen(settings: Settings, host: str) -> None:
    """A development flag lets unsigned or locally signed traffic in: loopback listeners only."""
    flags = dev_flags(settings)
    if flags and not is_loopback_host(host):
        raise ConfigError(
            f"{flags[0]}: a development flag, refused with the non-loopback listen address {host} "
            "(serve on 127.0.0.1, or unset the flag)"
        )


def warn_if_development(settings: Settings) -> None:
    """Log, at every start, that this process is not running as production, or that this
    production has no audit anchor off the app host."""
    if settings.is_production:  # the settings refuse every development flag in production
        warn_if_unanchored(settings)
        return
    what = ", ".join(("SIGNOFF_ENV=development", *dev_flags(settings)))
    log.warning(
        "DEVELOPMENT MODE (%s): demo data and staff may be seeded, the shared secret mints staff tokens "
        "and development flags let unsigned requests in; never expose this process",
        what,
    )


def warn_if_unanchored(settings: Settings) -> None:
    """Production with neither the separate signer nor an off-host publish target: whoever
    controls this host can rewrite the audit log and its checkpoints together unnoticed. With
    neither the signer nor an audit key, nothing seals the policy in force (agent/policy_store.py)."""
    if not (settings.signoff_audit_signer or settings.signoff_audit_key_file):
        log.warning(
            "POLICY UNSEALED: neither SIGNOFF_AUDIT_SIGNER nor SIGNOFF_AUDIT_KEY_FILE is set, so a policy "
            "version is in force on the database's word (README, Rolling out)"
        )
    if settings.signoff_audit_signer or settings.signoff_audit_publish:
        return
    log.warning(
        "NO AUDIT ANCHOR OFF THIS HOST: neither SIGNOFF_AUDIT_SIGNER nor SIGNOFF_AUDIT_PUBLISH is set, so "
        "checkpoints (if any) are signed and kept where the app can rewrite them; run "
        "`signoff audit signer` as another user, or publish off-host (README, Security)"
    )


__all__ = ["dev_flags", "refuse_public_listen", "warn_if_development", "warn_if_unanchored"]
