"""The idempotency ledger (C9): insert the key, then call the downstream.

``claim`` inserts ``executing`` under a unique key before any side effect. A
second claimant of the same key gets the existing entry back instead: a
finished entry's stored result is returned to the caller, and an ``executing``
one is either in flight elsewhere or left by a crash (``recover`` finds those).
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
import weakref
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import Connection, CursorResult, Table, delete, insert, select, text, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError

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


class Ledger:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    @asynccontextmanager
    async def exclusive(self, name: str) -> AsyncIterator[None]:
        """Hold the lock ``name`` (e.g. ``money:C-7``) while a decision is made and carried out.

        PostgreSQL: a session advisory lock on a dedicated connection, so every replica and
        worker queues for it. SQLite: an in-process lock, then a lease row in ``locks`` so other
        processes on the same file (a separate ``signoff worker``) queue too.
        """
        if not self.db.is_postgres:
            lock = self._locks.get(name)
            if lock is None:
                lock = self._locks[name] = asyncio.Lock()
            async with lock, self._lease(name):
                yield
            return
        k = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
        async with self.db.engine.connect() as conn:
            await conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": k})
            try:
                yield
            finally:
                await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": k})

    @asynccontextmanager
    async def _lease(self, name: str, *, lease_s: float = LEASE_S, wait_s: float = 60.0) -> AsyncIterator[None]:
        """A lease row: insert to take it, delete to give it back; an expired one (its holder
        died) is taken over. Waits up to ``wait_s`` for a live holder."""
        holder = f"{process_id()}:{uuid.uuid4().hex[:6]}"
        deadline = asyncio.get_running_loop().time() + wait_s
        while not await self.db.write(lambda conn, _ctx: _take_lease(conn, name, holder, lease_s)):
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"lock {name} is held elsewhere")
            await asyncio.sleep(0.01)
        try:
            yield
        finally:
            await self.db.write(lambda conn, _ctx: conn.execute(
                delete(_LOCKS).where(_LOCKS.c.name == name, _LOCKS.c.holder == holder)))

    async def claim(self, *, key: str, tool: str, arguments: Any, proposal_id: str | None,
                    run_id: str | None) -> LedgerEntry | None:
        """``None``: the key is ours, go ahead. Otherwise the entry that already holds it."""
        now = datetime.now(UTC)
        row = {"key": key, "tool": tool, "arguments": arguments, "proposal_id": proposal_id, "run_id": run_id,
               "status": "executing", "result": None, "holder": process_id(), "created_at": now, "updated_at": now}
        try:
            await self.db.write(lambda conn, _ctx: conn.execute(insert(_LEDGER).values(**row)))
            return None
        except IntegrityError:
            existing = await self.get(key)
            assert existing is not None, f"ledger key {key} vanished"
            return existing

    async def get(self, key: str) -> LedgerEntry | None:
        async with self.db.reader() as s:
            r = (
                await s.execute(select(ToolExecutionRow).where(ToolExecutionRow.key == key))
            ).scalar_one_or_none()
            return _entry(r) if r else None

    async def by_proposal(self, proposal_id: str) -> LedgerEntry | None:
        """The entry a proposal claimed, if it got that far (its key is then fixed for good)."""
        async with self.db.reader() as s:
            r = (await s.execute(select(ToolExecutionRow).where(ToolExecutionRow.proposal_id == proposal_id)
                                 .limit(1))).scalar_one_or_none()
            return _entry(r) if r else None

    async def settle(self, key: str, *, status: str, result: Any,
                     audit: Sequence[AuditEvent] = (), only_if: str = "executing") -> bool:
        """Record the outcome; false when the row was not in ``only_if`` (already settled)."""
        now = datetime.now(UTC)

        def _settle(conn: Connection, ctx: WriteContext) -> bool:
            res = conn.execute(
                update(_LEDGER).where(_LEDGER.c.key == key, _LEDGER.c.status == only_if)
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
        await self.db.write(lambda conn, _ctx: conn.execute(
            delete(_LEDGER).where(_LEDGER.c.key == key, _LEDGER.c.status == "executing")))

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
                (
                    await s.execute(
                        select(ToolExecutionRow).where(ToolExecutionRow.status == "executing")
                    )
                )
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
        sqlite_insert(_LOCKS).values(name=name, holder=holder, expires_at=now + timedelta(seconds=lease_s))
        .on_conflict_do_nothing(index_elements=["name"]))
    return bool(cast(CursorResult[Any], taken).rowcount == 1)
