"""Named locks across processes: a customer's money actions run one at a time.

PostgreSQL: a transaction-scoped advisory lock on one connection, with a bounded wait;
SQLite: a lease row in ``locks`` that a dead holder gives back. Within a process, waiters
for one name queue on an in-process lock first. This module holds no ledger state.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, cast

from sqlalchemy import Connection, CursorResult, Table, bindparam, delete, select, text
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.db import Database
from storage.fastsql import prepared
from storage.holders import is_dead, process_id
from storage.models import LockRow
from storage.records import wall_clock

_LOCKS: Table = LockRow.__table__  # type: ignore[assignment]
#: A lease outlives any judgement plus execution (tool timeouts are seconds); a dead holder's expires.
LEASE_S = 120.0


class LockBusy(TimeoutError):
    """The lock ``name`` stayed held by someone else for the whole bounded wait.

    Recoverable: nothing was judged or executed under it, so the caller answers "busy, try
    again" (a :class:`TimeoutError`, as the SQLite lease wait always raised).
    """

    def __init__(self, name: str, waited_s: float) -> None:
        super().__init__(f"lock {name} is busy (waited {waited_s:g}s); try again")
        self.name = name
        self.waited_s = waited_s


#: How long a money action waits for its customer's lock before :class:`LockBusy`.
LOCK_WAIT_S = 30.0


class Locks:
    """Named exclusive locks over ``db`` (one instance per process and database)."""

    def __init__(self, db: Database, *, lock_wait_s: float = LOCK_WAIT_S) -> None:
        self.db = db
        self.lock_wait_s = lock_wait_s
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        #: Holders at once in this process (PostgreSQL): each holds a connection for its lock and
        #: needs another for its work, so at most half the pool's kept connections hold locks —
        #: a pool full of holders, each waiting for a second connection, would wait out its timeout.
        size = getattr(db.engine.pool, "size", None)
        self.max_holders = max(1, size() // 2) if callable(size) else None
        self._holders: asyncio.Semaphore | None = None

    def _local(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    @asynccontextmanager
    async def exclusive(self, name: str, *, wait_s: float | None = None) -> AsyncIterator[None]:
        """Hold the lock ``name`` (e.g. ``money:C-7``) while a decision is made and carried out.

        Within a process, waiters for one name queue on an in-process lock first, so a
        customer's queue never holds more than one database connection and cannot starve the
        pool for everyone else. Across processes, PostgreSQL: a transaction-scoped advisory
        lock (``pg_advisory_xact_lock``) on that one connection, waited for at most
        ``wait_s`` (``lock_timeout``) and released when the transaction ends, whatever
        happens (an error, a cancellation, a lost connection). SQLite: a lease row in
        ``locks``. A wait that runs out raises :class:`LockBusy`.
        """
        if not self.db.is_postgres:
            async with self._local(name), self._lease(name):
                yield
            return
        wait = self.lock_wait_s if wait_s is None else wait_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        lock = self._local(name)
        try:
            async with asyncio.timeout(wait):
                await lock.acquire()
        except TimeoutError:
            raise LockBusy(name, wait) from None
        try:
            async with self._holder(name, deadline, wait), self._pg_xact_lock(name, deadline, wait):
                yield
        finally:
            lock.release()

    @asynccontextmanager
    async def _holder(self, name: str, deadline: float, wait: float) -> AsyncIterator[None]:
        """A place among the process's :attr:`max_holders` (waited for within the lock's wait)."""
        if self.max_holders is None:
            yield
            return
        if self._holders is None:
            self._holders = asyncio.Semaphore(self.max_holders)
        holders = self._holders
        try:
            async with asyncio.timeout(max(0.001, deadline - asyncio.get_running_loop().time())):
                await holders.acquire()
        except TimeoutError:
            raise LockBusy(name, wait) from None
        try:
            yield
        finally:
            holders.release()

    @asynccontextmanager
    async def _pg_xact_lock(self, name: str, deadline: float, wait: float) -> AsyncIterator[None]:
        key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
        remaining = max(0.001, deadline - asyncio.get_running_loop().time())
        try:
            async with asyncio.timeout(remaining):
                conn = await self.db.engine.connect()
        except TimeoutError:
            raise LockBusy(name, wait) from None
        try:
            # Both local to this transaction: ending it (commit, rollback, or the pool's reset of a
            # connection closed mid-wait) releases the lock; a dropped session releases it too.
            remaining_ms = max(1, int((deadline - asyncio.get_running_loop().time()) * 1000))
            await conn.execute(text("SELECT set_config('lock_timeout', :t, true)"), {"t": f"{remaining_ms}ms"})
            try:
                await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
            except DBAPIError as exc:
                if _lock_not_available(exc):
                    raise LockBusy(name, wait) from None
                raise
            yield
        finally:
            await asyncio.shield(_close(conn))

    @asynccontextmanager
    async def _lease(self, name: str, *, lease_s: float = LEASE_S, wait_s: float = 60.0) -> AsyncIterator[None]:
        """A lease row: insert to take it, delete to give it back; an expired one (its holder
        died) is taken over. Waits up to ``wait_s`` for a live holder."""
        holder = f"{process_id()}:{uuid.uuid4().hex[:6]}"
        deadline = asyncio.get_running_loop().time() + wait_s
        while not await self.db.write(lambda conn, _ctx: _take_lease(conn, name, holder, lease_s)):
            if asyncio.get_running_loop().time() > deadline:
                raise LockBusy(name, wait_s)
            await asyncio.sleep(0.01)
        try:
            yield
        finally:
            await self.db.write(lambda conn, _ctx: conn.execute(_GIVE_BACK, {"n": name, "h": holder}))


def _take_lease(conn: Connection, name: str, holder: str, lease_s: float) -> bool:
    # Real time, never the injected clock: other processes (with their own clocks) read these leases.
    now = wall_clock()
    conn.execute(_DROP_EXPIRED, {"n": name, "now": now})
    current = conn.execute(_HOLDER, {"n": name}).scalar_one_or_none()
    if current is not None and is_dead(current):
        # A SQLite file is shared by processes on one host: a holder that no longer runs
        # (killed mid-action) gives its lease back now rather than at expiry.
        conn.execute(_GIVE_BACK, {"n": name, "h": current})
    taken = conn.execute(_TAKE, {"name": name, "holder": holder, "expires_at": now + timedelta(seconds=lease_s)})
    return bool(cast(CursorResult[Any], taken).rowcount == 1)


# The lease's statements, built once (storage.fastsql).
_AT = _LOCKS.c.expires_at.type
_DROP_EXPIRED = prepared(
    delete(_LOCKS).where(_LOCKS.c.name == bindparam("n"), _LOCKS.c.expires_at < bindparam("now", type_=_AT))
)
_HOLDER = prepared(select(_LOCKS.c.holder).where(_LOCKS.c.name == bindparam("n")))
_GIVE_BACK = prepared(delete(_LOCKS).where(_LOCKS.c.name == bindparam("n"), _LOCKS.c.holder == bindparam("h")))
_TAKE = prepared(sqlite_insert(_LOCKS).on_conflict_do_nothing(index_elements=["name"]))


def _lock_not_available(exc: DBAPIError) -> bool:
    """SQLSTATE 55P03: ``lock_timeout`` ran out."""
    orig = exc.orig
    code = getattr(orig, "sqlstate", None) or getattr(getattr(orig, "__cause__", None), "sqlstate", None)
    return code == "55P03" or "lock timeout" in str(exc)


async def _close(conn: AsyncConnection) -> None:
    """End the lock's transaction and give the connection back; a connection that cannot be
    rolled back is invalidated (its session ends, and the server releases the lock)."""
    try:
        await conn.rollback()
    except Exception:
        with contextlib.suppress(Exception):
            await conn.invalidate()
    with contextlib.suppress(Exception):
        await conn.close()
