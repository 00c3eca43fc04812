"""SIGNOFF_TEAMS_*: a missing or malformed one stops start-up with one line naming it; the
development settings are refused in production; unset, Teams is off."""

from __future__ import annotations

import pytest

from agent.errors import ConfigError
from bot.settings import load_settings
from tests.fakes.bot_connector import APP_ID, TENANT_ID

BASE = {"SIGNOFF_TEAMS_APP_ID": APP_ID, "SIGNOFF_TEAMS_TENANT_ID": TENANT_ID, "SIGNOFF_TEAMS_APP_PASSWORD": "s3cret"}


def test_unset_teams_is_off_and_set_it_is_one_config() -> None:
    assert load_settings({}).teams_config() is None
    config = load_settings({**BASE, "SIGNOFF_TEAMS_ALLOWED_TENANTS": f"{TENANT_ID}, {APP_ID}"}).teams_config()
    assert config is not None and config.app_id == APP_ID and config.allowed_tenants == (TENANT_ID, APP_ID)
    assert "s3cret" not in repr(load_settings(BASE))


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"SIGNOFF_TEAMS_APP_ID": APP_ID}, "SIGNOFF_TEAMS_TENANT_ID"),
        ({"SIGNOFF_TEAMS_TENANT_ID": TENANT_ID}, "SIGNOFF_TEAMS_APP_ID"),
        ({**BASE, "SIGNOFF_TEAMS_APP_ID": "bot-1"}, "SIGNOFF_TEAMS_APP_ID"),
        ({**BASE, "SIGNOFF_TEAMS_TENANT_ID": "contoso"}, "SIGNOFF_TEAMS_TENANT_ID"),
        ({**BASE, "SIGNOFF_TEAMS_APP_PASSWORD": ""}, "SIGNOFF_TEAMS_APP_PASSWORD"),
        ({**BASE, "SIGNOFF_TEAMS_CERTIFICATE_PFX": "/nonexistent.pfx"}, "SIGNOFF_TEAMS_CERTIFICATE_PFX"),
        ({**BASE, "SIGNOFF_TEAMS_ALLOWED_TENANTS": "contoso"}, "SIGNOFF_TEAMS_ALLOWED_TENANTS"),
        ({**BASE, "SIGNOFF_TEAMS_SERVICE_URL_ALLOW": "http://evil.example"}, "SIGNOFF_TEAMS_SERVICE_URL_ALLOW"),
        ({**BASE, "SIGNOFF_TEAMS_APPROVALS_CONVERSATION": "19:x@thread.tacv2"}, "SIGNOFF_TEAMS_SERVICE_URL"),
        ({**BASE, "SIGNOFF_TEAMS_DEV_ANONYMOUS": "maybe"}, "SIGNOFF_TEAMS_DEV_ANONYMOUS"),
        ({**BASE, "SIGNOFF_TEAMS_MESSAGING_ENDPOINT": "http://x/teams/messages"}, "SIGNOFF_TEAMS_MESSAGING_ENDPOINT"),
        ({"SIGNOFF_TEAMS_APP_PASSWORD": "s3cret"}, "SIGNOFF_TEAMS_APP_PASSWORD"),
    ],
)
def test_a_missing_or_malformed_teams_setting_is_one_line_naming_it(env: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env)
    assert str(info.value).startswith(name) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "extra",
    [
        {"SIGNOFF_TEAMS_DEV_ANONYMOUS": "true"},
        {"SIGNOFF_TEAMS_DEV_JWKS_URL": "http://127.0.0.1:9/keys"},
        {"SIGNOFF_TEAMS_DEV_OUTBOUND_TOKEN": "t", "SIGNOFF_TEAMS_APP_PASSWORD": ""},
    ],
)
def test_development_settings_are_refused_in_production(extra: dict[str, str]) -> None:
    """Production is the default, whatever the database (a SQLite deployment is no exception)."""
    env = {**BASE, **extra}
    assert load_settings({**env, "SIGNOFF_ENV": "development"}).teams_config() is not None
    for production in (
        {**env, "SIGNOFF_ENV": "production"},
        env,
        {**env, "SIGNOFF_DATABASE_URL": "sqlite+aiosqlite:///x.db"},
    ):
        with pytest.raises(ConfigError, match="production"):
            load_settings(production)


def test_the_development_token_is_not_mixed_with_real_credentials() -> None:
    with pytest.raises(ConfigError, match="^SIGNOFF_TEAMS_DEV_OUTBOUND_TOKEN"):
        load_settings({**BASE, "SIGNOFF_TEAMS_DEV_OUTBOUND_TOKEN": "t"})
