"""SQLite on the event loop's own thread, with a fall-back to a thread when the file is busy.

aiosqlite hands every call (each statement, each fetch, each commit) to a thread of its
own and wakes the event loop for the answer: on a SQLite file in WAL with
``synchronous=NORMAL`` those calls take microseconds, the hand-offs far longer. Here each
call runs on the caller's thread first with a busy timeout of zero; only when SQLite
answers ``SQLITE_BUSY`` (another connection or process holds the write lock) is the call
made again on the connection's own thread with the long busy timeout, so the loop is
never blocked waiting for a lock. A call that failed with ``SQLITE_BUSY`` had no effect,
so making it again is safe; an ``executemany`` inside a transaction is the exception (rows
before the busy one were applied) and its error is raised as it is.

The same holds for ``storage.sqlite.SyncWriter``, the stdlib-driver connections behind
``Database.write`` and ``Database.read``: a transaction runs inline when ``BEGIN IMMEDIATE``
(a read: ``BEGIN`` and its snapshot) gets the lock at once, else on a thread.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from functools import partial
from typing import Any

import aiosqlite
import aiosqlite.core

#: When the file is busy (another process writes), how long to wait between tries on the loop
#: before the connection's thread takes over with the long timeout: about a second of polling
#: a few milliseconds apart. SQLite's own busy handler sleeps in steps growing to 100 ms, so a
#: writer that waited there started up to 100 ms after the lock came free (Slack's acks, with
#: the worker in another process on the same file, waited behind it).
BUSY_POLL_S = (0.0005, 0.001, 0.002) + (0.004,) * 250

#: The long busy timeout (ms), used only off the event loop's thread.
PATIENT_MS = 30_000


def is_busy(exc: BaseException | None) -> bool:
    """Whether ``exc`` is SQLite's ``SQLITE_BUSY`` (the lock is held elsewhere)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return bool(code & 0xFF == sqlite3.SQLITE_BUSY)
    return "database is locked" in str(exc)


def _patiently(conn: sqlite3.Connection, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` with the long busy timeout (on the connection's thread), then restore zero."""
    conn.execute(f"PRAGMA busy_timeout={PATIENT_MS}")
    try:
        return fn()
    finally:
        conn.execute("PRAGMA busy_timeout=0")


class InlineConnection(aiosqlite.Connection):
    """An aiosqlite connection whose calls run on the caller's thread unless SQLite is busy.

    The sqlite3 connection is opened with ``check_same_thread=False``: it is used by one
    task at a time (the pool hands it out whole), on the loop's thread or, when busy, on
    its own thread while that task waits.

    aiosqlite has no public hook for this; the four internals it relies on are read here and
    nowhere else (:data:`AIOSQLITE_INTERNALS`), and ``tests/test_fast_path_contract.py`` fails
    loudly when an aiosqlite release changes any of them: ``_execute(fn, *args, **kwargs)``
    (the coroutine every call goes through, overridden), ``_connection`` (the sqlite3
    connection once open, ``None`` before and after), ``_running`` (false once closing) and
    ``_thread`` (the connection's worker thread, made a daemon)."""

    #: Calls that went to the thread because SQLite was busy (for tests and benchmarks).
    handoffs = 0

    def _driver(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = self._connection
        if not self._running or conn is None:
            raise ValueError("Connection closed")
        return conn

    async def _execute(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        conn = self._driver()
        was_in_tx = conn.in_transaction
        try:
            return fn(*args, **kwargs)
        except sqlite3.OperationalError as exc:
            many = getattr(fn, "__name__", "") == "executemany"
            if not is_busy(exc) or (many and was_in_tx):
                raise
        InlineConnection.handoffs += 1
        for delay in BUSY_POLL_S:
            await asyncio.sleep(delay)
            try:
                return fn(*args, **kwargs)
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
        return await super()._execute(_patiently, conn, partial(fn, *args, **kwargs))

    def daemonize(self) -> InlineConnection:
        """Make the connection's worker thread a daemon (an unclosed connection never holds
        the process open); before it starts."""
        self._thread.daemon = True
        return self


#: The aiosqlite internals :class:`InlineConnection` relies on (the contract test checks them).
AIOSQLITE_INTERNALS = ("_execute", "_connection", "_running", "_thread")


def inline_connect(database: str) -> InlineConnection:
    """An :class:`InlineConnection` to the SQLite file ``database`` (awaitable, like aiosqlite's)."""

    def connector() -> sqlite3.Connection:
        return sqlite3.connect(database, timeout=0, check_same_thread=False, isolation_level=None)

    return InlineConnection(connector, 64).daemonize()


__all__ = ["AIOSQLITE_INTERNALS", "BUSY_POLL_S", "PATIENT_MS", "InlineConnection", "inline_connect", "is_busy"]
