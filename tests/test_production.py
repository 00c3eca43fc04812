"""Production by default (bot/production.py): development mode and the development flags are
asked for, refuse a public listener and say so loudly at every start; secrets never show; and
/metrics is not open by default."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from aiohttp.test_utils import make_mocked_request
from pydantic import SecretStr

from agent.audit_budget import AuditBudget
from agent.errors import ConfigError
from agent.llm.testing import ScriptedModel
from bot.api.auth import AuthConfig
from bot.app import create_app
from bot.cli.commands import main
from bot.email.bridge import EmailConfig
from bot.production import refuse_public_listen
from bot.server import make_web_app
from bot.server import metrics as metrics_handler
from bot.settings import Settings, load_settings
from sandbox.schema import upgrade
from storage.checkpoints import load_or_create_signing_key
from storage.db import Database
from tests.api_kit import client_for
from tests.fakes.bot_connector import APP_ID, TENANT_ID
from tests.support import Harness, app_setting, seeded

TEAMS = {"SIGNOFF_TEAMS_APP_ID": APP_ID, "SIGNOFF_TEAMS_TENANT_ID": TENANT_ID, "SIGNOFF_TEAMS_APP_PASSWORD": "p"}
DEV = {"SIGNOFF_ENV": "development", "SIGNOFF_LLM_PROVIDER": "scripted"}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for key in list(os.environ):
        if app_setting(key):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'p.db'}")
    return monkeypatch


# -- development flags ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flag",
    [
        {"SIGNOFF_TEAMS_DEV_ANONYMOUS": "true"},
        {"SIGNOFF_TEAMS_DEV_JWKS_URL": "http://127.0.0.1:9/keys"},
        {"SIGNOFF_TEAMS_DEV_OUTBOUND_TOKEN": "t", "SIGNOFF_TEAMS_APP_PASSWORD": ""},
    ],
)
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.7", "signoff.example"])
def test_a_development_flag_refuses_a_public_listen_address(
    clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flag: dict[str, str], host: str
) -> None:
    """`serve --host 0.0.0.0` with a development flag is a start-up error naming the flag (exit 2,
    before anything listens); on loopback the same settings are fine."""
    for name, value in {**DEV, **TEAMS, **flag}.items():
        clean_env.setenv(name, value)
    assert main(["serve", "--host", host, "--port", "1"]) == 2
    err = capsys.readouterr().err
    name = next(iter(flag))
    assert err.startswith(f"signoff: {name}: a development flag, refused with the non-loopback listen address")
    settings = load_settings({**DEV, **TEAMS, **flag})
    for loopback in ("127.0.0.1", "::1", "localhost"):
        refuse_public_listen(settings, loopback)


def test_without_a_flag_development_may_listen_anywhere() -> None:
    refuse_public_listen(load_settings(DEV), "0.0.0.0")
    refuse_public_listen(load_settings({"SIGNOFF_LLM_PROVIDER": "scripted"}), "0.0.0.0")


async def _started(tmp_path: Path, env: dict[str, str], caplog: pytest.LogCaptureFixture) -> list[str]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'w.db'}"
    await upgrade(url)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        app = await create_app(load_settings({"SIGNOFF_DATABASE_URL": url, **env}), model=ScriptedModel([]))
        await app.close()
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_every_start_in_development_warns_loudly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Development mode, and each development flag by name, is a WARNING at start-up; production
    says nothing of the kind."""
    lines = await _started(tmp_path, DEV, caplog)
    assert any(line.startswith("DEVELOPMENT MODE (SIGNOFF_ENV=development)") for line in lines), lines
    lines = await _started(tmp_path, {**DEV, **TEAMS, "SIGNOFF_TEAMS_DEV_ANONYMOUS": "true"}, caplog)
    assert any("DEVELOPMENT MODE (SIGNOFF_ENV=development, SIGNOFF_TEAMS_DEV_ANONYMOUS)" in line for line in lines)
    lines = await _started(tmp_path, {"SIGNOFF_LLM_PROVIDER": "scripted"}, caplog)
    assert not any("DEVELOPMENT" in line for line in lines), lines


async def test_production_without_a_signer_or_publish_target_warns_loudly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Production with neither SIGNOFF_AUDIT_SIGNER nor SIGNOFF_AUDIT_PUBLISH says so at start;
    either one silences it, and development (which warns of itself) does not add it."""
    prod = {"SIGNOFF_LLM_PROVIDER": "scripted"}
    lines = await _started(tmp_path, prod, caplog)
    assert any(line.startswith("NO AUDIT ANCHOR OFF THIS HOST") for line in lines), lines
    assert any(line.startswith("POLICY UNSEALED") for line in lines), lines
    publish = {**prod, "SIGNOFF_AUDIT_PUBLISH": str(tmp_path / "worm")}
    lines = await _started(tmp_path, publish, caplog)
    assert not any("NO AUDIT ANCHOR" in line for line in lines) and any("POLICY UNSEALED" in x for x in lines)
    pinned = tmp_path / "signer.pem"  # the signer's key pinned: the start need not reach it
    load_or_create_signing_key(pinned)
    signer = {**prod, "SIGNOFF_AUDIT_SIGNER": "unix:/run/signoff-signer/sock", "SIGNOFF_AUDIT_KEY_FILE": str(pinned)}
    assert not any("NO AUDIT ANCHOR" in x or "UNSEALED" in x for x in await _started(tmp_path, signer, caplog))
    assert not any("NO AUDIT ANCHOR" in line for line in await _started(tmp_path, DEV, caplog))


def test_signoff_demo_is_development_without_being_told(clean_env: pytest.MonkeyPatch) -> None:
    """`signoff demo` needs no SIGNOFF_ENV; the settings it loads are development."""
    clean_env.delenv("SIGNOFF_ENV", raising=False)
    assert load_settings(development=True).is_production is False
    assert load_settings().is_production is True


# -- secrets ------------------------------------------------------------------------------------

MARK = "SECRETMARKER"


def _secret_fields() -> list[str]:
    return [name for name, f in Settings.model_fields.items() if f.annotation == SecretStr | None]


def test_every_secret_setting_is_a_secret_str() -> None:
    """A setting named like a credential is a SecretStr (a new one added as `str` fails here)."""
    credential = ("secret", "_token", "password", "api_key")
    named = {n for n, f in Settings.model_fields.items() if any(w in n for w in credential)}
    assert named and named <= set(_secret_fields()), named - set(_secret_fields())


def _marked_env(tmp_path: Path) -> dict[str, str]:
    env = {
        **DEV,
        **TEAMS,
        "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 's.db'}",
        "SLACK_CLIENT_ID": "123.456",
        "SIGNOFF_SMTP_URL": "smtp://127.0.0.1:9?from=support@shop.example",
    }
    for name in _secret_fields():
        env[name.upper()] = f"{MARK}-{name}-0123456789abcdef0123456789abcdef"
    env.pop("SIGNOFF_TEAMS_DEV_OUTBOUND_TOKEN")  # not together with the app password (its own test)
    return env


async def test_secrets_never_show_in_a_repr_a_dump_an_error_or_the_start_up_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = _marked_env(tmp_path)
    settings = load_settings(env)
    shown: list[Any] = [repr(settings), str(settings), settings.model_dump(), settings.model_dump_json()]
    shown += [
        AuthConfig.from_settings(settings),
        settings.slack_config(),
        settings.smtp_config(),
        EmailConfig.from_settings(settings),
    ]
    shown += [settings.teams_config()]
    for bad in ({"SIGNOFF_METRICS_TOKEN": f"{MARK}1"}, {"SIGNOFF_JWT_SECRET": f"{MARK}-short"}):
        with pytest.raises(ConfigError) as info:
            load_settings({**env, **bad})
        shown.append(info.value)
    pg = f"postgresql+asyncpg://signoff:{MARK}-db@db.internal/signoff"
    shown.append(repr(load_settings({**DEV, "SIGNOFF_DATABASE_URL": pg, "SIGNOFF_MIGRATION_DATABASE_URL": pg})))
    dev_token = load_settings(
        {**DEV, **TEAMS, "SIGNOFF_TEAMS_APP_PASSWORD": "", "SIGNOFF_TEAMS_DEV_OUTBOUND_TOKEN": MARK}
    )
    shown += [repr(dev_token), dev_token.teams_config()]
    await upgrade(env["SIGNOFF_DATABASE_URL"])
    with caplog.at_level(logging.DEBUG):
        app = await create_app(settings, model=ScriptedModel([]))
        web_app = make_web_app(app)
        shown.append(web_app)
        await app.close()
    shown += [f"{r.getMessage()} {r.args!r} {r.__dict__!r}" for r in caplog.records]
    leaks = [str(x)[:200] for x in shown if MARK in (x if isinstance(x, str) else repr(x) + str(x))]
    assert not leaks
    assert len(caplog.records) > 3  # the start-up did log


# -- /metrics -----------------------------------------------------------------------------------


@pytest.fixture
async def harness(db: Database) -> Harness:
    return await seeded(db, ScriptedModel([]))


@pytest.mark.parametrize(
    ("peer", "headers", "status"),
    [
        ("127.0.0.1", {}, 200),
        ("::1", {}, 200),
        ("203.0.113.5", {}, 403),
        ("10.1.2.3", {}, 403),
        ("127.0.0.1", {"X-Forwarded-For": "203.0.113.5"}, 403),  # a proxy on this machine relays
        ("127.0.0.1", {"Forwarded": "for=203.0.113.5"}, 403),
    ],
)
async def test_metrics_on_the_main_port_answer_loopback_peers_only(
    harness: Harness, peer: str, headers: dict[str, str], status: int
) -> None:
    """Without a port of their own or a token, /metrics answers only this machine."""
    async with client_for(harness, metrics_render=lambda: b"signoff_up 1\n") as client:
        web_app = client.server.app  # type: ignore[attr-defined]
        transport = mock.Mock()
        transport.get_extra_info.side_effect = lambda key, default=None: (peer, 40000) if key == "peername" else default
        request = make_mocked_request("GET", "/metrics", headers=headers, app=web_app, transport=transport)
        response = await metrics_handler(request)
        assert response.status == status
        real = await client.get("/metrics", headers=headers)  # a real loopback connection
        assert real.status == (200 if not headers else 403)


async def test_a_metrics_token_opens_the_main_port_to_its_holder(harness: Harness) -> None:
    async with client_for(harness, metrics_render=lambda: b"signoff_up 1\n", metrics_token="t" * 20) as client:
        web_app = client.server.app  # type: ignore[attr-defined]
        transport = mock.Mock()
        transport.get_extra_info.side_effect = lambda key, default=None: (
            ("203.0.113.5", 1) if key == "peername" else default
        )
        for auth, status in ((None, 401), ("Bearer " + "t" * 20, 200)):
            headers = {"Authorization": auth} if auth else {}
            request = make_mocked_request("GET", "/metrics", headers=headers, app=web_app, transport=transport)
            assert (await metrics_handler(request)).status == status


def test_the_metrics_port_setting_gives_metrics_a_listener_of_their_own() -> None:
    assert load_settings({"SIGNOFF_METRICS_PORT": "9100"}).metrics_listen("0.0.0.0") == ("0.0.0.0", 9100)
    assert load_settings({}).metrics_listen("0.0.0.0") is None
    with pytest.raises(ConfigError, match="^SIGNOFF_METRICS_PORT"):
        load_settings({"SIGNOFF_METRICS_PORT": "70000"})


# -- the audit budget of clicks ----------------------------------------------------------------


def test_the_audit_budget_is_a_sliding_window_per_person_with_bounded_memory() -> None:
    now = [0.0]
    budget = AuditBudget(per_window=2, window_s=10, max_people=3, clock=lambda: now[0])
    assert [budget.allow("a") for _ in range(3)] == [True, True, False]
    assert budget.allow("b")
    now[0] = 9.9
    assert not budget.allow("a")
    now[0] = 10.0
    assert budget.allow("a") and budget.allow("a") and not budget.allow("a")
    for person in ("c", "d", "e"):
        budget.allow(person)
    assert len(budget._seen) == 3  # the least recently seen were forgotten
    with pytest.raises(ValueError):
        AuditBudget(per_window=0)


def test_the_readme_says_the_click_audit_budget_is_per_process() -> None:
    """The budget lives in each process's memory: the README says N replicas allow N times it."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    security = " ".join(readme.partition("\n## Security")[2].partition("\n## ")[0].split())
    assert f"N replicas serving clicks allow up to N × {AuditBudget().per_window} a minute per person" in security


def test_requires_python_has_a_patch_floor_this_interpreter_meets() -> None:
    """`>=3.11` let an unpatched 3.11.0 install us; the floor names a patch release (pyproject says why)."""
    import sys
    import tomllib

    spec = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    floor = spec["requires-python"].removeprefix(">=")
    parts = tuple(int(x) for x in floor.split("."))
    assert len(parts) == 3 and parts[:2] == (3, 11) and parts[2] >= 4, floor
    assert sys.version_info[:3] >= parts
