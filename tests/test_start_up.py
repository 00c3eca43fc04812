"""Start-up against the database: "not migrated" only when the schema's Alembic revision is
behind this release's heads (not when some table is missing, nor for a newer release's
schema); the wait for an unavailable database is ``SIGNOFF_START_WAIT_S`` (unset: no bound)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from agent.errors import ConfigError
from bot.app import create_app
from bot.settings import load_settings
from sandbox.schema import upgrade
from storage import migrate


def _settings(url: str, **more: str) -> object:
    return load_settings(
        {"SIGNOFF_DATABASE_URL": url, "SIGNOFF_LLM_PROVIDER": "scripted", "SIGNOFF_ENV": "development", **more}
    )


async def _start(url: str, **more: str) -> None:
    app = await create_app(_settings(url, **more))  # type: ignore[arg-type]
    await app.close()


async def _set_runtime_revision(url: str, revision: str, *, was: str | None = None) -> None:
    """Record the runtime's branch at ``revision`` instead of ``was`` (default: its head); the
    tables stay as they are."""
    head = was or migrate.heads()[0]
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE alembic_version SET version_num = :r WHERE version_num = :h"), {"r": revision, "h": head}
            )
    finally:
        await engine.dispose()


def _previous_runtime_revision() -> str:
    script = ScriptDirectory.from_config(migrate.alembic_config("sqlite://"))
    (head,) = script.get_heads()
    down = script.get_revision(head).down_revision
    assert isinstance(down, str)
    return down


async def test_an_unmigrated_database_is_not_migrated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"database not migrated \(at no revision; this release needs "):
        await _start(f"sqlite+aiosqlite:///{tmp_path / 'blank.db'}")


async def test_a_database_behind_this_release_is_not_migrated_though_its_tables_exist(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'behind.db'}"
    await upgrade(url)
    previous = _previous_runtime_revision()
    await _set_runtime_revision(url, previous)
    with pytest.raises(ConfigError, match=rf"database not migrated \(at .*{previous}.*run `signoff db upgrade`"):
        await _start(url)
    await _set_runtime_revision(url, migrate.heads()[0], was=previous)  # back at head: it starts
    await _start(url)


async def test_a_newer_releases_schema_starts_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A rolling deploy: the database was migrated by the next release; this one still starts."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'ahead.db'}"
    await upgrade(url)
    await _set_runtime_revision(url, "9999_next_release")
    with caplog.at_level(logging.WARNING, logger="bot.app"):
        await _start(url)
    assert any("9999_next_release" in r.getMessage() for r in caplog.records)


async def test_the_start_up_wait_is_bounded_by_the_setting() -> None:
    """With ``SIGNOFF_START_WAIT_S`` the wait for a database that never answers ends (an outage,
    raised); without it there is no bound."""
    assert _settings("sqlite+aiosqlite://").signoff_start_wait_s is None  # type: ignore[attr-defined]
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(Exception) as raised:  # noqa: PT011 (the driver's own connection error)
        await _start("postgresql+asyncpg://signoff@127.0.0.1:9/none", SIGNOFF_START_WAIT_S="1")
    assert not isinstance(raised.value, ConfigError)
    assert 0.5 <= loop.time() - started < 15
