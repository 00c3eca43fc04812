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

The same holds for :class:`InlineWriter`, the stdlib-driver connection behind
``Database.write``: the step's transaction runs inline when ``BEGIN IMMEDIATE`` gets the
lock at once, else on the writer thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from functools import partial
from typing import Any

import aiosqlite
import aiosqlite.core

#: The long busy timeout (ms), used only off the event loop's thread.
PATIENT_MS = 30_000

#: Optional observer of inline calls (benchmarks count statements and hand-offs with it).
Tracer = Callable[[str], None]


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
    its own thread while that task waits."""

    #: Calls that went to the thread because SQLite was busy (for tests and benchmarks).
    handoffs = 0
    #: Called with ``"handoff"`` on each fall-back (benchmarks count round trips with it).
    tracer: Tracer | None = None

    async def _execute(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        conn = self._connection
        if not self._running or conn is None:
            raise ValueError("Connection closed")
        was_in_tx = conn.in_transaction
        try:
            return fn(*args, **kwargs)
        except sqlite3.OperationalError as exc:
            many = getattr(fn, "__name__", "") == "executemany"
            if not is_busy(exc) or (many and was_in_tx):
                raise
        InlineConnection.handoffs += 1
        if InlineConnection.tracer is not None:
            InlineConnection.tracer("handoff")
        return await super()._execute(_patiently, conn, partial(fn, *args, **kwargs))


def inline_connect(database: str) -> InlineConnection:
    """An :class:`InlineConnection` to the SQLite file ``database`` (awaitable, like aiosqlite's)."""

    def connector() -> sqlite3.Connection:
        return sqlite3.connect(database, timeout=0, check_same_thread=False, isolation_level=None)

    conn = InlineConnection(connector, 64)
    conn._thread.daemon = True
    return conn


__all__ = ["PATIENT_MS", "InlineConnection", "inline_connect", "is_busy"]
