"""Assist threads bound to a customer's account by a rep (``thread_bindings``): the thread's
turns then act for that customer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from storage.db import Database
from storage.models import ThreadBindingRow
from storage.records import aware, wall_clock

Clock = Callable[[], datetime]


@dataclass(frozen=True, kw_only=True)
class ThreadBinding:
    """An assist thread bound to a customer account by a rep."""

    ref: str
    customer_id: str
    staff_id: str
    created_at: datetime


class ThreadBindings:
    """Repository over ``thread_bindings``."""

    def __init__(self, db: Database, *, clock: Clock | None = None) -> None:
        self._db = db
        self._clock = clock or wall_clock

    async def bind(self, ref: str, *, customer_id: str, staff_id: str) -> ThreadBinding:
        """Bind the thread ``ref`` to a customer's account for a staff member (replacing any binding)."""
        now = self._clock()
        async with self._db.sessions() as s, s.begin():
            row = await s.get(ThreadBindingRow, ref)
            if row is None:
                row = ThreadBindingRow(
                    ref=ref, customer_id=customer_id, staff_id=staff_id, created_at=now, updated_at=now
                )
                s.add(row)
            else:
                row.customer_id, row.staff_id, row.updated_at = customer_id, staff_id, now
            await s.flush()
            return ThreadBinding(
                ref=ref, customer_id=customer_id, staff_id=staff_id, created_at=aware(row.created_at) or now
            )

    async def get(self, ref: str) -> ThreadBinding | None:
        """The binding of thread ``ref``, if any."""
        async with self._db.reader() as s:
            row = await s.get(ThreadBindingRow, ref)
            if row is None:
                return None
            return ThreadBinding(
                ref=row.ref,
                customer_id=row.customer_id,
                staff_id=row.staff_id,
                created_at=aware(row.created_at) or row.created_at,
            )

    async def of_staff(self, staff_id: str, *, limit: int = 50) -> list[ThreadBinding]:
        """The staff member's bindings, most recent first."""
        async with self._db.reader() as s:
            rows = (
                await s.execute(
                    select(ThreadBindingRow)
                    .where(ThreadBindingRow.staff_id == staff_id)
                    .order_by(ThreadBindingRow.updated_at.desc())
                    .limit(limit)
                )
            ).scalars()
            return [
                ThreadBinding(
                    ref=r.ref,
                    customer_id=r.customer_id,
                    staff_id=r.staff_id,
                    created_at=aware(r.created_at) or r.created_at,
                )
                for r in rows
            ]


__all__ = ["ThreadBinding", "ThreadBindings"]
