"""The operator's CLI end to end: `db upgrade` then `store load` of the demo dataset
on a fresh SQLite file and on a fresh PostgreSQL database; a second load is
refused; export then load reproduces the store; settings errors are one line."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from bot.app import demo_dataset_path
from bot.cli import main
from tests.support import app_setting

PG_URL = os.environ.get("SIGNOFF_TEST_PG_URL")


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"
        return
    if not PG_URL:
        pytest.skip("SIGNOFF_TEST_PG_URL not set")
    name = f"signoff_cli_{uuid.uuid4().hex[:10]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield PG_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _admin(sql: str) -> None:
    assert PG_URL
    engine = create_async_engine(PG_URL, isolation_level="AUTOCOMMIT")
    async with engine.connect() as conn:
        await conn.execute(text(sql))
    await engine.dispose()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if app_setting(key):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)


def test_upgrade_load_refuse_export_roundtrip(
    database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """db upgrade → store load (demo) → second load refused → export → load elsewhere → same export."""
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", database_url)
    assert main(["db", "upgrade"]) == 0
    assert main(["store", "load", str(demo_dataset_path())]) == 0
    assert "60 customers" in capsys.readouterr().out
    assert main(["store", "load", str(demo_dataset_path())]) == 1
    assert "refusing a second load" in capsys.readouterr().err
    out = tmp_path / "export.json"
    assert main(["store", "export", "--out", str(out)]) == 0
    exported = json.loads(out.read_text())
    assert len(exported["customers"]) == 60 and len(exported["orders"]) >= 200
    second = f"sqlite+aiosqlite:///{tmp_path / 'second.db'}"
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", second)
    assert main(["db", "upgrade"]) == 0
    assert main(["store", "load", str(out)]) == 0
    again = tmp_path / "again.json"
    assert main(["store", "export", "--out", str(again)]) == 0
    assert json.loads(again.read_text()) == exported
    assert main(["audit", "verify"]) == 1  # nothing was audited yet: empty only when expected
    assert main(["audit", "verify", "--allow-empty"]) == 0


def test_bad_dataset_is_refused_with_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A malformed dataset names the JSON path and writes nothing."""
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'bad.db'}")
    assert main(["db", "upgrade"]) == 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"customers": [{"id": "C-1", "name": "A", "email": "a@b.co", "shoe": 9}]}))
    assert main(["store", "load", str(bad)]) == 1
    assert "customers[0].shoe" in capsys.readouterr().err
    assert main(["store", "export"]) == 0
    assert json.loads(capsys.readouterr().out)["customers"] == []


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"SIGNOFF_DATABASE_URL": "mysql://nope"}, "SIGNOFF_DATABASE_URL"),
        ({"SIGNOFF_LLM_PROVIDER": "anthropic"}, "ANTHROPIC_API_KEY"),
        ({"SIGNOFF_LLM_PROVIDER": "openai"}, "OPENAI_BASE_URL"),
        ({"SIGNOFF_LLM_PROVIDER": "gpt"}, "SIGNOFF_LLM_PROVIDER"),
        ({"SIGNOFF_POLICY_FILE": "/nonexistent/policy.yaml"}, "SIGNOFF_POLICY_FILE"),
        ({"SIGNOFF_SMTP_URL": "http://mail"}, "SIGNOFF_SMTP_URL"),
    ],
)
def test_bad_settings_are_one_line_naming_the_variable(
    env: dict[str, str], needle: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["audit", "verify"]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and "Traceback" not in err


def test_token_requires_secret(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "--sub", "C-7", "--role", "customer"]) == 2
    assert "SIGNOFF_JWT_SECRET" in capsys.readouterr().err
