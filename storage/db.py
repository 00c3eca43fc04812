"""Engine and session factory for SQLite (embedded) and PostgreSQL (scale-out).

SQLite is run the way a multi-process deployment needs it: WAL journal, a busy
timeout, and every transaction opened with ``BEGIN IMMEDIATE`` so that a
read-then-write (the audit chain head, the ledger) can never deadlock into
``database is locked`` half way through.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import JSON, MetaData, event
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Session

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

    @classmethod
    def of(cls, engine: AsyncEngine) -> Database:
        observers: list[Observer] = []
        sessions = async_sessionmaker(engine, expire_on_commit=False, sync_session_class=ObservedSession,
                                      info={"observers": observers, "audit_head": {}})
        readers = async_sessionmaker(engine.execution_options(signoff_readonly=True), expire_on_commit=False)
        return cls(engine=engine, sessions=sessions, observers=observers, readers=readers)

    def reader(self) -> AsyncSession:
        """A session for reads (never write through it)."""
        return (self.readers or self.sessions)()

    def observe(self, observer: Observer) -> None:
        """Call ``observer(events)`` after each commit that appended audit events."""
        self.observers.append(observer)

    @property
    def is_postgres(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    async def dispose(self) -> None:
        await self.engine.dispose()


def is_sqlite_url(url: str) -> bool:
    return url.startswith("sqlite")


def _sqlite_pragmas(engine: AsyncEngine) -> None:
    sync_engine = engine.sync_engine

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide when transactions start.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Readers take no write lock (WAL lets them run beside the one writer).
        if conn.get_execution_options().get("signoff_readonly"):
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")


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
    return Database.of(engine)
