"""A pooled PostgreSQL connection is pinged as it leaves the pool, in one round trip.

SQLAlchemy's ``pool_pre_ping`` over asyncpg wraps its ping in ``BEGIN`` … ``ROLLBACK`` (for
pgbouncer's transaction mode): three round trips on every checkout, several times per agent
step (the profile of a ``signoff worker`` under load: ~600 pings a second, more round trips
than its work). Here the same ping is the empty query alone, in autocommit — as every read of
signoff's runs — and a connection that fails it is replaced (``DisconnectionError``: the pool
connects afresh), exactly as ``pool_pre_ping`` does. ``tests/test_db_faults_pg*.py`` cut and
restart the database around it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import await_


def ping_on_checkout(engine: AsyncEngine) -> None:
    """Ping each of ``engine``'s connections (asyncpg) with one empty query as it is checked out."""

    @event.listens_for(engine.sync_engine.pool, "checkout")
    def _checked_out(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        try:
            await_(dbapi_connection.driver_connection.fetchrow(";"))
        except Exception as exc:
            raise DisconnectionError(f"a pooled connection failed its ping: {exc}") from exc
