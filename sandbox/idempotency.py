"""Idempotent writes for the sandbox store: one key, one side effect.

:func:`run_once` opens one transaction, returns the stored result if the key is
already in ``store_writes``, else performs the write and inserts the key row
with its result. Two callers racing with one key both pass the first check on
PostgreSQL; the loser's key insert fails on the primary key, its transaction
(side effects included) rolls back, and it returns the winner's stored result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from sandbox import codec
from sandbox.models import StoreWriteRow
from storage.db import Database
from tools.backend import BackendError, WriteRecord

T = TypeVar("T")
Perform = Callable[[AsyncSession, datetime], Awaitable[T]]


def _replay(stored: StoreWriteRow, operation: str, customer_id: str, cls: type[T]) -> T:
    if stored.operation != operation or stored.customer_id not in (None, customer_id):
        raise BackendError(
            "idempotency_conflict",
            "this idempotency key was used for a different write",
            operation=stored.operation,
        )
    return codec.decode(cls, stored.result)


async def run_once(
    db: Database,
    clock: Callable[[], datetime],
    *,
    key: str,
    operation: str,
    customer_id: str,
    cls: type[T],
    perform: Perform[T],
) -> T:
    """Perform ``perform`` at most once per ``key``; later calls get the stored ``cls`` result.

    A key reused for another operation or customer raises ``idempotency_conflict``.
    """
    async with db.sessions() as s:
        try:
            async with s.begin():
                stored = await s.get(StoreWriteRow, key)
                if stored is not None:
                    return _replay(stored, operation, customer_id, cls)
                now = clock()
                result = await perform(s, now)
                row = StoreWriteRow(
                    key=key, operation=operation, customer_id=customer_id,
                    result=codec.encode(result), created_at=now,
                )  # fmt: skip
                s.add(row)
                await s.flush()
            return result
        except IntegrityError:
            pass  # a concurrent write with the same key won; ours was rolled back
    async with db.sessions() as s, s.begin():
        stored = await s.get(StoreWriteRow, key)
        if stored is None:
            raise RuntimeError(f"write {operation} failed on a constraint, not on its key")
        return _replay(stored, operation, customer_id, cls)


async def lookup(db: Database, key: str) -> WriteRecord | None:
    """The stored result of the write made with ``key``, if any."""
    async with db.reader() as s, s.begin():
        row = await s.get(StoreWriteRow, key)
        if row is None:
            return None
        return WriteRecord(key=row.key, operation=row.operation, result=dict(row.result))
