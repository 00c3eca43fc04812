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

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import aiosqlite
import aiosqlite.core

from storage import fastsql

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
    its own thread while that task waits."""

    #: Calls that went to the thread because SQLite was busy (for tests and benchmarks).
    handoffs = 0

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
        for delay in BUSY_POLL_S:
            await asyncio.sleep(delay)
            try:
                return fn(*args, **kwargs)
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
        return await super()._execute(_patiently, conn, partial(fn, *args, **kwargs))


#: What :class:`RawPath` returns when it did not run the function: something only SQLAlchemy runs.
NOT_RUN: Any = object()
#: What :class:`RawPath` returns when SQLite was busy: nothing ran, wait for the lock off the loop.
BUSY: Any = object()


class RawPath:
    """Transactions straight on a stdlib sqlite3 connection on the caller's thread.

    For functions written against SQLAlchemy's ``Connection`` whose statements are all
    prepared (:mod:`storage.fastsql`): no pool, no SQLAlchemy transaction, no thread hop.
    Returns :data:`BUSY` when ``BEGIN IMMEDIATE`` (or a read) found the file busy, and
    :data:`NOT_RUN` when the function met something only SQLAlchemy runs (its transaction is
    rolled back first): the caller then takes the slower path.
    One connection per thread, opened on first use with ``connect()``."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], dialect: Any) -> None:
        self._connect = connect
        self._dialect = dialect
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []

    def _raw(self) -> sqlite3.Connection:
        raw: sqlite3.Connection | None = getattr(self._local, "raw", None)
        if raw is None:
            raw = self._local.raw = self._connect()
            self._all.append(raw)
        elif raw.in_transaction:  # only after a failure to roll back: start clean
            raw.rollback()
        return raw

    def write(self, fn: Callable[[Any, Any], Any], ctx: Any) -> Any:
        """``fn(connection, ctx)`` in one ``BEGIN IMMEDIATE`` transaction, or :data:`NOT_RUN`."""
        raw = self._raw()
        try:
            raw.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if is_busy(exc):
                return BUSY  # nothing ran: the caller waits for the lock off the loop
            raise
        _trace("BEGIN IMMEDIATE")
        try:
            result = fn(fastsql.RawConnection(raw, self._dialect), ctx)
        except fastsql.Unsupported:
            raw.rollback()
            ctx.audit_events.clear()  # the caller runs fn again from the start
            return NOT_RUN
        except BaseException:
            raw.rollback()
            raise
        raw.execute("COMMIT")
        _trace("COMMIT")
        return result

    def read(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(connection)`` in one read transaction (``BEGIN``: no write lock), or :data:`NOT_RUN`."""
        raw = self._raw()
        raw.execute("BEGIN")
        _trace("BEGIN")
        try:
            return fn(fastsql.RawConnection(raw, self._dialect))
        except fastsql.Unsupported:
            return NOT_RUN
        except Exception as exc:
            if is_busy(exc) or is_busy(getattr(exc, "orig", None)):
                return BUSY  # the rare busy a WAL reader meets: again, patiently, off the loop
            raise
        finally:
            raw.rollback()  # a read: nothing to keep
            _trace("COMMIT")

    def close(self) -> None:
        """Close every thread's connection."""
        for raw in self._all:
            raw.close()
        self._all.clear()
        self._local = threading.local()


def _trace(sql: str) -> None:
    for trace in fastsql.TRACE:
        trace(sql)


def inline_connect(database: str) -> InlineConnection:
    """An :class:`InlineConnection` to the SQLite file ``database`` (awaitable, like aiosqlite's)."""

    def connector() -> sqlite3.Connection:
        return sqlite3.connect(database, timeout=0, check_same_thread=False, isolation_level=None)

    conn = InlineConnection(connector, 64)
    conn._thread.daemon = True
    return conn


__all__ = ["BUSY", "NOT_RUN", "PATIENT_MS", "InlineConnection", "RawPath", "inline_connect", "is_busy"]
