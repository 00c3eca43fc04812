"""The SQLite write gate: this process's writers queue on it instead of SQLite's sleeping busy handler.

It must serialise every writer of one file (async sessions, the stdlib writer thread, two
engines on the same file), and it must always be given back: after commit, rollback, an
exception, or a task cancelled in the middle of its transaction.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import text

from storage.db import create_database, gate_for
from storage.migrate import upgrade


@pytest.fixture
async def url(tmp_path: Path) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'gate.db'}"
    await upgrade(url)
    return url


def _path(url: str) -> str:
    return url.partition(":///")[2]


async def test_writers_of_every_kind_queue_and_all_commit(url: str) -> None:
    a, b = create_database(url), create_database(url)
    try:
        async with a.sessions() as s, s.begin():
            await s.execute(text("CREATE TABLE t (who TEXT, n INTEGER)"))
        inside = 0
        overlaps = 0

        async def session_writer(db, who: str) -> None:  # type: ignore[no-untyped-def]
            nonlocal inside, overlaps
            for n in range(20):
                async with db.sessions() as s, s.begin():
                    await s.execute(text("INSERT INTO t VALUES (:w, :n)"), {"w": who, "n": n})  # BEGIN IMMEDIATE
                    inside += 1
                    overlaps += inside > 1
                    await asyncio.sleep(0)  # hand the loop to the others mid-transaction
                    await s.execute(text("INSERT INTO t VALUES (:w, :n)"), {"w": who, "n": -n})
                    inside -= 1

        async def thread_writer(db, who: str) -> None:  # type: ignore[no-untyped-def]
            for n in range(20):
                await db.write(
                    lambda conn, _ctx, n=n: conn.execute(text("INSERT INTO t VALUES (:w, :n)"), {"w": who, "n": n})
                )

        await asyncio.gather(
            session_writer(a, "a1"),
            session_writer(a, "a2"),
            session_writer(b, "b1"),
            thread_writer(a, "w"),
            thread_writer(b, "v"),
        )
        assert overlaps == 0
        async with a.reader() as s:
            assert (await s.execute(text("SELECT count(*) FROM t"))).scalar_one() == 3 * 40 + 2 * 20
        assert gate_for(_path(url)).try_take()  # nobody kept it
        gate_for(_path(url)).give_back()
    finally:
        await a.dispose()
        await b.dispose()


async def test_the_gate_comes_back_after_rollback_error_and_cancellation(url: str) -> None:
    db = create_database(url)
    gate = gate_for(_path(url))
    gate.wait_s = 5.0
    try:
        async with db.sessions() as s, s.begin():
            await s.execute(text("CREATE TABLE u (n INTEGER)"))

        with pytest.raises(RuntimeError):
            async with db.sessions() as s, s.begin():
                await s.execute(text("INSERT INTO u VALUES (1)"))
                raise RuntimeError("the caller failed mid-transaction")

        entered = asyncio.Event()

        async def stuck() -> None:
            async with db.sessions() as s, s.begin():
                await s.execute(text("INSERT INTO u VALUES (2)"))
                entered.set()
                await asyncio.sleep(60)

        task = asyncio.create_task(stuck())
        await entered.wait()
        assert not gate.try_take()  # held by the stuck transaction
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        with pytest.raises(ZeroDivisionError):
            await db.write(lambda conn, _ctx: (conn.execute(text("INSERT INTO u VALUES (3)")), 1 / 0))

        async with asyncio.timeout(10):
            async with db.sessions() as s, s.begin():
                await s.execute(text("INSERT INTO u VALUES (4)"))
            await db.write(lambda conn, _ctx: conn.execute(text("INSERT INTO u VALUES (5)")))
        async with db.reader() as s:
            assert (await s.execute(text("SELECT n FROM u ORDER BY n"))).scalars().all() == [4, 5]
        assert gate.try_take()
        gate.give_back()
    finally:
        gate.wait_s = 30.0
        await db.dispose()


async def test_a_reader_never_takes_the_gate(url: str) -> None:
    db = create_database(url)
    gate = gate_for(_path(url))
    try:
        async with db.sessions() as s, s.begin():
            await s.execute(text("CREATE TABLE r (n INTEGER)"))
            async with db.reader() as r, r.begin():  # WAL: a reader runs beside the one writer
                assert (await r.execute(text("SELECT count(*) FROM jobs"))).scalar_one() == 0
            assert not gate.try_take()  # the writer holds it; the reader came and went without it
        async with db.reader() as r, r.begin():
            await r.execute(text("SELECT count(*) FROM r"))
            assert gate.try_take()
            gate.give_back()
    finally:
        await db.dispose()
