"""Delivery ids already handled (email Message-IDs, Slack event ids): redelivery changes nothing.

``first_time`` is insert-if-absent on the ``processed_events`` primary key:
``INSERT … ON CONFLICT DO NOTHING RETURNING`` on both dialects, so of two
concurrent deliveries of the same id exactly one is told "first time".
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite

from storage.db import Database
from storage.models import ProcessedEventRow
from storage.records import wall_clock

_EVENTS = cast(Table, ProcessedEventRow.__table__)
#: The column's width; longer ids are refused by the caller (they hash them first).
MAX_EVENT_ID = 255


async def first_time(db: Database, event_id: str, source: str, *, at: datetime | None = None) -> bool:
    """Record ``event_id`` as processed; ``True`` only for the first caller ever to record it."""
    if not event_id or len(event_id) > MAX_EVENT_ID:
        raise ValueError(f"event id must be 1..{MAX_EVENT_ID} characters")
    dialect = postgresql if db.is_postgres else sqlite
    stmt = (
        dialect.insert(_EVENTS)
        .values(event_id=event_id, source=source[:16], received_at=at or wall_clock())
        .on_conflict_do_nothing(index_elements=["event_id"])
        .returning(_EVENTS.c.event_id)
    )
    async with db.sessions() as s, s.begin():
        return (await s.execute(stmt)).scalar_one_or_none() is not None


async def seen(db: Database, event_id: str) -> bool:
    """Whether ``event_id`` was already recorded (read-only)."""
    async with db.sessions() as s:
        return await s.get(ProcessedEventRow, event_id) is not None


__all__ = ["MAX_EVENT_ID", "first_time", "seen"]
