"""Engine and session factory for SQLite (embedded) and PostgreSQL (scale-out).

How SQLite is run (WAL, ``BEGIN IMMEDIATE``, the stdlib-driver writer) is in
:mod:`storage.sqlite`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar

from sqlalchemy import JSON, Connection, MetaData, event, make_url, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Session

from storage.fastsql import FastConnection
from storage.faults import FaultKind, FaultListener, noted, rerunnable, until_available
from storage.inline import inline_connect
from storage.notify import Handler, Notifications
from storage.pool_ping import ping_on_checkout
from storage.sqlite import SyncWriter, is_sqlite_url, sqlite_pragmas

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
    #: PostgreSQL only: other processes' jobs and widget events, heard as they commit.
    notifications: Notifications | None = None

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
            notifications=Notifications(engine) if engine.dialect.name == "postgresql" else None,
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
            result = await self.sync_writer.run(lambda c: fn(c, ctx))
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

    def heard(self, channel: str, handler: Handler) -> contextlib.AbstractContextManager[None]:
        """While the block lasts, ``handler`` hears ``channel``'s notifications from every process
        (:mod:`storage.notify`; on PostgreSQL; on SQLite it hears nothing)."""
        if self.notifications is None:
            return contextlib.nullcontext()
        return self.notifications.subscribe(channel, handler)

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
        if self.notifications is not None:
            await self.notifications.close()
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
        sqlite_pragmas(engine, busy_ms=0 if "async_creator" in kwargs else 30_000)
    else:
        ping_on_checkout(engine)  # pool_pre_ping, in one round trip instead of three
    return Database.of(engine)
