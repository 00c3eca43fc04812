"""Per-conversation leases across processes: one turn of a conversation at a time, whichever
replica or worker runs it.

Within a process, waiters for one conversation queue on an in-process lock first, so a
conversation never costs more than one lease (and never more than one database statement at
a time). Across processes:

* PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock``) taken on one dedicated
  connection per :class:`Leases` (not a pool connection: a thousand turns in flight hold no
  connections). The lock lives exactly as long as the holder's session, so a long turn keeps it
  without renewing, and a holder that dies (SIGKILL, a lost host once TCP keepalives give up)
  gives it back when the server ends its session. One statement takes it, one gives it back.
* SQLite (several processes may share one file on one host): a lease row in ``locks``
  (``conv:<id>``), taken by one upsert that only wins over an expired row and given back by one
  delete. A holder whose process no longer runs is taken over at once (:func:`is_dead`); a live
  holder renews its lease on a timer while its turn lasts, so a slow model keeps it.

A wait that runs out raises :class:`~storage.locks.LockBusy` (the runtime answers ``Busy``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import uuid
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

from sqlalchemy import Connection, CursorResult, Table, bindparam, delete, event, select, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from storage.db import Database, WriteContext, WriteFn
from storage.fastsql import prepared
from storage.holders import is_dead, process_id
from storage.locks import LockBusy
from storage.models import LockRow
from storage.records import wall_clock

if TYPE_CHECKING:
    import asyncpg

log = logging.getLogger(__name__)
T = TypeVar("T")

_LOCKS: Table = LockRow.__table__  # type: ignore[assignment]

#: How long a turn waits for its conversation before :class:`LockBusy`.
WAIT_S = 60.0
#: A SQLite lease's life without renewal; a live holder renews it every third of this.
LEASE_S = 60.0
#: Polling a lease held elsewhere: the first pause, doubling up to the last.
_POLL_FIRST_S, _POLL_MAX_S = 0.005, 0.1
#: The server ends a session whose host vanished after about idle + interval x count seconds.
_KEEPALIVES = {"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3"}


def lease_key(name: str) -> int:
    """The advisory-lock key of ``name`` (a signed 64-bit hash, as :mod:`storage.locks` uses)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class Leases:
    """Conversation leases over ``db`` (one instance per runtime; see the module docstring)."""

    def __init__(self, db: Database, *, wait_s: float = WAIT_S, lease_s: float = LEASE_S) -> None:
        self.db = db
        self.wait_s = wait_s
        self.lease_s = lease_s
        self._local: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._pg = _PgSession(db) if db.is_postgres else None

    def _lock_for(self, name: str) -> asyncio.Lock:
        lock = self._local.get(name)
        if lock is None:
            lock = self._local[name] = asyncio.Lock()
        return lock

    @asynccontextmanager
    async def hold(
        self,
        conversation_id: str,
        *,
        wait_s: float | None = None,
        first: WriteFn[T] | None = None,
    ) -> AsyncIterator[T | None]:
        """Hold conversation ``conversation_id`` for one turn, waiting at most ``wait_s``
        (default :data:`WAIT_S`) for the local queue and then for another process.

        ``first`` (a :meth:`Database.write` function) runs once the lease is held, and its
        result is what the context yields: on SQLite in the very transaction that takes the
        lease row (one commit; ``first`` raising rolls the lease back with it), on PostgreSQL
        in a transaction of its own once the advisory lock is held."""
        name = f"conv:{conversation_id}"
        wait = self.wait_s if wait_s is None else wait_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        local = self._lock_for(name)
        try:
            async with asyncio.timeout(wait):
                await local.acquire()
        except TimeoutError:
            raise LockBusy(name, wait) from None
        try:
            if self._pg is not None:
                async with self._pg.hold(name, deadline, wait):
                    yield await self.db.write(first) if first is not None else None
            else:
                async with self._sqlite_lease(name, deadline, wait, first) as result:
                    yield result
        finally:
            local.release()

    # -- SQLite: a lease row ---------------------------------------------------------------
    @asynccontextmanager
    async def _sqlite_lease(
        self, name: str, deadline: float, wait: float, first: WriteFn[T] | None
    ) -> AsyncIterator[T | None]:
        holder = f"{process_id()}:{uuid.uuid4().hex[:6]}"
        loop = asyncio.get_running_loop()
        pause = _POLL_FIRST_S

        def take(conn: Connection, ctx: WriteContext) -> tuple[bool, T | None]:
            if not _take(conn, name, holder, self.lease_s):
                return False, None
            return True, first(conn, ctx) if first is not None else None

        while not (taken := await self.db.write(take))[0]:
            if loop.time() + pause > deadline:
                raise LockBusy(name, wait)
            await asyncio.sleep(pause)
            pause = min(pause * 2, _POLL_MAX_S)
        renewal = _Renewal(self.db, name, holder, self.lease_s)
        try:
            yield taken[1]
        finally:
            renewal.stop()
            await asyncio.shield(self._give_back(name, holder))

    async def _give_back(self, name: str, holder: str) -> None:
        await self.db.write(
            lambda conn, _ctx: conn.execute(delete(_LOCKS).where(_LOCKS.c.name == name, _LOCKS.c.holder == holder))
        )


def _take(conn: Connection, name: str, holder: str, lease_s: float) -> bool:
    """One upsert: insert the lease, or take over a row whose lease expired. When a live-looking
    row is in the way and its holder's process is gone (same host), delete it and try again."""
    # Real time, never an injected clock: other processes read these leases.
    now = wall_clock()
    params = {"name": name, "holder": holder, "expires": now + timedelta(seconds=lease_s), "now": now}
    if cast(CursorResult[Any], conn.execute(_TAKE, params)).rowcount == 1:
        return True
    current = conn.execute(select(_LOCKS.c.holder).where(_LOCKS.c.name == name)).scalar_one_or_none()
    if current is None or not is_dead(current):
        return False
    conn.execute(delete(_LOCKS).where(_LOCKS.c.name == name, _LOCKS.c.holder == current))
    return bool(cast(CursorResult[Any], conn.execute(_TAKE, params)).rowcount == 1)


def _take_statement() -> Any:
    """The lease upsert: insert, or take over a row whose lease expired before ``now``."""
    stmt = sqlite_insert(_LOCKS).values(name=bindparam("name"), holder=bindparam("holder"), expires_at=_EXPIRES)
    return stmt.on_conflict_do_update(
        index_elements=["name"],
        set_={"holder": stmt.excluded.holder, "expires_at": stmt.excluded.expires_at},
        where=_LOCKS.c.expires_at < bindparam("now", type_=_LOCKS.c.expires_at.type),
    )


# Built once: a turn's opening runs it (storage.fastsql).
_EXPIRES = bindparam("expires", type_=_LOCKS.c.expires_at.type)
_TAKE = prepared(_take_statement())


class _Renewal:
    """Extends a SQLite lease every third of its life until stopped (a timer, not a task: a
    turn shorter than that costs one timer handle)."""

    def __init__(self, db: Database, name: str, holder: str, lease_s: float) -> None:
        self.db, self.lease, self.holder, self.lease_s = db, name, holder, lease_s
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._timer = self._loop.call_later(lease_s / 3, self._fire)

    def _fire(self) -> None:
        if not self._stopped:
            self._task = self._loop.create_task(self._renew())

    async def _renew(self) -> None:
        expires = wall_clock() + timedelta(seconds=self.lease_s)
        renew = (
            update(_LOCKS).where(_LOCKS.c.name == self.lease, _LOCKS.c.holder == self.holder).values(expires_at=expires)
        )
        try:
            kept = await self.db.write(lambda conn, _ctx: cast(CursorResult[Any], conn.execute(renew)).rowcount)
        except Exception:
            log.exception("renewing lease %s failed", self.lease)
            kept = 1  # try again at the next tick: the lease may still be ours
        if not kept:
            log.error("lease %s was lost while its turn still ran (expired and taken over)", self.lease)
        elif not self._stopped:
            self._timer = self._loop.call_later(self.lease_s / 3, self._fire)

    def stop(self) -> None:
        self._stopped = True
        self._timer.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()


# -- PostgreSQL: advisory locks on one dedicated session ----------------------------------------
class _PgSession:
    """One asyncpg connection holding this runtime's conversation advisory locks.

    Statements on it run one at a time (an asyncio lock); each is a single round trip. A
    connection that fails is dropped (the server releases its locks) and the next statement
    opens a new one; a lease that was held on the lost session is reported when given back.
    """

    def __init__(self, db: Database) -> None:
        url = db.engine.url.set(drivername="postgresql")
        self._dsn = url.render_as_string(hide_password=False)
        self._conn: asyncpg.Connection | None = None
        self._generation = 0
        self._serial = asyncio.Lock()
        self._stray: set[asyncio.Task[Any]] = set()
        # The runtime's engine going away ends this session too (tests dispose engines per test).
        event.listen(db.engine.sync_engine, "engine_disposed", lambda _engine: self.terminate())

    def terminate(self) -> None:
        """Drop the session now (its locks are released by the server)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._generation += 1
            with contextlib.suppress(Exception):
                conn.terminate()

    async def _call(self, sql: str, key: int) -> tuple[bool, int]:
        """``sql``'s boolean answer for ``key`` and the session generation it ran on."""
        import asyncpg  # here, not at import: a SQLite deployment never loads the driver

        async with self._serial:
            for attempt in (1, 2):
                if self._conn is None or self._conn.is_closed():
                    self._conn = await asyncpg.connect(
                        self._dsn, server_settings={"application_name": "signoff-leases", **_KEEPALIVES}
                    )
                    self._generation += 1
                try:
                    return bool(await self._conn.fetchval(sql, key)), self._generation
                except (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError):
                    self.terminate()
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    async def _try(self, key: int) -> tuple[bool, int]:
        call = asyncio.ensure_future(self._call("SELECT pg_try_advisory_lock($1)", key))
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            # The statement still runs: if it took the lock, give it back once it has.
            call.add_done_callback(lambda done: self._unlock_if_taken(done, key))
            raise

    def _unlock_if_taken(self, done: asyncio.Future[tuple[bool, int]], key: int) -> None:
        if done.cancelled() or done.exception() is not None or not done.result()[0]:
            return
        task = asyncio.ensure_future(self._release(key, done.result()[1]))
        self._stray.add(task)
        task.add_done_callback(self._stray.discard)

    async def _release(self, key: int, generation: int) -> None:
        if generation != self._generation:
            log.error("conversation lease %s was lost with its session while the turn ran", key)
            return
        try:
            released, _ = await self._call("SELECT pg_advisory_unlock($1)", key)
        except Exception:
            log.exception("giving back conversation lease %s failed; dropping the session", key)
            self.terminate()
            return
        if not released:
            log.error("conversation lease %s was not held when given back", key)

    @asynccontextmanager
    async def hold(self, name: str, deadline: float, wait: float) -> AsyncIterator[None]:
        key = lease_key(name)
        loop = asyncio.get_running_loop()
        pause = _POLL_FIRST_S
        while True:
            taken, generation = await self._try(key)
            if taken:
                break
            if loop.time() + pause > deadline:
                raise LockBusy(name, wait)
            await asyncio.sleep(pause)
            pause = min(pause * 2, _POLL_MAX_S)
        try:
            yield
        finally:
            release = asyncio.ensure_future(self._release(key, generation))
            self._stray.add(release)
            release.add_done_callback(self._stray.discard)
            await asyncio.shield(release)


__all__ = ["LEASE_S", "WAIT_S", "Leases", "lease_key"]
