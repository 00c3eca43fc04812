"""The fast path on PostgreSQL: a prepared statement runs on the cursor of SQLAlchemy's DBAPI
adapter over asyncpg, stores and reads back exactly what SQLAlchemy does, mixes with statements
only SQLAlchemy runs in one transaction (never run twice), raises SQLAlchemy's exceptions, and
keeps its plans apart from SQLite's in one process."""

from __future__ import annotations

import uuid
from datetime import datetime

import pytest
from sqlalchemy import Connection, insert, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import create_async_engine

from storage.db import Database, WriteContext
from storage.fastsql import plans_of
from storage.faults import fault_kind
from tests.conftest import PG_URL, drop_pg, make_pg
from tests.test_sqlite_fast_path import _CONV, _GET, _INSERT, _row


async def test_prepared_statements_store_and_read_back_what_sqlalchemy_does(pg_db: Database) -> None:
    await pg_db.write(lambda conn, _ctx: conn.execute(_INSERT, _row("conv-fast")))
    async with pg_db.sessions() as s, s.begin():
        await s.execute(insert(_CONV).values(**_row("conv-orm")))
    ids = ("conv-fast", "conv-orm")
    fast = await pg_db.read(lambda conn: [dict(conn.execute(_GET, {"id": i}).one()._mapping) for i in ids])
    async with pg_db.reader() as s:
        orm = [dict((await s.execute(select(_CONV).where(_CONV.c.id == i))).one()._mapping) for i in ids]
    for a, b in zip(fast, orm, strict=True):
        assert {k: v for k, v in a.items() if k != "id"} == {k: v for k, v in b.items() if k != "id"}
    assert fast[0]["meta"] == {"nested": {"a": [1, 2.5, None, "ü"]}}
    assert fast[0]["created_at"].replace(tzinfo=None) == datetime(2025, 6, 1, 12, 30, 15, 123456)
    plans = plans_of(_GET)
    assert plans is not None and {d for d, _keys in plans.by_keys} >= {"postgresql"}


async def test_a_write_mixing_prepared_and_other_statements_runs_once_in_one_transaction(pg_db: Database) -> None:
    calls: list[str] = []

    def fn(conn: Connection, _ctx: WriteContext, fail: bool) -> str:
        calls.append(type(conn).__name__)
        conn.execute(_INSERT, _row("conv-mixed"))
        conn.execute(insert(_CONV).values(**{**_row("conv-mixed-2"), "external_ref": "ref-2"}))
        if fail:
            raise RuntimeError("after both statements")
        return "done"

    with pytest.raises(RuntimeError):
        await pg_db.write(lambda conn, ctx: fn(conn, ctx, True))
    assert calls == ["FastConnection"]
    ids_of = select(_CONV.c.id).order_by(_CONV.c.id)
    assert await pg_db.read(lambda conn: conn.execute(ids_of).all()) == []
    assert await pg_db.write(lambda conn, ctx: fn(conn, ctx, False)) == "done"
    ids = await pg_db.read(lambda conn: [r[0] for r in conn.execute(ids_of).all()])
    assert ids == ["conv-mixed", "conv-mixed-2"]


async def test_a_driver_error_is_sqlalchemys_and_rolls_the_whole_write_back(pg_db: Database) -> None:
    await pg_db.write(lambda conn, _ctx: conn.execute(_INSERT, _row("conv-dup")))

    def twice(conn: Connection, _ctx: WriteContext) -> None:
        conn.execute(_INSERT, {**_row("conv-new"), "external_ref": "x"})
        conn.execute(_INSERT, _row("conv-dup"))

    with pytest.raises(IntegrityError) as caught:
        await pg_db.write(twice)
    assert not caught.value.connection_invalidated
    assert await pg_db.read(lambda conn: conn.execute(_GET, {"id": "conv-new"}).first()) is None
    # The connection went back to the pool whole: the next write on it works.
    await pg_db.write(lambda conn, _ctx: conn.execute(_INSERT, _row("conv-after")))
    assert await pg_db.read(lambda conn: conn.execute(_GET, {"id": "conv-after"}).one()) is not None


async def test_a_connection_the_server_ended_is_an_outage_and_never_handed_out_again() -> None:
    """The server ends the one pooled connection; the next prepared read (autocommit: nothing
    but it reaches the server) fails as SQLAlchemy fails a lost connection — invalidated, an
    outage to :func:`storage.faults.fault_kind` — and the read after it gets a new connection."""
    if not PG_URL:
        pytest.skip("SIGNOFF_TEST_PG_URL not set")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    await (await make_pg(schema)).dispose()  # the schema and its tables
    engine = create_async_engine(
        PG_URL, connect_args={"server_settings": {"search_path": schema}}, pool_size=1, max_overflow=0
    )
    db = Database.of(engine)
    try:
        pid = await db.read(lambda conn: conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        admin = create_async_engine(PG_URL)
        async with admin.begin() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        await admin.dispose()
        with pytest.raises(DBAPIError) as caught:
            await db.read(lambda conn: conn.execute(_GET, {"id": "conv-x"}).first())
        assert caught.value.connection_invalidated and fault_kind(caught.value) is not None
        assert await db.read(lambda conn: conn.execute(_GET, {"id": "conv-x"}).first()) is None
        assert await db.read(lambda conn: conn.execute(text("SELECT pg_backend_pid()")).scalar_one()) != pid
    finally:
        await db.dispose()
        await drop_pg(schema)
