"""The per-customer money lock holds across processes on one SQLite file: two runtimes
(two engines, as `signoff serve` and `signoff worker` would have) queue for it, and a
lease left by a dead holder expires instead of blocking forever. On PostgreSQL one
customer's queue holds one connection (never the pool), waits are bounded (LockBusy),
and neither an error nor a cancellation leaks the lock or its connection."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from sandbox.schema import upgrade
from storage.db import Database, create_database
from storage.locks import LockBusy, Locks
from tests.conftest import PG_URL


async def test_two_processes_on_one_sqlite_file_take_turns(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'lock.db'}"
    await upgrade(url)
    a, b = create_database(url), create_database(url)
    try:
        inside: list[str] = []
        overlaps = 0

        async def hold(locks: Locks, who: str) -> None:
            nonlocal overlaps
            for _ in range(5):
                async with locks.exclusive("money:C-7"):
                    if inside:
                        overlaps += 1
                    inside.append(who)
                    await asyncio.sleep(0.005)
                    inside.remove(who)

        await asyncio.gather(hold(Locks(a), "serve"), hold(Locks(b), "worker"))
        assert overlaps == 0
    finally:
        await a.dispose()
        await b.dispose()


async def test_a_dead_holders_lease_expires(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'lock.db'}"
    await upgrade(url)
    db = create_database(url)
    try:
        locks = Locks(db)
        dead = locks._lease("money:C-8", lease_s=0.05)
        await dead.__aenter__()  # taken and never released: the holder "died"
        await asyncio.sleep(0.1)
        async with asyncio.timeout(5):
            async with locks._lease("money:C-8", wait_s=2):
                pass
    finally:
        await db.dispose()


async def test_a_killed_holders_lease_is_taken_over_at_once(tmp_path: Path) -> None:
    """A process killed while holding the lock (SIGKILL mid-refund) does not block the customer's
    money actions until expiry: its lease names a pid that no longer runs."""
    import sys

    from sqlalchemy import insert

    from storage.holders import _HOST
    from storage.models import LockRow

    url = f"sqlite+aiosqlite:///{tmp_path / 'lock.db'}"
    await upgrade(url)
    db = create_database(url)
    try:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
        await proc.wait()
        pid = proc.pid  # a pid that no longer runs
        from datetime import UTC, datetime, timedelta

        await db.write(
            lambda conn, _ctx: conn.execute(
                insert(LockRow.__table__).values(
                    name="money:C-9", holder=f"{_HOST}:{pid}:dead", expires_at=datetime.now(UTC) + timedelta(hours=1)
                )
            )
        )
        async with asyncio.timeout(5):
            async with Locks(db)._lease("money:C-9", wait_s=1):
                pass
    finally:
        await db.dispose()


# -- PostgreSQL: one connection per customer queue, bounded waits, no leaks ------------------

GUARD_S = 20  # a hang guard only: every wait below ends on an event, never on a clock


def small_pool_db(pool_size: int = 5, *, pool_timeout: float = 30.0) -> Database:
    """PostgreSQL with a pool far smaller than the queue (advisory locks need no tables)."""
    if not PG_URL:
        pytest.skip("SIGNOFF_TEST_PG_URL not set")
    return Database.of(create_async_engine(PG_URL, pool_size=pool_size, max_overflow=0, pool_timeout=pool_timeout))


async def fifty_for_one_customer_then_another(locks: Locks) -> tuple[list[str], int]:
    """A0 holds C-A's lock while A1..A49 queue behind it; then C-B's lock is taken and released
    while A0 still holds. Returns the order things got the lock and the connections the pool had
    out while B held its lock."""
    order: list[str] = []
    a0_in, release, b_in = asyncio.Event(), asyncio.Event(), asyncio.Event()
    checked_out = -1

    async def a(i: int) -> None:
        async with locks.exclusive("money:C-A"):
            order.append(f"A{i}")
            if i == 0:
                a0_in.set()
                await release.wait()

    async def b() -> None:
        nonlocal checked_out
        async with locks.exclusive("money:C-B"):
            order.append("B")
            if locks.db.is_postgres:
                checked_out = locks.db.engine.pool.checkedout()  # type: ignore[attr-defined]
        b_in.set()

    async with asyncio.timeout(GUARD_S):
        first = asyncio.create_task(a(0))
        await a0_in.wait()
        queue = [asyncio.create_task(a(i)) for i in range(1, 50)]
        await asyncio.sleep(0)  # every A task runs up to its wait before B starts
        other = asyncio.create_task(b())
        await b_in.wait()  # B got its lock and gave it back while A0 holds C-A's
        assert order[:2] == ["A0", "B"]
        release.set()
        await asyncio.gather(first, *queue, other)
    return order, checked_out


async def test_fifty_waiters_for_one_customer_do_not_block_another_on_postgres() -> None:
    """With a pool of 5, fifty queued actions for C-A hold one connection between them (not one
    each), so C-B's lock is acquired while C-A's holder still works; C-A's run one at a time."""
    db = small_pool_db(5)
    try:
        order, checked_out = await fifty_for_one_customer_then_another(Locks(db))
        assert order[1] == "B" and sorted(order[2:], key=lambda x: int(x[1:])) == [f"A{i}" for i in range(1, 50)]
        assert checked_out == 2  # A0's connection and B's: the 49 waiters hold none
        assert db.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        await db.dispose()


async def test_fifty_waiters_for_one_customer_do_not_block_another_on_sqlite(tmp_path: Path) -> None:
    """SQLite is unchanged: the same queue, the other customer's lock taken while C-A's is held."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'lock.db'}"
    await upgrade(url)
    db = create_database(url)
    try:
        order, _ = await fifty_for_one_customer_then_another(Locks(db))
        assert order[:2] == ["A0", "B"] and len(order) == 51
    finally:
        await db.dispose()


async def test_the_lock_holds_across_replicas_and_a_bounded_wait_raises_lock_busy() -> None:
    """Two engines (two replicas) exclude each other; a waiter whose wait runs out gets LockBusy
    (a TimeoutError: "busy, try again"), holds no connection, and the lock still works after."""
    one, two = small_pool_db(2), small_pool_db(2)
    try:
        held, release = asyncio.Event(), asyncio.Event()

        async def holder() -> None:
            async with Locks(one).exclusive("money:C-7"):
                held.set()
                await release.wait()

        async with asyncio.timeout(GUARD_S):
            task = asyncio.create_task(holder())
            await held.wait()
            with pytest.raises(LockBusy) as info:
                async with Locks(two, lock_wait_s=0.2).exclusive("money:C-7"):
                    raise AssertionError("got a lock that another replica holds")
            assert isinstance(info.value, TimeoutError) and info.value.name == "money:C-7"
            assert two.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
            release.set()
            await task
            async with Locks(two, lock_wait_s=5).exclusive("money:C-7"):
                pass
    finally:
        await one.dispose()
        await two.dispose()


async def test_a_cancelled_waiter_and_a_cancelled_holder_leak_neither_lock_nor_connection() -> None:
    """Cancelling a task that waits on PostgreSQL, or one that holds the lock, gives the
    connection back and the lock up: the next taker gets it."""
    one, two = small_pool_db(2), small_pool_db(2)
    try:
        held = asyncio.Event()

        async def hold_forever(db: Database) -> None:
            async with Locks(db).exclusive("money:C-9"):
                held.set()
                await asyncio.Event().wait()

        async with asyncio.timeout(GUARD_S):
            holder = asyncio.create_task(hold_forever(one))
            await held.wait()
            waiting = asyncio.create_task(hold_forever(two))
            # The pool is outside our code's events: poll it until the waiter waits on the server.
            while two.engine.pool.checkedout() == 0:  # type: ignore[attr-defined]  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert two.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
            holder.cancel()
            with pytest.raises(asyncio.CancelledError):
                await holder
            assert one.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
            async with Locks(two, lock_wait_s=5).exclusive("money:C-9"):
                pass
    finally:
        await one.dispose()
        await two.dispose()


async def test_an_error_inside_the_lock_releases_it(tmp_path: Path) -> None:
    """An exception in the locked block propagates and the lock is free afterwards."""
    db = small_pool_db(2)
    try:
        locks = Locks(db, lock_wait_s=5)
        with pytest.raises(ZeroDivisionError):
            async with locks.exclusive("money:C-1"):
                1 / 0  # noqa: B018
        async with asyncio.timeout(GUARD_S):
            async with Locks(small := small_pool_db(1), lock_wait_s=5).exclusive("money:C-1"):
                pass
        await small.dispose()
    finally:
        await db.dispose()


async def test_holders_of_many_customers_never_take_the_connections_their_work_needs() -> None:
    """Each holder keeps a connection for its lock and needs a second for its work: with a pool of
    4, at most 2 hold at once, so 12 customers' actions at once all finish (a pool full of holders
    waited out the pool's timeout, and the replica answered 503)."""
    db = small_pool_db(4, pool_timeout=5)
    locks = Locks(db)
    assert locks.max_holders == 2
    at_once = peak = 0

    async def action(i: int) -> None:
        nonlocal at_once, peak
        async with locks.exclusive(f"money:C-{i}"):
            at_once += 1
            peak = max(peak, at_once)
            await asyncio.sleep(0.05)  # the judgement, with other holders arriving meanwhile
            assert await db.read(lambda conn: conn.exec_driver_sql("SELECT 1").scalar_one()) == 1
            at_once -= 1

    try:
        async with asyncio.timeout(GUARD_S):
            await asyncio.gather(*(action(i) for i in range(12)))
        assert peak == 2
        assert db.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        await db.dispose()
