"""A pooled PostgreSQL connection leaves the pool alive (``storage/pool_ping.py``): one the server
dropped while it sat there is replaced, and the caller never sees it; one idle for a while is
pinged with one empty query; one that answered moments ago is not pinged at all."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

import storage.pool_ping
from storage.db import create_database
from tests.conftest import PG_URL

pytestmark = pytest.mark.skipif(not PG_URL, reason="SIGNOFF_TEST_PG_URL not set")


@pytest.mark.parametrize("idle_s", [0.2, 1.2])
async def test_a_connection_dropped_in_the_pool_is_replaced_on_checkout(idle_s: float) -> None:
    """Dropped by the server moments after its last use (the driver saw it close: replaced without
    a round trip) or after sitting idle (pinged first): the next read gets a live connection."""
    db = create_database(PG_URL, pool_size=1)
    admin = create_database(PG_URL, pool_size=1)
    try:
        pid = await db.read(lambda conn: conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        async with admin.engine.connect() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        await asyncio.sleep(idle_s)
        again = await db.read(lambda conn: conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        assert again != pid
    finally:
        await db.dispose()
        await admin.dispose()


async def _pings_of_next_checkout(wait_s: float) -> list[str]:
    """What the server sees of a checkout ``wait_s`` after the connection went back to the pool."""
    db = create_database(PG_URL, pool_size=1)
    try:
        await db.read(lambda conn: conn.execute(text("SELECT 1")).scalar_one())
        async with db.engine.connect() as conn:
            raw = await conn.get_raw_connection()
            driver = raw.driver_connection
            assert driver is not None
            seen: list[str] = []
            driver.add_query_logger(lambda record: seen.append(record.query))
            await conn.close()
        await asyncio.sleep(wait_s)
        async with db.engine.connect() as conn:  # a checkout
            await conn.close()
        return seen
    finally:
        await db.dispose()


async def test_an_idle_connection_is_pinged_with_one_empty_query_without_a_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Idle past the threshold: ``;`` alone — no ``BEGIN`` or ``ROLLBACK`` around it."""
    monkeypatch.setattr(storage.pool_ping, "PING_IDLE_S", 0.05)
    assert await _pings_of_next_checkout(0.1) == [";"]


async def test_a_connection_that_answered_moments_ago_leaves_without_a_ping() -> None:
    assert await _pings_of_next_checkout(0.0) == []
