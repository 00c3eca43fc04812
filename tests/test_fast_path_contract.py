"""The contract the SQLite fast path holds with SQLAlchemy and aiosqlite: fails loudly when a
release changes what storage/fastsql.py or storage/inline.py rely on.

Every prepared statement of the product (found on the modules that build them) is planned from
public API and run both ways on the same rows: the fast path must bind, store and read back
exactly what SQLAlchemy does, with the same row keys."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from sqlalchemy import Connection, create_engine, insert, select
from sqlalchemy.dialects import postgresql as postgresql_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine.interfaces import BindTyping
from sqlalchemy.sql.base import Executable

from storage.db import Base
from storage.fastsql import FastConnection, make_plan, plans_of, prepared
from storage.inline import AIOSQLITE_INTERNALS, InlineConnection
from storage.models import ConversationRow

#: The packages whose modules build prepared statements at import.
PACKAGES = ("storage", "sandbox")


def _prepared_statements() -> dict[str, Executable]:
    found: dict[str, Executable] = {}
    names = [f"{p}.{m.name}" for p in PACKAGES for m in pkgutil.iter_modules(importlib.import_module(p).__path__)]
    for name in names:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if isinstance(value, Executable) and plans_of(value) is not None:
                found[f"{name}.{attr}"] = value
    return found


DIALECTS = {"sqlite": sqlite_dialect.pysqlite.dialect, "postgresql": postgresql_dialect.asyncpg.dialect}


@pytest.mark.parametrize("dialect_name", sorted(DIALECTS))
def test_every_prepared_statement_gets_a_plan_from_public_api(dialect_name: str) -> None:
    dialect = DIALECTS[dialect_name]()
    statements = _prepared_statements()
    assert len(statements) >= 40, sorted(statements)
    for name, stmt in statements.items():
        built_for = type(stmt).__module__.partition("sqlalchemy.dialects.")[2].partition(".")[0]
        if built_for and built_for != dialect_name:
            continue  # another dialect's statement (an upsert of SQLite's lease table): never run here
        compiled = stmt.compile(dialect=dialect)  # type: ignore[attr-defined]
        keys = tuple(b for b in compiled.binds if compiled.binds[b].required)
        plan = make_plan(stmt, keys, dialect)
        if plan is None:
            continue  # SQLAlchemy runs it: no contract to keep
        assert plan.sql == compiled.string, name
        assert set(plan.names) == set(compiled.positiontup), name


def test_a_statement_derived_from_a_prepared_one_is_not_prepared() -> None:
    table = ConversationRow.__table__
    base = prepared(select(table.c.id))
    derived = base.where(table.c.id == "x")
    assert plans_of(base) is not None
    assert plans_of(derived) is None  # it shares the options, never the plans


def test_type_processors_are_sqlalchemys_public_ones() -> None:
    """The plan's processors are ``dialect_impl(dialect).bind_processor/result_processor``:
    what SQLAlchemy applies when it runs the statement itself (checked on every column type
    of the conversations table, JSON and timestamps included)."""
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine, tables=[ConversationRow.__table__])
    table = ConversationRow.__table__
    row = _conversation("c1")
    stmt = prepared(insert(table))
    read = prepared(select(table).where(table.c.id == "c1"))
    with engine.begin() as conn:
        FastConnection(conn).execute(stmt, row)
        fast = FastConnection(conn).execute(read).one()
        slow = conn.execute(select(table).where(table.c.id == "c1")).one()
        raw = conn.exec_driver_sql("SELECT meta, created_at FROM conversations").one()
        conn.execute(insert(table).values(**_conversation("c2")))
        raw2 = conn.exec_driver_sql("SELECT meta, created_at FROM conversations WHERE id = 'c2'").one()
    assert tuple(fast) == tuple(slow)
    assert fast._fields == tuple(slow._fields)
    assert tuple(raw) == tuple(raw2)  # stored bytes equal too


def _conversation(cid: str) -> dict[str, Any]:
    from datetime import UTC, datetime

    now = datetime(2025, 6, 1, 12, 30, 15, 123456, tzinfo=UTC)
    return {
        "id": cid,
        "channel": "api",
        "external_ref": None,
        "principal_kind": "customer",
        "principal_id": "C-1",
        "customer_id": "C-1",
        "status": "open",
        "loaded_groups": ["orders"],
        "model": "m",
        "prompt_version": "p",
        "next_seq": 0,
        "meta": {"n": [1, 2.5, None, "ü"]},
        "created_at": now,
        "updated_at": now,
    }


def test_aiosqlite_still_has_the_internals_inline_connection_overrides() -> None:
    for name in ("_execute",):
        assert inspect.iscoroutinefunction(getattr(aiosqlite.Connection, name)), name
    params = list(inspect.signature(aiosqlite.Connection._execute).parameters.values())
    assert [p.kind for p in params[1:]] == [
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
        inspect.Parameter.VAR_KEYWORD,
    ]
    assert AIOSQLITE_INTERNALS == ("_execute", "_connection", "_running", "_thread")


async def test_aiosqlite_internals_mean_what_inline_connection_reads(tmp_path: Path) -> None:
    conn = InlineConnection(lambda: sqlite3.connect(tmp_path / "x.db", check_same_thread=False), 64).daemonize()
    assert isinstance(conn._thread, threading.Thread) and conn._thread.daemon
    assert conn._connection is None and conn._running
    await conn
    assert isinstance(conn._connection, sqlite3.Connection)
    loop_thread = threading.get_ident()
    seen: list[int] = []
    await conn._execute(lambda: seen.append(threading.get_ident()))
    assert seen == [loop_thread]  # the override runs the call on the caller's thread
    await conn.close()
    assert conn._connection is None and not conn._running
    with pytest.raises(ValueError):
        await conn.execute("SELECT 1")
    await asyncio.sleep(0)


def test_a_plan_runs_on_the_sqlalchemy_connections_own_cursor() -> None:
    engine = create_engine("sqlite://")
    with engine.connect() as conn:
        assert isinstance(conn, Connection)
        assert isinstance(conn.connection.driver_connection, sqlite3.Connection)


def test_asyncpg_statements_carry_their_casts_in_the_text() -> None:
    """On PostgreSQL a plan is the compiled text and positional values: SQLAlchemy's asyncpg
    dialect renders each bound parameter's cast into the text (``$1::VARCHAR``) instead of
    setting input sizes per execution, and its DBAPI adapter takes ``numeric_dollar`` params."""
    dialect = postgresql_dialect.asyncpg.dialect()
    assert dialect.bind_typing is BindTyping.RENDER_CASTS
    assert dialect.paramstyle == "numeric_dollar"
    stmt = prepared(select(ConversationRow.__table__).where(ConversationRow.__table__.c.id == "x"))
    plan = make_plan(stmt, (), dialect)
    assert plan is not None and "$1::VARCHAR" in plan.sql and plan.args({}) == ("x",)
