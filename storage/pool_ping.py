"""A pooled PostgreSQL connection leaves the pool alive, in at most one round trip.

SQLAlchemy's ``pool_pre_ping`` over asyncpg wraps its ping in ``BEGIN`` … ``ROLLBACK`` (for
pgbouncer's transaction mode): three round trips on every checkout, several times per agent
step (the profile of a ``signoff worker`` under load: ~600 pings a second, more round trips
than its work). Here:

- a connection the server has closed (a terminated backend, a restart: the driver has seen the
  socket close) is replaced without a round trip;
- one back in the pool for :data:`PING_IDLE_S` or more is pinged with the empty query alone, in
  autocommit — as every read of signoff's runs — and replaced if it fails (``DisconnectionError``:
  the pool connects afresh), exactly as ``pool_pre_ping`` does;
- one that answered moments ago is handed out as it is. Under load that is nearly every
  checkout (a widget message took ~14, each a round trip). Should it have died silently in
  that moment, its statement fails as an outage like any other: the database's faults are
  handled where they happen (``storage/faults.py``; ``tests/test_db_faults_pg*.py`` cut and
  restart the database around it), and SQLAlchemy then discards every connection older than
  the failure.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import await_

#: Seconds a connection may sit in the pool and still leave it without a ping.
PING_IDLE_S = 1.0
_IDLE_SINCE = "signoff_idle_since"


def ping_on_checkout(engine: AsyncEngine) -> None:
    """Check each of ``engine``'s connections (asyncpg) as it is checked out (see the module)."""
    pool = engine.sync_engine.pool

    @event.listens_for(pool, "checkin")
    def _checked_in(dbapi_connection: Any, record: Any) -> None:
        if dbapi_connection is not None:
            record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(pool, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        driver = dbapi_connection.driver_connection
        if driver.is_closed():
            raise DisconnectionError("a pooled connection was closed by the server")
        idle_since = record.info.get(_IDLE_SINCE)
        if idle_since is not None and time.monotonic() - idle_since < PING_IDLE_S:
            return
        try:
            await_(driver.fetchrow(";"))
        except Exception as exc:
            raise DisconnectionError(f"a pooled connection failed its ping: {exc}") from exc
