"""`signoff audit checkpoint` and `signoff audit verify [--checkpoint FILE]` end to end, and
`signoff token` as a development helper that mints only for people in the store."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import jwt
import pytest
from sqlalchemy import text

from bot.app import demo_dataset_path
from bot.cli import main
from storage.audit import AuditEvent, AuditLog
from storage.db import create_database
from tests.support import app_setting

SECRET = "cli-test-secret-that-is-at-least-32-bytes"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No stray settings; HOME is the test's own, so the default key and checkpoint paths are too."""
    for key in list(os.environ):
        if app_setting(key):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    return tmp_path


def _append(n: int) -> None:
    """``n`` events of the root partition (no run): seq, position and the checkpointed seq agree."""

    async def go() -> None:
        db = create_database(os.environ["SIGNOFF_DATABASE_URL"])
        try:
            log = AuditLog(db)
            for i in range(n):
                await log.append(AuditEvent(kind="proposal", proposal_id=f"p{i}"))
        finally:
            await db.dispose()

    asyncio.run(go())


def _sql(statement: str) -> None:
    async def go() -> None:
        db = create_database(os.environ["SIGNOFF_DATABASE_URL"])
        try:
            async with db.engine.begin() as conn:
                await conn.execute(text(statement))
        finally:
            await db.dispose()

    asyncio.run(go())


def test_checkpoint_then_verify_passes_and_a_wiped_log_fails_a_plain_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """checkpoint creates the key at its default path (outside the database) and appends to the
    default checkpoint file; a plain verify finds that file, so an emptied log no longer passes."""
    assert main(["db", "upgrade"]) == 0
    _append(5)
    assert main(["audit", "checkpoint"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint: seq 5" in out
    home = tmp_path / "home"
    assert (home / ".config" / "signoff" / "audit-key.pem").is_file()
    [cp_file] = (home / ".local" / "state" / "signoff").glob("audit-checkpoints-*.jsonl")
    assert main(["audit", "verify"]) == 0
    assert "5 events and 1 checkpoints" in capsys.readouterr().out
    _sql("DELETE FROM audit_events")
    _sql("UPDATE audit_head SET seq = 0, hash = '" + "0" * 64 + "'")
    assert main(["audit", "verify"]) == 1
    err = capsys.readouterr().err
    assert "checkpointed seq 5 is gone" in err and str(cp_file) in err


def test_verify_with_an_explicit_checkpoint_file_and_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGNOFF_AUDIT_KEY_FILE and `checkpoint --out` / `verify --checkpoint` choose the files; a
    missing checkpoint file, a tampered line or a rewritten tail is exit 1 naming it."""
    key = tmp_path / "secrets" / "audit.pem"
    monkeypatch.setenv("SIGNOFF_AUDIT_KEY_FILE", str(key))
    cps = tmp_path / "remote" / "cps.jsonl"
    assert main(["db", "upgrade"]) == 0
    _append(3)
    assert main(["audit", "checkpoint", "--out", str(cps)]) == 0
    _append(2)
    assert main(["audit", "checkpoint", "--out", str(cps)]) == 0
    assert key.is_file() and len(cps.read_text().splitlines()) == 2
    assert main(["audit", "verify", "--checkpoint", str(cps)]) == 0
    assert "5 events and 2 checkpoints" in capsys.readouterr().out
    assert main(["audit", "verify", "--checkpoint", str(tmp_path / "nope.jsonl")]) == 1
    assert "no such checkpoint file" in capsys.readouterr().err
    lines = cps.read_text().splitlines()
    cps.write_text(lines[0] + "\n" + lines[1].replace('"seq":5', '"seq":4') + "\n")
    assert main(["audit", "verify", "--checkpoint", str(cps)]) == 1
    assert "line 2: bad signature" in capsys.readouterr().err
    cps.write_text(lines[0] + "\n" + lines[1] + "\n")
    _sql("DELETE FROM audit_events WHERE seq > 3")
    _sql("UPDATE audit_head SET seq = 3, hash = (SELECT hash FROM audit_events WHERE seq = 3) WHERE id = 1")
    assert main(["audit", "verify"]) == 0  # no default checkpoint file: the bare chain cannot tell
    capsys.readouterr()
    assert main(["audit", "verify", "--checkpoint", str(cps)]) == 1
    assert "checkpointed seq 5 is gone: the log ends at seq 3" in capsys.readouterr().err
    assert main(["audit", "checkpoint", "--out", str(cps)]) == 1  # never signs a truncated log
    assert "refusing to sign" in capsys.readouterr().err


# -- signoff token ---------------------------------------------------------------------------


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNOFF_JWT_SECRET", SECRET)
    assert main(["db", "upgrade"]) == 0
    assert main(["store", "load", str(demo_dataset_path())]) == 0


def test_token_says_it_is_a_development_helper_and_mints_for_people_in_the_store(
    store: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Staff with their own role and existing customers get a token; stderr says what it is."""
    capsys.readouterr()
    assert main(["token", "--sub", "S-3", "--role", "supervisor"]) == 0
    out, err = capsys.readouterr()
    assert "development helper" in err
    assert jwt.decode(out.strip(), SECRET, algorithms=["HS256"])["role"] == "supervisor"
    assert main(["token", "--sub", "C-7", "--role", "customer"]) == 0


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--sub", "S-404", "--role", "supervisor"], "no staff member S-404"),
        (["--sub", "S-1", "--role", "supervisor"], "not a supervisor"),
        (["--sub", "C-404", "--role", "customer"], "no customer C-404"),
        (["--sub", "C-7", "--role", "rep"], "no staff member C-7"),
        (["--sub", "C-7", "--role", "customer", "--ttl", str(24 * 3600 + 1)], "--ttl must be between 1 and 86400"),
        (["--sub", "C-7", "--role", "customer", "--ttl", "0"], "--ttl must be between"),
    ],
)
def test_token_refuses_people_not_in_the_store_and_long_lifetimes(
    store: None, argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Made-up staff, a wrong role, an unknown customer or a lifetime past the maximum: exit 2."""
    capsys.readouterr()
    assert main(["token", *argv]) == 2
    out, err = capsys.readouterr()
    assert needle in err and out == ""


def test_in_production_token_mints_customer_tokens_only(
    store: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With SIGNOFF_ENV=production the shared secret mints no staff token (staff come from JWKS)."""
    monkeypatch.setenv("SIGNOFF_ENV", "production")
    capsys.readouterr()
    for role, sub in (("supervisor", "S-3"), ("rep", "S-1")):
        assert main(["token", "--sub", sub, "--role", role]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("signoff: SIGNOFF_ENV: production; staff tokens come from")
    assert main(["token", "--sub", "C-7", "--role", "customer"]) == 0
    assert jwt.decode(capsys.readouterr().out.strip(), SECRET, algorithms=["HS256"])["sub"] == "C-7"
