"""The idempotency ledger (C9): insert the key, then call the downstream.

``claim`` inserts ``executing`` under a unique key before any side effect. A
second claimant of the same key gets the existing entry back instead: a
finished entry's stored result is returned to the caller, and an ``executing``
one is either in flight elsewhere or left by a crash (``recover`` finds those).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
import weakref
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import Connection, CursorResult, Table, delete, insert, select, text, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.audit import AuditEvent, append_audit_sync
from storage.db import Database, WriteContext
from storage.holders import is_dead, process_id
from storage.models import LockRow, ToolExecutionRow
from storage.records import LedgerEntry, LedgerStatus, aware

_LEDGER: Table = ToolExecutionRow.__table__  # type: ignore[assignment]
_LOCKS: Table = LockRow.__table__  # type: ignore[assignment]
#: A lease outlives any judgement plus execution (tool timeouts are seconds); a dead holder's expires.
LEASE_S = 120.0


def _entry(r: ToolExecutionRow) -> LedgerEntry:
    return LedgerEntry(
        key=r.key,
        tool=r.tool,
        status=cast(LedgerStatus, r.status),
        result=r.result,
        proposal_id=r.proposal_id,
        run_id=r.run_id,
        arguments=r.arguments,
        created_at=aware(r.created_at),
        holder=r.holder,
    )


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


class Ledger:
    def __init__(self, db: Database, *, lock_wait_s: float = LOCK_WAIT_S) -> None:
        self.db = db
        self.lock_wait_s = lock_wait_s
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

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
            async with self._pg_xact_lock(name, deadline, wait):
                yield
        finally:
            lock.release()

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
            await self.db.write(
                lambda conn, _ctx: conn.execute(delete(_LOCKS).where(_LOCKS.c.name == name, _LOCKS.c.holder == holder))
            )

    async def claim(
        self, *, key: str, tool: str, arguments: Any, proposal_id: str | None, run_id: str | None
    ) -> LedgerEntry | None:
        """``None``: the key is ours, go ahead. Otherwise the entry that already holds it."""
        now = datetime.now(UTC)
        row = {
            "key": key,
            "tool": tool,
            "arguments": arguments,
            "proposal_id": proposal_id,
            "run_id": run_id,
            "status": "executing",
            "result": None,
            "holder": process_id(),
            "created_at": now,
            "updated_at": now,
        }
        try:
            await self.db.write(lambda conn, _ctx: conn.execute(insert(_LEDGER).values(**row)))
            return None
        except IntegrityError:
            existing = await self.get(key)
            assert existing is not None, f"ledger key {key} vanished"
            return existing

    async def get(self, key: str) -> LedgerEntry | None:
        async with self.db.reader() as s:
            r = (await s.execute(select(ToolExecutionRow).where(ToolExecutionRow.key == key))).scalar_one_or_none()
            return _entry(r) if r else None

    async def by_proposal(self, proposal_id: str) -> LedgerEntry | None:
        """The entry a proposal claimed, if it got that far (its key is then fixed for good)."""
        async with self.db.reader() as s:
            r = (
                await s.execute(select(ToolExecutionRow).where(ToolExecutionRow.proposal_id == proposal_id).limit(1))
            ).scalar_one_or_none()
            return _entry(r) if r else None

    async def settle(
        self, key: str, *, status: str, result: Any, audit: Sequence[AuditEvent] = (), only_if: str = "executing"
    ) -> bool:
        """Record the outcome; false when the row was not in ``only_if`` (already settled)."""
        now = datetime.now(UTC)

        def _settle(conn: Connection, ctx: WriteContext) -> bool:
            res = conn.execute(
                update(_LEDGER)
                .where(_LEDGER.c.key == key, _LEDGER.c.status == only_if)
                .values(status=status, result=result, updated_at=now)
            )
            if res.rowcount != 1:
                return False
            if audit:
                append_audit_sync(conn, audit, ctx.audit_head)
                ctx.audit_events.extend(audit)
            return True

        return await self.db.write(_settle)

    async def release(self, key: str) -> None:
        """Drop an ``executing`` claim whose downstream call provably never happened."""
        await self.db.write(
            lambda conn, _ctx: conn.execute(
                delete(_LEDGER).where(_LEDGER.c.key == key, _LEDGER.c.status == "executing")
            )
        )

    @staticmethod
    def abandoned(entry: LedgerEntry, *, older_than: datetime | None = None) -> bool:
        """Whether an ``executing`` claim can no longer finish by itself: the process that made it
        no longer runs (same host), or it is older than ``older_than`` (a claim lives seconds)."""
        if entry.status != "executing":
            return False
        if entry.holder is not None and is_dead(entry.holder):
            return True
        return older_than is not None and entry.created_at is not None and entry.created_at < older_than

    async def in_flight(self) -> list[LedgerEntry]:
        """Entries left ``executing`` — after a crash, each needs reconciling."""
        async with self.db.reader() as s:
            rows = (
                (await s.execute(select(ToolExecutionRow).where(ToolExecutionRow.status == "executing")))
                .scalars()
                .all()
            )
            return [_entry(r) for r in rows]


def _take_lease(conn: Connection, name: str, holder: str, lease_s: float) -> bool:
    now = datetime.now(UTC)
    conn.execute(delete(_LOCKS).where(_LOCKS.c.name == name, _LOCKS.c.expires_at < now))
    current = conn.execute(select(_LOCKS.c.holder).where(_LOCKS.c.name == name)).scalar_one_or_none()
    if current is not None and is_dead(current):
        # A SQLite file is shared by processes on one host: a holder that no longer runs
        # (killed mid-action) gives its lease back now rather than at expiry.
        conn.execute(delete(_LOCKS).where(_LOCKS.c.name == name, _LOCKS.c.holder == current))
    taken = conn.execute(
        sqlite_insert(_LOCKS)
        .values(name=name, holder=holder, expires_at=now + timedelta(seconds=lease_s))
        .on_conflict_do_nothing(index_elements=["name"])
    )
    return bool(cast(CursorResult[Any], taken).rowcount == 1)


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
