"""Shared fixtures: a fresh SQLite file per test, and a fresh PostgreSQL schema
per test when ``SIGNOFF_TEST_PG_URL`` is set (skipped cleanly otherwise)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

import storage.audit  # noqa: F401  (the PostgreSQL audit guard hooks create_all)
import storage.models  # noqa: F401  (registers the runtime tables)
from storage.db import Base, Database, create_database

pytest_plugins = ["tests.fakes.plugin"]

PG_URL = os.environ.get("SIGNOFF_TEST_PG_URL")
#: The whole session is development (demo staff, shared-secret staff tokens, the Teams dev flags),
#: set before anything reads settings, so every `signoff` subprocess inherits it. Tests of
#: production build their settings with SIGNOFF_ENV=production (tests/support.py: scrubbed_env).
os.environ["SIGNOFF_ENV"] = "development"


def _register_all_tables() -> None:
    try:
        import sandbox.models  # noqa: F401
    except ImportError:
        pass


async def make_sqlite(path: Path) -> Database:
    _register_all_tables()
    db = create_database(f"sqlite+aiosqlite:///{path}")
    async with db.engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    return db


async def make_pg(schema: str) -> Database:
    """A Database whose connections see only ``schema`` (fresh per test)."""
    assert PG_URL
    _register_all_tables()
    admin = create_async_engine(PG_URL)
    async with admin.begin() as conn:
        await conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    await admin.dispose()
    engine = create_async_engine(
        PG_URL, connect_args={"server_settings": {"search_path": schema}}, pool_size=20, max_overflow=20
    )
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    return Database.of(engine)


async def drop_pg(schema: str) -> None:
    assert PG_URL
    admin = create_async_engine(PG_URL)
    async with admin.begin() as conn:
        await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    await admin.dispose()


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    """A fresh SQLite database (tables created directly; migrations have their own tests)."""
    database = await make_sqlite(tmp_path / "t.db")
    yield database
    await database.dispose()


@pytest.fixture
async def pg_db() -> AsyncIterator[Database]:
    """A fresh PostgreSQL schema; skipped when SIGNOFF_TEST_PG_URL is not set."""
    if not PG_URL:
        pytest.skip("SIGNOFF_TEST_PG_URL not set")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    database = await make_pg(schema)
    yield database
    await database.dispose()
    await drop_pg(schema)


@pytest.fixture(params=["sqlite", "postgresql"])
async def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """Both backends: the PostgreSQL variant skips without SIGNOFF_TEST_PG_URL."""
    if request.param == "sqlite":
        database = await make_sqlite(tmp_path / "t.db")
        yield database
        await database.dispose()
        return
    if not PG_URL:
        pytest.skip("SIGNOFF_TEST_PG_URL not set")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    database = await make_pg(schema)
    yield database
    await database.dispose()
    await drop_pg(schema)
