"""SQLite the way a multi-process deployment needs it.

WAL journal, a busy timeout, and every write transaction opened with ``BEGIN IMMEDIATE`` so
that a read-then-write (the audit chain head, the ledger) can never deadlock into ``database is
locked`` half way through (:func:`sqlite_pragmas`); and :class:`SyncWriter`, the stdlib-driver
connections behind ``Database.write`` and ``Database.read`` on a SQLite file.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from storage.fastsql import FastConnection
from storage.inline import BUSY_POLL_S, is_busy

log = logging.getLogger(__name__)

T = TypeVar("T")


#: How often at most the SQLite writer checkpoints the WAL (on its own thread).
CHECKPOINT_EVERY_S = 1.0


class SyncWriter:
    """The stdlib ``sqlite3`` engines behind :meth:`Database.write` and :meth:`Database.read`.

    One way to run a function: in one SQLAlchemy transaction on a :class:`FastConnection`
    (prepared statements on its cursor, anything else through SQLAlchemy on the same
    connection), never run twice. Where it runs depends only on the lock: on the event
    loop's thread, on a connection this thread keeps open with a busy timeout of zero, when
    ``BEGIN IMMEDIATE`` (a read: ``BEGIN`` and its snapshot, :data:`SNAPSHOT`) gets the lock
    at once — a WAL commit with ``synchronous=NORMAL`` takes tens of microseconds; else,
    after a short poll, on a thread with the long busy timeout, so the loop never waits for a
    lock. Either way the function starts only once the lock is held: nothing it does can
    meet ``SQLITE_BUSY`` half way."""

    def __init__(self, engine: Engine, inline: Engine | None = None) -> None:
        self.engine = engine
        #: The loop-thread engine (busy timeout zero); ``None``: every transaction on a thread.
        self.inline = inline
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="signoff-sqlite-writer")
        #: Transactions that found the lock held and went to a thread (tests and benchmarks read it).
        self.handoffs = 0
        self._local = threading.local()
        self._held: list[Connection] = []
        self._checkpoint_due = 0.0
        self._checkpointing = False

    @property
    def engines(self) -> list[Engine]:
        """Every engine the writer runs statements on (for instrumentation)."""
        return [self.engine] + ([self.inline] if self.inline is not None else [])

    @classmethod
    def for_url(cls, async_url: str) -> SyncWriter | None:
        """A writer for a SQLite file at ``async_url``; ``None`` for an in-memory database."""
        url = make_url(async_url)
        if not url.database or url.database == ":memory:":
            return None  # an in-memory database is private to its connection
        sync_url = url.set(drivername="sqlite")
        engine = create_engine(sync_url, connect_args={"timeout": 30, "check_same_thread": False})
        sqlite_pragmas(engine)
        inline = create_engine(sync_url, connect_args={"timeout": 0, "check_same_thread": False}, pool_size=2)
        sqlite_pragmas(inline, busy_ms=0)
        return cls(engine, inline)

    def _kept(self, kind: str) -> Connection:
        """This thread's inline connection for writes or reads, opened on first use and kept."""
        conn: Connection | None = getattr(self._local, kind, None)
        if conn is None or conn.closed:
            assert self.inline is not None
            conn = self.inline.connect()
            if kind == "reader":
                conn = conn.execution_options(signoff_readonly=True)
            setattr(self._local, kind, conn)
            self._held.append(conn)
        return conn

    async def run(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in one write transaction: inline if the lock is free, else on the writer thread."""
        if self.inline is not None:
            ran, result = self._inline(self._kept("writer"), fn)
            if ran:
                self._maybe_checkpoint()
                return result  # type: ignore[return-value]
            self.handoffs += 1
            for delay in BUSY_POLL_S:  # another process writes: poll for the lock here first
                await asyncio.sleep(delay)
                ran, result = self._inline(self._kept("writer"), fn)
                if ran:
                    return result  # type: ignore[return-value]
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._patient, False, fn)

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in one read transaction (``BEGIN`` deferred: no write lock), inline; on the
        rare ``SQLITE_BUSY`` a WAL reader meets when taking its snapshot, on a thread with the
        long timeout."""
        if self.inline is not None:
            ran, result = self._inline(self._kept("reader"), fn)
            if ran:
                return result  # type: ignore[return-value]
            self.handoffs += 1
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._patient, True, fn)

    @staticmethod
    def _inline(conn: Connection, fn: Callable[[Connection], T]) -> tuple[bool, T | None]:
        """``fn`` in one transaction on ``conn`` once it holds its lock; ``(False, None)`` when
        the lock was busy (``fn`` did not run)."""
        try:
            tx = conn.begin()  # BEGIN IMMEDIATE, or BEGIN for a reader (see sqlite_pragmas)
        except OperationalError as exc:
            if is_busy(exc.orig):
                return False, None
            raise
        try:
            with tx:
                try:
                    fast = _started(conn)
                except OperationalError as exc:
                    if is_busy(exc.orig):
                        tx.rollback()
                        return False, None
                    raise
                return True, fn(fast)  # type: ignore[arg-type]
        except BaseException:
            # A failed COMMIT leaves SQLAlchemy's transaction over but SQLite's open: this
            # connection is kept, so the next transaction must start clean.
            driver = conn.connection.driver_connection
            if driver is not None and driver.in_transaction:
                driver.rollback()
            raise

    def _maybe_checkpoint(self) -> None:
        """At most every :data:`CHECKPOINT_EVERY_S`, a passive WAL checkpoint on the writer's
        thread: connections on the loop's thread never checkpoint on commit (copying the WAL into
        the file and its fsync can hold a commit, and the loop, for a tenth of a second)."""
        now = time.monotonic()
        if self._checkpointing or now < self._checkpoint_due:
            return
        self._checkpointing, self._checkpoint_due = True, now + CHECKPOINT_EVERY_S
        try:
            self._pool.submit(self._checkpoint)
        except RuntimeError:  # the writer is closing
            self._checkpointing = False

    def _checkpoint(self) -> None:
        try:
            raw = self.engine.raw_connection()
            try:
                raw.driver_connection.execute("PRAGMA wal_checkpoint(PASSIVE)").close()  # type: ignore[union-attr]
            finally:
                raw.close()
        except Exception:  # the next one tries again; SQLite's WAL stays correct meanwhile
            log.warning("WAL checkpoint failed", exc_info=True)
        finally:
            self._checkpointing = False

    def _patient(self, read: bool, fn: Callable[[Connection], T]) -> T:
        base = self.engine.connect()
        with base.execution_options(signoff_readonly=True) if read else base as conn, conn.begin():
            return fn(_started(conn))  # type: ignore[arg-type]

    def close(self) -> None:
        """Close the writer's connections."""
        for conn in self._held:
            conn.invalidate()
            conn.close()
        self._held.clear()
        self._local = threading.local()
        self.engine.dispose()
        if self.inline is not None:
            self.inline.dispose()
        self._pool.shutdown(wait=False)


def _started(conn: Connection) -> FastConnection:
    """``conn`` in its transaction, as its functions get it; a reader's snapshot taken first."""
    fast = FastConnection(conn)
    if conn.get_execution_options().get("signoff_readonly"):
        fast.snapshot()
    return fast


def is_sqlite_url(url: str) -> bool:
    """Whether ``url`` names a SQLite database."""
    return url.startswith("sqlite")


def sqlite_pragmas(engine: AsyncEngine | Engine, *, busy_ms: int = 30_000) -> None:
    """WAL, ``synchronous=NORMAL``, foreign keys and ``BEGIN IMMEDIATE`` on every connection;
    ``busy_ms`` is the busy timeout (zero on connections used on the event loop's thread)."""
    sync_engine = engine.sync_engine if isinstance(engine, AsyncEngine) else engine

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide when transactions start.
        if dbapi_conn.isolation_level is not None:
            dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        # Switching to WAL needs an exclusive lock and fails at once if another process holds
        # one; the mode is persistent, so only the first connection ever has to switch.
        for attempt in range(200):
            cursor.execute("PRAGMA journal_mode")
            mode = cursor.fetchone()
            if mode and str(mode[0]).lower() == "wal":
                break
            try:
                cursor.execute("PRAGMA journal_mode=WAL")
            except Exception:  # another connection holds a lock: it is switching too, or writing
                if attempt == 199:
                    raise
                time.sleep(0.025)
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        if busy_ms == 0:  # the loop's thread: never checkpoint in a commit (SyncWriter._checkpoint does)
            cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Readers take no write lock (WAL lets them run beside the one writer). Straight on
        # the DBAPI cursor: this runs once per transaction, several times per agent step.
        sql = "BEGIN" if conn.get_execution_options().get("signoff_readonly") else "BEGIN IMMEDIATE"
        cursor = conn.connection.dbapi_connection.cursor()
        try:
            cursor.execute(sql)
        except Exception as exc:
            raise DBAPIError.instance(sql, (), exc, sqlite3.Error) from exc
        finally:
            cursor.close()
