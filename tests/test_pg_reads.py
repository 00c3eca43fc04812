"""On PostgreSQL, reads run in autocommit: no ``BEGIN`` / ``ROLLBACK`` round trips around them
(at READ COMMITTED each statement takes its own snapshot inside a transaction too), while
writes stay one transaction. Told apart by the server: inside a transaction ``now()`` is the
transaction's start, the same for every statement, however long apart they run."""

from __future__ import annotations

from sqlalchemy import Connection, text

from storage.db import Database

NOW = text("SELECT now()")
PAUSE = text("SELECT pg_sleep(0.02)")


def _probe(conn: Connection) -> bool:
    """Whether each statement ran in a transaction of its own."""
    first = conn.execute(NOW).scalar_one()
    conn.execute(PAUSE)
    return bool(conn.execute(NOW).scalar_one() > first)


async def test_reads_run_in_autocommit_and_writes_in_one_transaction(pg_db: Database) -> None:
    assert await pg_db.read(_probe) is True
    async with pg_db.reader() as s, s.begin():
        assert await s.run_sync(lambda session: _probe(session.connection())) is True
    assert await pg_db.write(lambda conn, _ctx: _probe(conn)) is False
    async with pg_db.sessions() as s, s.begin():
        assert await s.run_sync(lambda session: _probe(session.connection())) is False


async def test_a_pooled_connection_used_for_a_read_writes_in_a_transaction_again(pg_db: Database) -> None:
    """The isolation level is the read's alone: the connection goes back to the pool as it was."""
    for _ in range(3):
        assert await pg_db.read(_probe) is True
        assert await pg_db.write(lambda conn, _ctx: _probe(conn)) is False
