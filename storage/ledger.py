"""The idempotency ledger (C9): insert the key, then call the downstream.

``claim`` inserts ``executing`` under a unique key before any side effect. A
second claimant of the same key gets the existing entry back instead: a
finished entry's stored result is returned to the caller, and an ``executing``
one is either in flight elsewhere or left by a crash (``recover`` finds those).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from storage.audit import AuditEvent, append_audit_sync
from storage.db import Database, WriteContext
from storage.faults import rerunnable
from storage.holders import is_dead, process_id
from storage.models import ToolExecutionRow
from storage.records import Clock, LedgerEntry, LedgerStatus, aware, wall_clock

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
        created_at=aware(r.created_at),
        holder=r.holder,
    )


class Ledger:
    """The ledger of keyed executions (see the module docstring)."""

    def __init__(self, db: Database, *, clock: Clock = wall_clock) -> None:
        self.db = db
        self._clock = clock

    async def claim(
        self, *, key: str, tool: str, arguments: Any, proposal_id: str | None, run_id: str | None
    ) -> LedgerEntry | None:
        """``None``: the key is ours, go ahead. Otherwise the entry that already holds it."""
        now = self._clock()
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
        """The entry under ``key``, if any."""
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

    @rerunnable
    async def settle(
        self, key: str, *, status: str, result: Any, audit: Sequence[AuditEvent] = (), only_if: str = "executing"
    ) -> bool:
        """Record the outcome; false when the row was not in ``only_if`` (already settled)."""
        now = self._clock()

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
