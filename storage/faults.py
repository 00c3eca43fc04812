"""Which database errors mean "the database is unavailable right now", and riding them out.

A restart, a terminated connection, a read-only window, a full pool: nothing was decided by the
database, and the same statement will succeed once it is back. Everything else (a constraint, a
bug, a lost race) is not an outage. :func:`fault_kind` tells them apart by walking the
exception's chain (SQLAlchemy wraps the driver's error, asyncpg's carries its SQLSTATE), so the
runtime can answer 503 instead of 500 and retry instead of giving up.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

log = logging.getLogger(__name__)

#: What kind of outage: the metric ``signoff_database_errors_total`` counts by it.
FaultKind = Literal["connection", "shutdown", "read_only", "pool_timeout"]

#: SQLSTATEs (PostgreSQL) that name an outage, by class or by code.
_SQLSTATE: dict[str, FaultKind] = {
    "08": "connection",  # connection exception (the whole class)
    "57P01": "shutdown",  # admin_shutdown: the server is stopping, or pg_terminate_backend
    "57P02": "shutdown",  # crash_shutdown
    "57P03": "shutdown",  # cannot_connect_now: starting up or shutting down
    "25006": "read_only",  # read_only_sql_transaction
    "53300": "connection",  # too_many_connections
}

#: Told of each outage seen, by kind (the metrics count them; see ``Database.fault_listeners``).
FaultListener = Callable[[FaultKind], None]


def fault_kind(exc: BaseException) -> FaultKind | None:
    """The outage ``exc`` means, or ``None`` when it is not one (a bug, a constraint, a race)."""
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            return None
        kind = _own_kind(seen)
        if kind is not None:
            return kind
        seen = seen.__cause__ or seen.__context__
    return None


def _own_kind(exc: BaseException) -> FaultKind | None:
    if isinstance(exc, PoolTimeout):
        return "pool_timeout"
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return "connection"
        return _own_kind(exc.orig) if exc.orig is not None and exc.orig is not exc else None
    state = getattr(exc, "sqlstate", None)
    if isinstance(state, str):
        return _SQLSTATE.get(state) or _SQLSTATE.get(state[:2])
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc).lower()
        return "read_only" if "readonly" in text else ("connection" if "disk i/o" in text else None)
    name = type(exc).__name__
    if isinstance(exc, ConnectionError | OSError) or name in ("InterfaceError", "ConnectionDoesNotExistError"):
        # asyncpg's "connection is closed" / "connection was closed in the middle of operation"
        return "connection"
    return None


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` means the database is unavailable right now (try again later)."""
    return fault_kind(exc) is not None


def noted(exc: BaseException, listeners: Sequence[FaultListener] = ()) -> FaultKind | None:
    """:func:`fault_kind`, told to ``listeners`` when it is an outage."""
    kind = fault_kind(exc)
    if kind is not None:
        for listener in listeners:
            try:
                listener(kind)
            except Exception:  # a listener never breaks the caller
                log.exception("database fault listener failed")
    return kind


T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

#: The attribute :func:`rerunnable` sets.
RERUNNABLE = "signoff_rerunnable"


def rerunnable(fn: F) -> F:
    """Mark ``fn`` as safe to run again from the start after its transaction was rolled back
    (no effect outside the database, nothing kept from an attempt that did not commit).
    :func:`until_available` runs nothing else again; ``tests/test_rerunnable.py`` runs each
    marked storage function twice on an aborted transaction."""
    setattr(getattr(fn, "__func__", fn), RERUNNABLE, True)
    return fn


def is_rerunnable(fn: Any) -> bool:
    """Whether ``fn`` was marked with :func:`rerunnable` (a bound method: its function)."""
    return bool(getattr(getattr(fn, "__func__", fn), RERUNNABLE, False))


#: Backoff between attempts: the first pause, doubling up to the last.
FIRST_PAUSE_S, MAX_PAUSE_S = 0.05, 2.0


async def until_available(
    fn: Callable[[], Awaitable[T]],
    *,
    budget_s: float | None,
    what: str,
    first_s: float = FIRST_PAUSE_S,
    listeners: Sequence[FaultListener] = (),
) -> T:
    """``await fn()``, again with backoff while the database is unavailable, for at most
    ``budget_s`` seconds (``None``: until it succeeds). Any other error, or the last outage
    once the budget is spent, is raised. Only a function marked :func:`rerunnable` is run
    again (any other is refused with ``TypeError`` before it runs)."""
    if not is_rerunnable(fn):
        raise TypeError(f"{what}: {fn!r} is not marked rerunnable; it must not run again after an outage")
    loop = asyncio.get_running_loop()
    deadline = None if budget_s is None else loop.time() + budget_s
    pause = first_s
    attempt = 0
    while True:
        try:
            return await fn()
        except Exception as exc:
            kind = noted(exc, listeners)
            if kind is None or (deadline is not None and loop.time() + pause > deadline):
                raise
            attempt += 1
            if attempt in (1, 10) or attempt % 50 == 0:
                log.warning("%s: database unavailable (%s), attempt %d; retrying", what, kind, attempt)
        await asyncio.sleep(pause)
        pause = min(pause * 2, MAX_PAUSE_S)


__all__ = [
    "FaultKind",
    "FaultListener",
    "fault_kind",
    "is_rerunnable",
    "is_unavailable",
    "noted",
    "rerunnable",
    "until_available",
]
