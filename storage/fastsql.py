"""Hot statements compiled once and run on the connection's DBAPI cursor.

SQLAlchemy's per-execution work (cache key, parameter processing, result set setup) costs
several times what SQLite itself takes for the short statements of an agent step. A
statement built once at import and marked with :func:`prepared` carries its own plans (in
its execution options: no registry, nothing keyed by ``id``). The first time it runs with a
given dialect and set of parameter keys it is compiled for that dialect and its plan is made from public API
only — ``TypeEngine.dialect_impl(dialect).bind_processor(dialect)`` and
``.result_processor(dialect, None)`` for each bound parameter and each column of
``selected_columns`` (``effective_returning`` for RETURNING) — so values are stored and read
back exactly as SQLAlchemy stores them (the audit chain's hashes depend on it). From then on
it runs straight on the DBAPI cursor of the same connection, inside the same transaction:
the stdlib ``sqlite3`` cursor, or on PostgreSQL the cursor of SQLAlchemy's DBAPI adapter over
asyncpg (which keeps asyncpg's prepared statements per connection). The statement text carries
the dialect's casts, so nothing else is set per execution.

:class:`FastConnection` is what :meth:`storage.db.Database.write` and
:meth:`~storage.db.Database.read` hand their functions on either database: a prepared
statement runs on the cursor, anything else (a statement not marked, one needing Python-side
defaults or expanding ``IN``) through SQLAlchemy on the same connection — never by running the
function again. A driver error becomes the exception SQLAlchemy raises for it.
``tests/test_fast_path_contract.py`` fails when a SQLAlchemy release changes what the plans
rely on; ``tests/test_pg_fast_path.py`` runs the same checks on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Connection, literal
from sqlalchemy.exc import DBAPIError, MultipleResultsFound, NoResultFound, StatementError
from sqlalchemy.sql.base import Executable

S = TypeVar("S", bound=Executable)

#: The execution option that carries a prepared statement's plans.
OPTION = "signoff_plans"

#: What a read transaction runs first: reading the database header takes its WAL snapshot.
SNAPSHOT = "PRAGMA schema_version"

#: Optional observer of each statement run on the raw cursor (benchmarks count them).
TRACE: list[Callable[[str], None]] = []


@contextlib.contextmanager
def traced() -> Iterator[list[str]]:
    """The SQL of each prepared statement run while the block lasts (tests and benchmarks)."""
    seen: list[str] = []
    TRACE.append(seen.append)
    try:
        yield seen
    finally:
        TRACE.remove(seen.append)


def one_of(column: Any, values: Sequence[Any]) -> Any:
    """``column IN (v1, v2, ...)`` with one bound parameter per value, so a statement built once
    with it needs no expansion at run time (``in_`` on a list expands on every execution)."""
    return column.in_([literal(v, type_=column.type) for v in values])


class Plans:
    """One prepared statement's plans, by dialect and the keys of its parameters."""

    __slots__ = ("by_keys", "owner")

    def __init__(self) -> None:
        self.by_keys: dict[tuple[str, tuple[str, ...]], _Plan | None] = {}
        #: The statement these plans belong to (a statement derived from it, e.g. by
        #: ``.where()``, carries the same options but is not its owner: it is not prepared).
        self.owner: Any = None


def prepared(stmt: S) -> S:
    """``stmt`` (built once, kept for the process) marked for the compiled-once fast path."""
    plans = Plans()
    marked = stmt.execution_options(**{OPTION: plans})
    plans.owner = marked
    return marked


def plans_of(stmt: Any) -> Plans | None:
    """The plans of a prepared ``stmt``; ``None`` for any other statement."""
    options = getattr(stmt, "get_execution_options", None)
    plans = options().get(OPTION) if options is not None else None
    return plans if plans is not None and plans.owner is stmt else None


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


def _columns(stmt: Any, compiled: Any) -> Any:
    """The columns a statement returns (public API): a SELECT's ``selected_columns``, a DML
    statement's ``effective_returning``; ``None`` for textual SQL or no rows."""
    if compiled.isinsert or compiled.isupdate or compiled.isdelete:
        return compiled.effective_returning
    return getattr(stmt, "selected_columns", None)


def make_plan(stmt: Executable, keys: tuple[str, ...], dialect: Any) -> _Plan | None:
    """The plan of ``stmt`` for these parameter keys, or ``None`` when SQLAlchemy must run it."""
    compiled = stmt.compile(dialect=dialect, column_keys=list(keys) or None)  # type: ignore[attr-defined]
    if compiled.insert_prefetch or compiled.update_prefetch or "POSTCOMPILE" in compiled.string:
        return None  # Python-side defaults or expanding IN: SQLAlchemy does those
    names = tuple(compiled.positiontup or ())
    fixed = {}
    for name in names:
        if name not in keys:
            bind = compiled.binds[name]
            if bind.required or bind.callable is not None:
                return None  # a parameter the caller did not give: SQLAlchemy says so
            fixed[name] = bind.value
    binds = tuple(compiled.binds[n].type.dialect_impl(dialect).bind_processor(dialect) for n in names)
    results = row = None
    columns = _columns(stmt, compiled)
    if columns is not None:
        columns = list(columns)
        results = tuple(c.type.dialect_impl(dialect).result_processor(dialect, None) for c in columns)
        row = _row_type(tuple(c.key for c in columns))
    return _Plan(sql=compiled.string, names=names, binds=binds, fixed=fixed, results=results, row=row)


def plan_for(stmt: Executable, params: Mapping[str, Any] | None, dialect: Any) -> _Plan | None:
    """The compiled plan for a prepared ``stmt`` with these parameter keys, or ``None``."""
    plans = plans_of(stmt)
    if plans is None:
        return None
    keys = tuple(params) if params else ()
    try:
        return plans.by_keys[dialect.name, keys]
    except KeyError:
        plan = plans.by_keys[dialect.name, keys] = make_plan(stmt, keys, dialect)
        return plan


def _run(fast: FastConnection, plan: _Plan, params: Any) -> FastResult:
    """Execute ``plan`` on the DBAPI cursor (``params`` a list: executemany)."""
    many = isinstance(params, list)
    for trace in TRACE:
        trace(plan.sql)
    args: Any = [plan.args(p) for p in params] if many else plan.args(params or {})
    cur = fast._cursor
    try:
        if many:
            cur.executemany(plan.sql, args)
        else:
            cur.execute(plan.sql, args)
    except fast._errors as exc:
        raise fast.error(plan.sql, args, exc) from exc
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
            raise (NoResultFound if not self._rows else MultipleResultsFound)("expected one row")
        return self._rows[0]

    def one_or_none(self) -> _Row | None:
        """The one row or ``None``."""
        if len(self._rows) > 1:
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
    """A SQLAlchemy connection whose prepared statements run straight on its DBAPI cursor;
    anything else runs through SQLAlchemy, on the same connection and transaction."""

    __slots__ = ("_cursor", "_errors", "_left", "dialect", "sa")

    def __init__(self, conn: Connection, *, single: bool = False) -> None:
        self.sa = conn
        self.dialect = conn.dialect
        #: With ``single``, the statements it may still run (one, in autocommit: see
        #: ``Database.write_statement``); ``None``: no bound.
        self._left: int | None = 1 if single else None
        # The DBAPI connection: sqlite3's own, or SQLAlchemy's DBAPI adapter over asyncpg.
        self._cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        self._errors: type[Exception] = conn.dialect.loaded_dbapi.Error

    def execute(self, stmt: Any, params: Any = None) -> Any:
        """Run ``stmt``; a prepared one on the cursor, anything else through SQLAlchemy."""
        if self._left is not None:
            if self._left == 0:
                raise RuntimeError("a second statement where one, in autocommit, was promised")
            self._left -= 1
        first = params[0] if isinstance(params, list) and params else params
        plan = plan_for(stmt, first, self.dialect)
        if plan is None or params == []:
            return self.sa.execute(stmt, params)
        return _run(self, plan, params)

    def error(self, sql: str, args: Any, exc: Exception) -> StatementError:
        """The exception SQLAlchemy raises for the driver's ``exc`` (``IntegrityError``,
        ``OperationalError``, …); a lost connection is invalidated, as SQLAlchemy does, so the
        pool never hands it out again."""
        lost = self.dialect.is_disconnect(exc, self.sa.connection.dbapi_connection, self._cursor)  # type: ignore[arg-type]
        if lost:
            self.sa.invalidate(exc)
        return DBAPIError.instance(sql, args, exc, self._errors, connection_invalidated=lost, dialect=self.dialect)

    def snapshot(self) -> None:
        """Take a read transaction's WAL snapshot now (:data:`SNAPSHOT`, SQLite), so that the
        rare ``SQLITE_BUSY`` of a reader is met here, before any function runs."""
        try:
            self._cursor.execute(SNAPSHOT).fetchall()  # a statement left unfinished keeps the snapshot
        except sqlite3.Error as exc:
            raise DBAPIError.instance(SNAPSHOT, (), exc, sqlite3.Error) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sa, name)


__all__ = [
    "FastConnection",
    "FastResult",
    "make_plan",
    "one_of",
    "plan_for",
    "plans_of",
    "prepared",
]
