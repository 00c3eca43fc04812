"""``storage.events.first_time``: insert-if-absent, race-safe on SQLite and PostgreSQL, so a
provider's redelivery (even concurrent) is handled exactly once."""

from __future__ import annotations

import asyncio

import pytest

from storage.db import Database
from storage.events import first_time, seen


async def test_first_time_only_once(any_db: Database) -> None:
    assert not await seen(any_db, "email:<a@x>")
    assert await first_time(any_db, "email:<a@x>", "email")
    assert not await first_time(any_db, "email:<a@x>", "email")
    assert await seen(any_db, "email:<a@x>")
    assert await first_time(any_db, "slack:Ev123", "slack")


async def test_concurrent_deliveries_have_one_winner(any_db: Database) -> None:
    results = await asyncio.gather(*(first_time(any_db, "email:<race@x>", "email") for _ in range(12)))
    assert results.count(True) == 1


async def test_ids_are_bounded(any_db: Database) -> None:
    with pytest.raises(ValueError):
        await first_time(any_db, "x" * 256, "email")
    with pytest.raises(ValueError):
        await first_time(any_db, "", "email")
