"""The SQLite fast path (storage/inline.py, storage/fastsql.py): statements on the event loop's
thread, a busy file never blocks the loop, prepared statements store and read back exactly what
SQLAlchemy does, and a function the raw path cannot run is run once, through SQLAlchemy."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, bindparam, insert, select, text

from storage.db import Database, WriteContext
from storage.fastsql import prepared
from storage.inline import InlineConnection
from storage.models import ConversationRow
from tests.conftest import make_sqlite

_CONV = ConversationRow.__table__
_INSERT = prepared(insert(_CONV))
_GET = prepared(select(_CONV).where(_CONV.c.id == bindparam("id")))


def _row(cid: str) -> dict[str, Any]:
    now = datetime(2025, 6, 1, 12, 30, 15, 123456, tzinfo=UTC)
    return {
        "id": cid,
        "channel": "api",
        "external_ref": None,
        "principal_kind": "customer",
        "principal_id": "C-1",
        "customer_id": "C-1",
        "status": "open",
        "loaded_groups": ["orders", "billing"],
        "model": "m",
        "prompt_version": "p",
        "next_seq": 0,
        "meta": {"nested": {"a": [1, 2.5, None, "ü"]}},
        "created_at": now,
        "updated_at": now,
    }


async def _hold_write_lock(path: Path, loop_ran: asyncio.Event, db_call: Any) -> tuple[Any, int]:
    """Another connection holds the write lock until the event loop has run while ``db_call``
    waits for it; returns what ``db_call`` returned and how often the loop ticked meanwhile."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    ticks = 0

    async def heartbeat() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            if ticks >= 3:
                loop_ran.set()
            await asyncio.sleep(0)

    def release() -> None:  # from a thread, once the loop was seen running meanwhile
        other.execute("COMMIT")
        other.close()

    beat = asyncio.create_task(heartbeat())
    call = asyncio.create_task(db_call())
    await asyncio.wait_for(loop_ran.wait(), timeout=30)
    await asyncio.to_thread(release)
    result = await asyncio.wait_for(call, timeout=30)
    beat.cancel()
    return result, ticks


async def test_a_busy_file_sends_the_step_write_to_the_thread_without_blocking_the_loop(tmp_path: Path) -> None:
    db = await make_sqlite(tmp_path / "t.db")
    try:
        assert db.sync_writer is not None
        before = db.sync_writer.handoffs
        loop_ran = asyncio.Event()

        def insert_row(conn: Connection, _ctx: WriteContext) -> str:
            conn.execute(_INSERT, _row("conv-busy"))
            return "written"

        async def write() -> str:
            return await db.write(insert_row)

        result, ticks = await _hold_write_lock(tmp_path / "t.db", loop_ran, write)
        assert result == "written"
        assert ticks >= 3  # the loop kept running while the write waited for the lock
        assert db.sync_writer.handoffs == before + 1
        row = await db.read(lambda conn: conn.execute(_GET, {"id": "conv-busy"}).first())
        assert row is not None
    finally:
        await db.dispose()


async def test_a_busy_file_sends_an_orm_statement_to_its_thread_without_blocking_the_loop(tmp_path: Path) -> None:
    db = await make_sqlite(tmp_path / "t.db")
    try:
        async with db.sessions() as s, s.begin():  # the pool's connection exists before the lock is taken
            await s.execute(text("SELECT 1"))
        before = InlineConnection.handoffs
        loop_ran = asyncio.Event()

        async def session_write() -> str:
            async with db.sessions() as s, s.begin():
                await s.execute(insert(_CONV).values(**_row("conv-orm")))
            return "written"

        result, ticks = await _hold_write_lock(tmp_path / "t.db", loop_ran, session_write)
        assert result == "written" and ticks >= 3
        assert InlineConnection.handoffs > before
        async with db.reader() as s:
            assert (await s.execute(select(_CONV.c.id).where(_CONV.c.id == "conv-orm"))).scalar_one() == "conv-orm"
    finally:
        await db.dispose()


async def test_prepared_statements_store_and_read_back_what_sqlalchemy_does(db: Database) -> None:
    await db.write(lambda conn, _ctx: conn.execute(_INSERT, _row("conv-fast")))
    async with db.sessions() as s, s.begin():
        await s.execute(insert(_CONV).values(**_row("conv-orm")))
    ids = ("conv-fast", "conv-orm")
    fast = await db.read(lambda conn: [conn.execute(_GET, {"id": i}).one()._mapping for i in ids])
    async with db.reader() as s:
        orm = [
            dict((await s.execute(select(_CONV).where(_CONV.c.id == i))).one()._mapping)
            for i in ("conv-fast", "conv-orm")
        ]
    for a, b in zip(fast, orm, strict=True):
        assert {k: v for k, v in a.items() if k != "id"} == {k: v for k, v in b.items() if k != "id"}
    assert fast[0]["meta"] == {"nested": {"a": [1, 2.5, None, "ü"]}}
    assert fast[0]["created_at"].replace(tzinfo=None) == datetime(2025, 6, 1, 12, 30, 15, 123456)


async def test_a_write_mixing_prepared_and_other_statements_runs_once_in_one_transaction(db: Database) -> None:
    """A prepared statement, then one only SQLAlchemy runs, then a failure: the function ran
    once (never again from the start), on one connection, and both rows rolled back together;
    without the failure both rows exist once."""
    calls: list[str] = []

    def fn(conn: Connection, ctx: WriteContext, fail: bool) -> str:
        calls.append(type(conn).__name__)
        conn.execute(_INSERT, _row("conv-mixed"))
        conn.execute(insert(_CONV).values(**{**_row("conv-mixed-2"), "external_ref": "ref-2"}))
        if fail:
            raise RuntimeError("after both statements")
        return "done"

    try:
        await db.write(lambda conn, ctx: fn(conn, ctx, True))
    except RuntimeError:
        pass
    else:
        raise AssertionError("the failure must reach the caller")
    assert calls == ["FastConnection"]
    ids_of = select(_CONV.c.id).order_by(_CONV.c.id)
    assert await db.read(lambda conn: conn.execute(ids_of).all()) == []
    assert await db.write(lambda conn, ctx: fn(conn, ctx, False)) == "done"
    assert calls == ["FastConnection", "FastConnection"]
    ids = await db.read(lambda conn: [r[0] for r in conn.execute(ids_of).all()])
    assert ids == ["conv-mixed", "conv-mixed-2"]


async def test_an_integrity_error_on_the_raw_path_is_sqlalchemys_and_rolls_back(db: Database) -> None:
    from sqlalchemy.exc import IntegrityError

    await db.write(lambda conn, _ctx: conn.execute(_INSERT, _row("conv-dup")))

    def twice(conn: Connection, _ctx: WriteContext) -> None:
        conn.execute(_INSERT, {**_row("conv-new"), "external_ref": "x"})
        conn.execute(_INSERT, _row("conv-dup"))

    try:
        await db.write(twice)
    except IntegrityError:
        pass
    else:
        raise AssertionError("a duplicate key must raise IntegrityError")
    assert await db.read(lambda conn: conn.execute(_GET, {"id": "conv-new"}).first()) is None


async def test_a_read_leaves_no_snapshot_behind(tmp_path: Path) -> None:
    """After ``Database.read`` returns, its connection holds no read transaction: a checkpoint
    of the whole WAL completes (a kept snapshot made the WAL grow and every step slow)."""
    db = await make_sqlite(tmp_path / "t.db")
    try:
        await db.write(lambda conn, _ctx: conn.execute(_INSERT, _row("conv-1")))
        assert await db.read(lambda conn: conn.execute(_GET, {"id": "conv-1"}).first()) is not None
        assert db.sync_writer is not None  # its own checkpoint (after the write) has finished
        await asyncio.wrap_future(db.sync_writer._pool.submit(lambda: None))
        other = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
        try:
            busy, _log, _done = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            other.close()
        assert busy == 0
    finally:
        await db.dispose()


def _wal_frames(path: Path) -> int:
    """Frames in the WAL now (a passive checkpoint from another connection reports them)."""
    other = sqlite3.connect(path, isolation_level=None)
    try:
        _busy, log, _done = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        other.close()
    return int(log)


async def test_the_wal_is_checkpointed_on_the_writers_thread_never_in_a_commit_on_the_loop(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The loop's connections never checkpoint when they commit (the copy and its fsync held the
    loop); the writer checkpoints on its own thread, so the WAL starts over and stays small."""
    import storage.sqlite

    db = await make_sqlite(tmp_path / "t.db")
    writer = db.sync_writer
    assert writer is not None
    try:
        monkeypatch.setattr(storage.sqlite, "CHECKPOINT_EVERY_S", 3600.0)
        writer._checkpoint_due = float("inf")  # none yet: the WAL grows
        for n in range(60):
            await db.write(lambda conn, _ctx, n=n: conn.execute(_INSERT, _row(f"conv-{n}")))
        driver = writer._kept("writer").connection.driver_connection
        assert driver is not None and driver.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        threads: list[str] = []
        checkpoint = writer._checkpoint

        def spied() -> None:
            import threading

            threads.append(threading.current_thread().name)
            checkpoint()

        monkeypatch.setattr(writer, "_checkpoint", spied)
        writer._checkpoint_due = 0.0
        await db.write(lambda conn, _ctx: conn.execute(_INSERT, _row("conv-last")))
        await asyncio.wrap_future(writer._pool.submit(lambda: None))  # the checkpoint has run
        assert threads and threads[0].startswith("signoff-sqlite-writer")
        await db.write(lambda conn, _ctx: conn.execute(_INSERT, _row("conv-after")))  # the WAL starts over
        assert _wal_frames(tmp_path / "t.db") <= 12  # one write's frames (the 61 before: hundreds)
    finally:
        await db.dispose()
