"""Hot statements compiled once and run on the stdlib sqlite3 cursor (SQLite only).

SQLAlchemy's per-execution work (cache key, parameter processing, result set setup) costs
several times what SQLite itself takes for the short statements of an agent step. A
statement built once at import and marked with :func:`prepared` is compiled for SQLite the
first time it runs with a given set of parameter keys — with SQLAlchemy's own bind and
result processors, so values are stored and read back exactly as SQLAlchemy stores them
(the audit chain's hashes depend on it) — and from then on runs straight on the DBAPI
cursor of the same connection, inside the same transaction.

:class:`FastConnection` is what :meth:`storage.db.Database.write` and
:meth:`~storage.db.Database.read` hand their functions on SQLite; any statement not marked
(or one needing Python-side defaults, or expanding ``IN``) goes through SQLAlchemy as before.
On PostgreSQL functions get the SQLAlchemy connection itself.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Connection, literal
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.base import Executable

S = TypeVar("S", bound=Executable)

_PREPARED: dict[int, Executable] = {}
_PLANS: dict[tuple[int, tuple[str, ...]], _Plan | None] = {}

#: Optional observer of each statement run on the raw cursor (benchmarks count them).
TRACE: list[Callable[[str], None]] = []


def one_of(column: Any, values: Sequence[Any]) -> Any:
    """``column IN (v1, v2, ...)`` with one bound parameter per value, so a statement built once
    with it needs no expansion at run time (``in_`` on a list expands on every execution)."""
    return column.in_([literal(v, type_=column.type) for v in values])


class Unsupported(Exception):
    """A statement the raw cursor path cannot run as it is: the caller runs the whole
    function again through SQLAlchemy (reads have no effect; a write's transaction was
    rolled back first)."""


def prepared(stmt: S) -> S:
    """Mark ``stmt`` (built once, kept for the process) for the compiled-once fast path."""
    _PREPARED[id(stmt)] = stmt
    return stmt


class _Row(tuple):  # type: ignore[type-arg]
    """A result row: a tuple whose columns are attributes too (like SQLAlchemy's ``Row``)."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[self._fields.index(name)]
        except ValueError:
            raise AttributeError(name) from None

    @property
    def _mapping(self) -> dict[str, Any]:
        return dict(zip(self._fields, self, strict=True))

    def _asdict(self) -> dict[str, Any]:
        return self._mapping


@functools.cache
def _row_type(fields: tuple[str, ...]) -> type[_Row]:
    return type("Row", (_Row,), {"__slots__": (), "_fields": fields})


@dataclass(frozen=True)
class _Plan:
    sql: str
    names: tuple[str, ...]
    binds: tuple[Callable[[Any], Any] | None, ...]
    fixed: dict[str, Any]
    results: tuple[Callable[[Any], Any] | None, ...] | None
    row: type[_Row] | None

    def args(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        out = []
        for name, proc in zip(self.names, self.binds, strict=True):
            value = params[name] if name in params else self.fixed[name]
            out.append(value if proc is None or value is None else proc(value))
        return tuple(out)

    def rows(self, raw: Sequence[Sequence[Any]]) -> list[_Row]:
        assert self.results is not None and self.row is not None
        procs, row = self.results, self.row
        return [row(v if p is None or v is None else p(v) for p, v in zip(procs, r, strict=True)) for r in raw]


def _plan(stmt: Executable, keys: tuple[str, ...], dialect: Any) -> _Plan | None:
    compiled = stmt.compile(dialect=dialect, column_keys=list(keys) or None)  # type: ignore[attr-defined]
    if compiled.insert_prefetch or compiled.update_prefetch or "POSTCOMPILE" in compiled.string:
        return None  # Python-side defaults or expanding IN: SQLAlchemy does those
    names = tuple(compiled.positiontup or ())
    processors = compiled._bind_processors
    fixed = {}
    for name in names:
        if name not in keys:
            bind = compiled.binds[name]
            if bind.required or bind.callable is not None:
                return None  # a parameter the caller did not give: SQLAlchemy says so
            fixed[name] = bind.value
    results = row = None
    columns = compiled._result_columns
    if columns:
        results = tuple(c[3]._cached_result_processor(dialect, None) for c in columns)
        row = _row_type(tuple(c[0] for c in columns))
    return _Plan(
        sql=compiled.string,
        names=names,
        binds=tuple(processors.get(n) for n in names),
        fixed=fixed,
        results=results,
        row=row,
    )


def plan_for(stmt: Executable, params: Mapping[str, Any] | None, dialect: Any) -> _Plan | None:
    """The compiled plan for a prepared ``stmt`` with these parameter keys, or ``None``."""
    sid = id(stmt)
    if _PREPARED.get(sid) is not stmt:
        return None
    key = (sid, tuple(params) if params else ())
    try:
        return _PLANS[key]
    except KeyError:
        plan = _PLANS[key] = _plan(stmt, key[1], dialect)
        return plan


def _run(cur: Any, plan: _Plan, params: Any) -> FastResult:
    """Execute ``plan`` on the DBAPI cursor (``params`` a list: executemany)."""
    many = isinstance(params, list)
    for trace in TRACE:
        trace(plan.sql)
    args: Any = [plan.args(p) for p in params] if many else plan.args(params or {})
    try:
        if many:
            cur.executemany(plan.sql, args)
        else:
            cur.execute(plan.sql, args)
    except sqlite3.Error as exc:
        # The same exceptions SQLAlchemy raises (IntegrityError, OperationalError, ...).
        raise DBAPIError.instance(plan.sql, args, exc, sqlite3.Error) from exc
    if many or cur.description is None:
        return FastResult([], cur.rowcount)
    if plan.results is None:  # textual SQL: the columns the cursor names, unprocessed
        row = _row_type(tuple(d[0] for d in cur.description))
        return FastResult([row(r) for r in cur.fetchall()], cur.rowcount)
    return FastResult(plan.rows(cur.fetchall()), cur.rowcount)


class FastResult:
    """The part of SQLAlchemy's result API the repositories use."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[_Row], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def all(self) -> list[_Row]:
        """Every row."""
        return self._rows

    def first(self) -> _Row | None:
        """The first row, or ``None``."""
        return self._rows[0] if self._rows else None

    def one(self) -> _Row:
        """The one row (else SQLAlchemy's error)."""
        if len(self._rows) != 1:
            from sqlalchemy.exc import MultipleResultsFound, NoResultFound

            raise (NoResultFound if not self._rows else MultipleResultsFound)("expected one row")
        return self._rows[0]

    def one_or_none(self) -> _Row | None:
        """The one row or ``None``."""
        if len(self._rows) > 1:
            from sqlalchemy.exc import MultipleResultsFound

            raise MultipleResultsFound("expected at most one row")
        return self._rows[0] if self._rows else None

    def scalar(self) -> Any:
        """The first column of the first row, or ``None``."""
        return self._rows[0][0] if self._rows else None

    def scalar_one(self) -> Any:
        """The first column of the one row."""
        return self.one()[0]

    def scalar_one_or_none(self) -> Any:
        """The first column of the one row, or ``None``."""
        row = self.one_or_none()
        return None if row is None else row[0]

    def scalars(self) -> FastResult:
        """The first column of every row."""
        return FastResult([r[0] for r in self._rows], self.rowcount)  # type: ignore[misc]

    def __iter__(self) -> Any:
        return iter(self._rows)


class FastConnection:
    """A SQLAlchemy connection whose prepared statements run straight on its DBAPI cursor."""

    def __init__(self, conn: Connection) -> None:
        self.sa = conn
        self.dialect = conn.dialect
        self._cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]

    def execute(self, stmt: Any, params: Any = None) -> Any:
        """Run ``stmt``; a prepared one on the cursor, anything else through SQLAlchemy."""
        first = params[0] if isinstance(params, list) and params else params
        plan = plan_for(stmt, first, self.dialect)
        if plan is None or params == []:
            return self.sa.execute(stmt, params)
        return _run(self._cursor, plan, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sa, name)


class RawConnection:
    """A stdlib sqlite3 connection inside a transaction the caller opened, for functions
    written against SQLAlchemy's ``Connection`` that run only prepared statements.

    Anything else raises :class:`Unsupported` (the caller then runs the function through
    SQLAlchemy): an unprepared statement, or any other ``Connection`` API."""

    def __init__(self, raw: sqlite3.Connection, dialect: Any) -> None:
        self.dialect = dialect
        self._cursor = raw.cursor()

    def execute(self, stmt: Any, params: Any = None) -> Any:
        """Run a prepared ``stmt`` on the cursor."""
        first = params[0] if isinstance(params, list) and params else params
        plan = plan_for(stmt, first, self.dialect)
        if plan is None or params == []:
            raise Unsupported(type(stmt).__name__)
        return _run(self._cursor, plan, params)

    def __getattr__(self, name: str) -> Any:
        raise Unsupported(name)


__all__ = ["FastConnection", "FastResult", "RawConnection", "Unsupported", "one_of", "plan_for", "prepared"]
