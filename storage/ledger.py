"""The idempotency ledger (C9): insert the key, then call the downstream.

``claim`` inserts ``executing`` under a unique key before any side effect. A
second claimant of the same key gets the existing entry back instead: a
finished entry's stored result is returned to the caller, and an ``executing``
one is either in flight elsewhere or left by a crash (``recover`` finds those).
"""

from __future__ import annotations

import asyncio
import hashlib
import weakref
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, delete, insert, select, text, update
from sqlalchemy.exc import IntegrityError

from storage.audit import AuditEvent, append_audit_sync
from storage.db import Database, WriteContext
from storage.models import ToolExecutionRow
from storage.records import LedgerEntry, LedgerStatus

_LEDGER: Table = ToolExecutionRow.__table__  # type: ignore[assignment]


def _entry(r: ToolExecutionRow) -> LedgerEntry:
    return LedgerEntry(
        key=r.key,
        tool=r.tool,
        status=cast(LedgerStatus, r.status),
        result=r.result,
        proposal_id=r.proposal_id,
        run_id=r.run_id,
        arguments=r.arguments,
    )


class Ledger:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    @asynccontextmanager
    async def exclusive(self, name: str) -> AsyncIterator[None]:
        """Hold the lock ``name`` (e.g. ``money:C-7``) while a decision is made and carried out.

        PostgreSQL: a session advisory lock on a dedicated connection, so every replica and
        worker queues for it. SQLite: an in-process lock (one process serves a SQLite file).
        """
        if not self.db.is_postgres:
            lock = self._locks.get(name)
            if lock is None:
                lock = self._locks[name] = asyncio.Lock()
            async with lock:
                yield
            return
        k = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
        async with self.db.engine.connect() as conn:
            await conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": k})
            try:
                yield
            finally:
                await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": k})

    async def claim(self, *, key: str, tool: str, arguments: Any, proposal_id: str | None,
                    run_id: str | None) -> LedgerEntry | None:
        """``None``: the key is ours, go ahead. Otherwise the entry that already holds it."""
        now = datetime.now(UTC)
        row = {"key": key, "tool": tool, "arguments": arguments, "proposal_id": proposal_id, "run_id": run_id,
               "status": "executing", "result": None, "created_at": now, "updated_at": now}
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
