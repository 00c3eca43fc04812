"""Engine and session factory for SQLite (embedded) and PostgreSQL (scale-out).

SQLite is run the way a multi-process deployment needs it: WAL journal, a busy
timeout, and every transaction opened with ``BEGIN IMMEDIATE`` so that a
read-then-write (the audit chain head, the ledger) can never deadlock into
``database is locked`` half way through.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import JSON, Connection, Engine, MetaData, create_engine, event, make_url
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Session
from sqlalchemy.util import await_only

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
    #: SQLite only: one write transaction at a time among this process's connections.
    write_gate: WriteGate | None = None

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
        readers = async_sessionmaker(engine.execution_options(signoff_readonly=True), expire_on_commit=False)
        sqlite = engine.dialect.name == "sqlite"
        writer = SyncWriter.for_url(str(engine.url)) if sqlite else None
        database = engine.url.database if sqlite else None
        gate = gate_for(database) if database and database != ":memory:" else None
        return cls(
            engine=engine, sessions=sessions, observers=observers, readers=readers, sync_writer=writer, write_gate=gate
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
        ``run_sync``. Audit events ``fn`` appends reach the observers after commit.
        """
        ctx = WriteContext(audit_head=self.sessions.kw.get("info", {}).get("audit_head"))
        if self.sync_writer is not None:
            result = await self.sync_writer.run(fn, ctx)
        else:
            async with self.engine.begin() as conn:
                result = await conn.run_sync(lambda c: fn(c, ctx))
        if ctx.audit_events:
            for observer in self.observers:
                try:
                    observer(ctx.audit_events)
                except Exception:
                    log.exception("audit observer failed")
        return result

    def observe(self, observer: Observer) -> None:
        """Call ``observer(events)`` after each commit that appended audit events."""
        self.observers.append(observer)

    def announce(self, events: list[Any]) -> None:
        """Tell the observers about events that are deliberately *not* stored (a refusal that
        changes nothing still counts in the metrics)."""
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


class SyncWriter:
    """A stdlib ``sqlite3`` engine on one dedicated thread, for :meth:`Database.write`."""

    def __init__(self, engine: Engine, gate: WriteGate) -> None:
        self.engine = engine
        self.gate = gate
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="signoff-sqlite-writer")

    @classmethod
    def for_url(cls, async_url: str) -> SyncWriter | None:
        """A writer for a SQLite file at ``async_url``; ``None`` for an in-memory database."""
        url = make_url(async_url)
        if not url.database or url.database == ":memory:":
            return None  # an in-memory database is private to its connection
        engine = create_engine(url.set(drivername="sqlite"), connect_args={"timeout": 30, "check_same_thread": False})
        _sqlite_pragmas(engine)
        return cls(engine, gate_for(url.database))

    async def run(self, fn: Callable[[Connection, WriteContext], T], ctx: WriteContext) -> T:
        """Run ``fn`` in one write transaction on the writer's connection."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._tx, fn, ctx)

    def _tx(self, fn: Callable[[Connection, WriteContext], T], ctx: WriteContext) -> T:
        self.gate.take()
        try:
            with self.engine.begin() as conn:
                return fn(conn, ctx)
        finally:
            self.gate.give_back()

    def close(self) -> None:
        """Close the writer's connection."""
        self.engine.dispose()
        self._pool.shutdown(wait=False)


class WriteGate:
    """One write transaction at a time among one process's connections to a SQLite file.

    SQLite lets one writer in at a time; a second ``BEGIN IMMEDIATE`` waits in SQLite's
    busy handler, which polls in sleeps of up to 100 ms, so our own writers contending
    added up to seconds to two-millisecond transactions (Slack's acknowledgement waited
    behind the worker's turns). Queued on this lock instead, the next writer starts the
    moment the last one ends. The wait happens on a connection's own thread (the
    writer's thread, or aiosqlite's thread for that connection), never on the event loop.
    Other processes sharing the file still meet SQLite's lock and busy timeout.
    """

    def __init__(self, wait_s: float = 30.0) -> None:
        self.wait_s = wait_s
        self._lock = threading.Lock()
        #: The driver connection whose transaction holds the gate (async engine writers).
        self.holder: Any = None

    def try_take(self) -> bool:
        """Take the gate if it is free, without waiting."""
        return self._lock.acquire(blocking=False)

    def take(self) -> None:
        """Wait for the gate (at most ``wait_s``, as SQLite's busy timeout would); blocks the caller's thread."""
        if not self._lock.acquire(timeout=self.wait_s):
            raise sqlite3.OperationalError(f"database is locked (no write slot within {self.wait_s:g}s)")

    def give_back(self) -> None:
        """Give the gate back."""
        self.holder = None
        self._lock.release()


#: One gate per SQLite file in this process (every engine on that file shares it).
_GATES: dict[str, WriteGate] = {}
_GATES_LOCK = threading.Lock()


def gate_for(path: str) -> WriteGate:
    """The process's write gate for the SQLite file at ``path``."""
    key = os.path.realpath(path)
    with _GATES_LOCK:
        gate = _GATES.get(key)
        if gate is None:
            gate = _GATES[key] = WriteGate()
        return gate


def _gate_async_writers(sync_engine: Engine, gate: WriteGate) -> None:
    """Queue the async engine's write transactions on ``gate`` (see :class:`WriteGate`).

    Taken at ``BEGIN IMMEDIATE`` (at once when free; else waited for on the connection's own
    aiosqlite thread); given back once the transaction has really ended (after the driver's
    commit or rollback, not before), or when its connection goes back to the pool or is
    dropped mid-transaction (its owner was cancelled).
    """
    dialect = sync_engine.dialect
    commit, rollback = dialect.do_commit, dialect.do_rollback

    def ended(dbapi_conn: Any) -> None:
        if gate.holder is not None and gate.holder is dbapi_conn:
            gate.give_back()

    def do_commit(dbapi_conn: Any) -> None:
        try:
            commit(dbapi_conn)
        finally:
            ended(dbapi_conn)

    def do_rollback(dbapi_conn: Any) -> None:
        try:
            rollback(dbapi_conn)
        finally:
            ended(dbapi_conn)

    dialect.do_commit = do_commit  # type: ignore[method-assign,assignment]
    dialect.do_rollback = do_rollback  # type: ignore[method-assign,assignment]
    for name in ("checkin", "invalidate", "close"):
        event.listen(sync_engine.pool, name, lambda dbapi_conn, *_: ended(dbapi_conn))

    def acquire(conn: Any) -> None:
        dbapi_conn = conn.connection.dbapi_connection
        if gate.holder is dbapi_conn:
            return  # this connection holds it still (a COMMIT the driver did not see, e.g. Alembic's)
        if not gate.try_take():
            # Inside SQLAlchemy's greenlet on the event loop: wait on this connection's own thread.
            await_only(dbapi_conn._connection._execute(gate.take))
        gate.holder = dbapi_conn

    _ACQUIRE[sync_engine] = (acquire, lambda conn: ended(conn.connection.dbapi_connection))


#: Each async SQLite engine's (take the gate, give it back on a failed BEGIN) pair.
_ACQUIRE: weakref.WeakKeyDictionary[Engine, tuple[Callable[[Any], None], Callable[[Any], None]]] = (
    weakref.WeakKeyDictionary()
)


def is_sqlite_url(url: str) -> bool:
    """Whether ``url`` names a SQLite database."""
    return url.startswith("sqlite")


def _sqlite_pragmas(engine: AsyncEngine | Engine) -> None:
    sync_engine = engine.sync_engine if isinstance(engine, AsyncEngine) else engine

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide when transactions start.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA busy_timeout=30000")
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
        cursor.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Readers take no write lock (WAL lets them run beside the one writer).
        if conn.get_execution_options().get("signoff_readonly"):
            conn.exec_driver_sql("BEGIN")
            return
        gate = _ACQUIRE.get(sync_engine)
        if gate is not None:
            gate[0](conn)
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            if gate is not None:
                gate[1](conn)
            raise


def create_database(url: str, *, echo: bool = False, pool_size: int = 10) -> Database:
    """Build the engine for ``url``; SQLite gets WAL + ``BEGIN IMMEDIATE``."""
    kwargs: dict[str, Any] = {"echo": echo}
    if is_sqlite_url(url):
        kwargs["connect_args"] = {"timeout": 30}
    else:
        kwargs["pool_size"] = pool_size
        kwargs["max_overflow"] = pool_size
        kwargs["pool_pre_ping"] = True
    engine = create_async_engine(url, **kwargs)
    if is_sqlite_url(url):
        _sqlite_pragmas(engine)
        database = make_url(url).database
        if database and database != ":memory:":
            _gate_async_writers(engine.sync_engine, gate_for(database))
    return Database.of(engine)
