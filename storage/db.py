"""Engine and session factory for SQLite (embedded) and PostgreSQL (scale-out).

SQLite is run the way a multi-process deployment needs it: WAL journal, a busy
timeout, and every transaction opened with ``BEGIN IMMEDIATE`` so that a
read-then-write (the audit chain head, the ledger) can never deadlock into
``database is locked`` half way through.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar

from sqlalchemy import JSON, Connection, Engine, MetaData, create_engine, event, make_url, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Session

from storage.fastsql import FastConnection
from storage.faults import FaultKind, FaultListener, noted, rerunnable, until_available
from storage.inline import BUSY_POLL_S, inline_connect, is_busy
from storage.pool_ping import ping_on_checkout

log = logging.getLogger(__name__)

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

#: JSON everywhere, JSONB on PostgreSQL.
JSONType = JSON().with_variant(JSONB(), "postgresql")


class Base(DeclarativeBase):
    """Declarative base shared by the runtime tables and the sandbox store tables."""

    metadata = MetaData(naming_convention=NAMING)


#: Called after commit with the audit events that transaction appended.
Observer = Callable[[list[Any]], None]


class ObservedSession(Session):
    """A session that tells observers about committed audit events (metrics)."""


@event.listens_for(ObservedSession, "after_commit")
def _after_commit(session: Session) -> None:
    events = session.info.pop("audit_events", None)
    if not events:
        return
    for observer in session.info.get("observers", ()):
        try:
            observer(events)
        except Exception:  # an observer never breaks a committed write
            log.exception("audit observer failed")


@event.listens_for(ObservedSession, "after_rollback")
def _after_rollback(session: Session) -> None:
    session.info.pop("audit_events", None)


def _read_engine(engine: AsyncEngine) -> AsyncEngine:
    """Reads on SQLite begin DEFERRED (no write lock). On PostgreSQL they run in autocommit: at
    READ COMMITTED, the isolation signoff runs at, every statement takes its own snapshot inside a
    transaction too, so a read's ``BEGIN`` and ``ROLLBACK`` bought nothing but two round trips."""
    if engine.dialect.name == "postgresql":
        return engine.execution_options(isolation_level="AUTOCOMMIT")
    return engine.execution_options(signoff_readonly=True)


@dataclass(frozen=True, kw_only=True)
class Database:
    """An engine plus its session factory; the only handle repositories receive."""

    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    observers: list[Observer] = field(default_factory=list)
    #: Sessions for reads only: on SQLite they begin DEFERRED, taking no write lock.
    readers: async_sessionmaker[AsyncSession] | None = None
    #: SQLite only: the stdlib-driver writer behind :meth:`write`.
    sync_writer: SyncWriter | None = None
    #: Told of each database outage :meth:`fault` classifies (the metrics count them by kind).
    fault_listeners: list[FaultListener] = field(default_factory=list)
    #: The engine reads go through (:func:`_read_engine`).
    read_engine: AsyncEngine | None = None

    @classmethod
    def of(cls, engine: AsyncEngine) -> Database:
        """A Database over an engine built elsewhere."""
        observers: list[Observer] = []
        sessions = async_sessionmaker(
            engine,
            expire_on_commit=False,
            sync_session_class=ObservedSession,
            info={"observers": observers, "audit_head": {}},
        )
        read_engine = _read_engine(engine)
        readers = async_sessionmaker(read_engine, expire_on_commit=False)
        writer = SyncWriter.for_url(str(engine.url)) if engine.dialect.name == "sqlite" else None
        return cls(
            engine=engine,
            sessions=sessions,
            observers=observers,
            readers=readers,
            sync_writer=writer,
            read_engine=read_engine,
        )

    def reader(self) -> AsyncSession:
        """A session for reads (never write through it)."""
        return (self.readers or self.sessions)()

    async def write(self, fn: Callable[[Connection, WriteContext], T]) -> T:
        """Run ``fn(connection, ctx)`` in one transaction, in one hop.

        The hot path (the loop's step writes) is plain Core on a sync
        connection. On SQLite it runs on a dedicated thread with the stdlib
        driver — one thread hop per transaction instead of several per
        statement; on PostgreSQL it runs through the async engine's
        ``run_sync``. Either way ``fn`` gets a :class:`~storage.fastsql.FastConnection`:
        prepared statements run on the DBAPI cursor. Audit events ``fn`` appends reach the
        observers after commit.
        """
        ctx = self._context()
        if self.sync_writer is not None:
            result = await self.sync_writer.run(fn, ctx)
        else:
            async with self.engine.begin() as conn:
                result = await conn.run_sync(lambda c: fn(FastConnection(c), ctx))  # type: ignore[arg-type]
        if ctx.audit_events:
            self.announce(ctx.audit_events)
        return result

    def _context(self) -> WriteContext:
        """A write's context: the process's cached audit heads (kept in the sessions' info)."""
        return WriteContext(audit_head=self.sessions.kw.get("info", {}).get("audit_head"))

    async def write_statement(self, fn: Callable[[Connection, WriteContext], T]) -> T:
        """Run ``fn(connection, ctx)``, which makes at most one statement: on PostgreSQL in
        autocommit (the statement is its own transaction: no ``BEGIN``/``COMMIT`` round trips);
        on SQLite as :meth:`write`. A second statement raises before it runs. Audit events
        ``fn`` appends reach the observers after it."""
        if not self.is_postgres:
            return await self.write(fn)
        ctx = self._context()
        # In autocommit, begin() sends nothing; it marks the write for the engine's listeners.
        async with (self.read_engine or _read_engine(self.engine)).begin() as conn:
            result = await conn.run_sync(lambda c: fn(FastConnection(c, single=True), ctx))  # type: ignore[arg-type]
        if ctx.audit_events:
            self.announce(ctx.audit_events)
        return result

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(connection)`` in one read-only transaction, in one hop.

        On a SQLite file it runs on the event loop's thread with the stdlib driver; on
        PostgreSQL through the async engine's ``run_sync``, in autocommit. Prepared statements
        run straight on the cursor (:mod:`storage.fastsql`). Never write through it."""
        if self.sync_writer is not None:
            return await self.sync_writer.read(fn)
        async with (self.read_engine or _read_engine(self.engine)).connect() as conn:
            return await conn.run_sync(lambda c: fn(FastConnection(c)))  # type: ignore[arg-type]

    def fault(self, exc: BaseException) -> FaultKind | None:
        """The outage ``exc`` means (``None``: not one), counted by the fault listeners."""
        return noted(exc, self.fault_listeners)

    async def until_available(self, fn: Callable[[], Awaitable[T]], *, budget_s: float | None, what: str) -> T:
        """``await fn()``, retried with backoff while this database is unavailable (see
        :func:`storage.faults.until_available`)."""
        return await until_available(fn, budget_s=budget_s, what=what, listeners=self.fault_listeners)

    @rerunnable
    async def ping(self) -> None:
        """One trivial round trip (``SELECT 1``): raises when the database does not answer."""
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    def observe(self, observer: Observer) -> None:
        """Call ``observer(events)`` after each commit that appended audit events."""
        self.observers.append(observer)

    def announce(self, events: list[Any]) -> None:
        """Tell the observers about events: those a write committed, and those deliberately
        *not* stored (a refusal that changes nothing still counts in the metrics)."""
        for observer in self.observers:
            try:
                observer(events)
            except Exception:  # an observer never breaks the caller
                log.exception("audit observer failed")

    @property
    def is_postgres(self) -> bool:
        """Whether the engine is PostgreSQL (else SQLite)."""
        return self.engine.dialect.name == "postgresql"

    async def dispose(self) -> None:
        """Close the engine's connections."""
        await self.engine.dispose()
        if self.sync_writer is not None:
            self.sync_writer.close()


T = TypeVar("T")


@dataclass(kw_only=True)
class WriteContext:
    """Per-transaction state a :meth:`Database.write` function may use."""

    #: The process's cached audit chain head (see ``storage.audit``).
    audit_head: dict[str, Any] | None = None
    #: Audit events appended in this transaction, for the observers.
    audit_events: list[Any] = field(default_factory=list)


#: A function :meth:`Database.write` runs in one transaction.
WriteFn: TypeAlias = Callable[[Connection, WriteContext], T]


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
        _sqlite_pragmas(engine)
        inline = create_engine(sync_url, connect_args={"timeout": 0, "check_same_thread": False}, pool_size=2)
        _sqlite_pragmas(inline, busy_ms=0)
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

    async def run(self, fn: Callable[[Connection, WriteContext], T], ctx: WriteContext) -> T:
        """Run ``fn`` in one write transaction: inline if the lock is free, else on the writer thread."""
        if self.inline is not None:
            ran, result = self._inline(self._kept("writer"), lambda c: fn(c, ctx))
            if ran:
                self._maybe_checkpoint()
                return result  # type: ignore[return-value]
            self.handoffs += 1
            for delay in BUSY_POLL_S:  # another process writes: poll for the lock here first
                await asyncio.sleep(delay)
                ran, result = self._inline(self._kept("writer"), lambda c: fn(c, ctx))
                if ran:
                    return result  # type: ignore[return-value]
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._patient, False, lambda c: fn(c, ctx))

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
            tx = conn.begin()  # BEGIN IMMEDIATE, or BEGIN for a reader (see _sqlite_pragmas)
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


def _sqlite_pragmas(engine: AsyncEngine | Engine, *, busy_ms: int = 30_000) -> None:
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


#: Connections the SQLite file's async engine keeps open (as many again may open for a burst).
SQLITE_POOL = 32


def create_database(url: str, *, echo: bool = False, pool_size: int = 10) -> Database:
    """Build the engine for ``url``; SQLite gets WAL + ``BEGIN IMMEDIATE``."""
    kwargs: dict[str, Any] = {"echo": echo}
    if is_sqlite_url(url):
        kwargs["connect_args"] = {"timeout": 30}
        path = make_url(url).database
        if path and path != ":memory:" and not path.startswith("file:"):
            # Statements run on the loop's thread; a busy file sends the call to a thread.
            kwargs["async_creator"] = lambda: inline_connect(path)
            # Each connection has a thread of its own (aiosqlite): kept, not opened and closed
            # per request when a burst of requests each holds one.
            kwargs["pool_size"] = SQLITE_POOL
            kwargs["max_overflow"] = SQLITE_POOL
    else:
        kwargs["pool_size"] = pool_size
        kwargs["max_overflow"] = pool_size
    engine = create_async_engine(url, **kwargs)
    if is_sqlite_url(url):
        _sqlite_pragmas(engine, busy_ms=0 if "async_creator" in kwargs else 30_000)
    else:
        ping_on_checkout(engine)  # pool_pre_ping, in one round trip instead of three
    return Database.of(engine)
