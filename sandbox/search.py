"""Full-text search over knowledge sections, built into the database.

SQLite: an external-content FTS5 table (``porter unicode61``) kept in step with
``store_knowledge_sections`` by triggers, ranked with ``bm25``. PostgreSQL: a
stored generated ``tsvector`` column (title weighted A, text B) with a GIN
index, ranked with ``ts_rank``.

The DDL is installed three ways, all through the functions here:
``install_fts(op.get_bind())`` from the Alembic revision ``0002_store``;
``after_create``/``before_drop`` hooks (see :func:`register`) so that
``Base.metadata.create_all`` in tests builds it too; and :func:`ensure_fts`
for an existing database. Changing this DDL needs a new Alembic revision.

User text never reaches the FTS query language: :func:`query_terms` keeps only
word characters, and each term is quoted (SQLite) or OR-ed as a bare lexeme
(PostgreSQL), so ``"refund" OR ) NEAR(`` is just the words ``refund``, ``or``
and ``near``.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from sqlalchemy import Connection, Table, TextClause, event, text
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.fastsql import prepared

SECTIONS = "store_knowledge_sections"
DOCS = "store_knowledge_docs"
FTS_TABLE = "store_knowledge_fts"
PG_COLUMN = "search_vector"
PG_INDEX = "ix_store_knowledge_sections_search"

#: At most this many words of a query are searched (bounds the cost of hostile input).
MAX_TERMS = 24

_SQLITE_CREATE = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5("
    f"doc_title, text, content='{SECTIONS}', content_rowid='id', tokenize='porter unicode61')",
    f"CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_ai AFTER INSERT ON {SECTIONS} BEGIN "
    f"INSERT INTO {FTS_TABLE}(rowid, doc_title, text) "
    f"VALUES (new.id, new.doc_title, new.text); END",
    f"CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_ad AFTER DELETE ON {SECTIONS} BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, doc_title, text) "
    f"VALUES ('delete', old.id, old.doc_title, old.text); END",
    f"CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_au AFTER UPDATE ON {SECTIONS} BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, doc_title, text) "
    f"VALUES ('delete', old.id, old.doc_title, old.text); "
    f"INSERT INTO {FTS_TABLE}(rowid, doc_title, text) "
    f"VALUES (new.id, new.doc_title, new.text); END",
)
_SQLITE_DROP = (
    f"DROP TRIGGER IF EXISTS {FTS_TABLE}_au",
    f"DROP TRIGGER IF EXISTS {FTS_TABLE}_ad",
    f"DROP TRIGGER IF EXISTS {FTS_TABLE}_ai",
    f"DROP TABLE IF EXISTS {FTS_TABLE}",
)
_PG_CREATE = (
    f"ALTER TABLE {SECTIONS} ADD COLUMN IF NOT EXISTS {PG_COLUMN} tsvector GENERATED ALWAYS AS ("
    "setweight(to_tsvector('english'::regconfig, coalesce(doc_title, '')), 'A') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(text, '')), 'B')) STORED",
    f"CREATE INDEX IF NOT EXISTS {PG_INDEX} ON {SECTIONS} USING gin ({PG_COLUMN})",
)
_PG_DROP = (
    f"DROP INDEX IF EXISTS {PG_INDEX}",
    f"ALTER TABLE {SECTIONS} DROP COLUMN IF EXISTS {PG_COLUMN}",
)

_STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i if in is it me my of on or our so "
    "the their there this to was we what when where which who why will with you your".split()
)
_WORD = re.compile(r"[^\W_]+")


def create_statements(dialect: str) -> tuple[str, ...]:
    """The DDL that builds the search index on ``dialect`` (``sqlite`` or ``postgresql``)."""
    return {"sqlite": _SQLITE_CREATE, "postgresql": _PG_CREATE}.get(dialect, ())


def drop_statements(dialect: str) -> tuple[str, ...]:
    """The DDL that removes the search index (run before dropping the sections table)."""
    return {"sqlite": _SQLITE_DROP, "postgresql": _PG_DROP}.get(dialect, ())


def install_fts(conn: Connection) -> None:
    """Create the search index on a sync connection (``op.get_bind()`` in a migration)."""
    for stmt in create_statements(conn.dialect.name):
        conn.exec_driver_sql(stmt)


def uninstall_fts(conn: Connection) -> None:
    """Remove the search index on a sync connection (the migration's downgrade)."""
    for stmt in drop_statements(conn.dialect.name):
        conn.exec_driver_sql(stmt)


def _rebuild(conn: Connection) -> None:
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')")


async def ensure_fts(conn: AsyncConnection) -> None:
    """Create the search index if missing and (SQLite) re-index existing sections."""
    await conn.run_sync(install_fts)
    await conn.run_sync(_rebuild)


def _after_create(_target: Table, connection: Connection, **_kw: Any) -> None:
    install_fts(connection)


def _before_drop(_target: Table, connection: Connection, **_kw: Any) -> None:
    uninstall_fts(connection)


def register(sections: Table) -> None:
    """Hook the DDL onto ``sections`` so ``metadata.create_all``/``drop_all`` manage it."""
    if not event.contains(sections, "after_create", _after_create):
        event.listen(sections, "after_create", _after_create)
        event.listen(sections, "before_drop", _before_drop)


def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    """Alembic ``include_object`` hook: autogenerate must not propose dropping the search DDL.

    The FTS5 table (and its shadow tables), the ``tsvector`` column and its GIN index exist
    only in the database, not in ``Base.metadata``.
    """
    if not reflected or name is None:
        return True
    if type_ == "table" and name.startswith(FTS_TABLE):
        return False
    return not (type_ == "column" and name == PG_COLUMN) and not (type_ == "index" and name == PG_INDEX)


def query_terms(query: str) -> list[str]:
    """The distinct searchable words of ``query``: word characters only, no stopwords."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query.lower()):
        if word not in _STOPWORDS:
            seen.setdefault(word, None)
    return list(seen)[:MAX_TERMS]


def search_statement(dialect: str, terms: list[str], *, kind: str | None, limit: int) -> TextClause:
    """A bound query returning ``doc_id, version, section_id, kind, title, text`` best first."""
    stmt, params = search_query(dialect, terms, kind=kind, limit=limit)
    return stmt.bindparams(**params)


def search_query(dialect: str, terms: list[str], *, kind: str | None, limit: int) -> tuple[TextClause, dict[str, Any]]:
    """The search as a statement built once per shape (see :mod:`storage.fastsql`) and its parameters."""
    params: dict[str, Any] = {"limit": limit}
    if kind is not None:
        params["kind"] = kind
    if dialect == "postgresql":
        params["tsq"] = " | ".join(terms)
    else:
        params["match"] = " OR ".join(f'"{t}"' for t in terms)
    return _search_text(dialect, kind is not None), params


@functools.cache
def _search_text(dialect: str, with_kind: bool) -> TextClause:
    kind_filter = " AND d.kind = :kind" if with_kind else ""
    if dialect == "postgresql":
        sql = (
            f"SELECT s.doc_id, d.version, s.section_id, d.kind, d.title, s.text "
            f"FROM {SECTIONS} AS s JOIN {DOCS} AS d ON d.id = s.doc_id, "
            f"to_tsquery('english'::regconfig, :tsq) AS q "
            f"WHERE s.{PG_COLUMN} @@ q{kind_filter} "
            f"ORDER BY ts_rank(s.{PG_COLUMN}, q) DESC, s.doc_id, s.position LIMIT :limit"
        )
    else:
        sql = (
            f"SELECT s.doc_id, d.version, s.section_id, d.kind, d.title, s.text "
            f"FROM {FTS_TABLE} JOIN {SECTIONS} AS s ON s.id = {FTS_TABLE}.rowid "
            f"JOIN {DOCS} AS d ON d.id = s.doc_id "
            f"WHERE {FTS_TABLE} MATCH :match{kind_filter} "
            f"ORDER BY bm25({FTS_TABLE}, 2.0, 1.0), s.doc_id, s.position LIMIT :limit"
        )
    return prepared(text(sql))
