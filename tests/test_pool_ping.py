"""A pooled PostgreSQL connection is pinged in one round trip as it leaves the pool
(``storage/pool_ping.py``): one the server dropped while it sat there is replaced, and the
caller never sees it."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from storage.db import create_database
from tests.conftest import PG_URL

pytestmark = pytest.mark.skipif(not PG_URL, reason="SIGNOFF_TEST_PG_URL not set")


async def test_a_connection_dropped_in_the_pool_is_replaced_on_checkout() -> None:
    db = create_database(PG_URL, pool_size=1)
    admin = create_database(PG_URL, pool_size=1)
    try:
        pid = await db.read(lambda conn: conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        async with admin.engine.connect() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        # The next read gets a live connection: the dropped one failed its ping and was replaced.
        again = await db.read(lambda conn: conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        assert again != pid
    finally:
        await db.dispose()
        await admin.dispose()


async def test_the_ping_is_one_empty_query_without_a_transaction() -> None:
    """What the server sees of a checkout: ``;`` alone — no ``BEGIN`` or ``ROLLBACK`` around it."""
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
        async with db.engine.connect() as conn:  # a checkout: the ping
            await conn.close()
        assert seen == [";"], seen
    finally:
        await db.dispose()
