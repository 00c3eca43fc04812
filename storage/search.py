"""Full-text search over knowledge sections, built into the database.

SQLite: an external-content FTS5 table (``porter unicode61``) kept in step with the sections
table by triggers, ranked with ``bm25`` (title weighted 2, text 1). PostgreSQL: a stored
generated ``tsvector`` column (title weighted A, text B) with a GIN index, ranked with
``ts_rank``.

:class:`FtsTables` names the tables one index covers: :data:`KNOWLEDGE` is signoff's own
knowledge (``knowledge_sections``); the sandbox store's retired index keeps its own spec for its
old revisions. The DDL is installed from an Alembic revision (``install``), by
``after_create`` hooks (:func:`register`) so ``Base.metadata.create_all`` in tests builds it
too, and by :func:`ensure` for an existing database. Changing this DDL needs a new revision.

User text never reaches the FTS query language: :func:`query_terms` keeps only word
characters, and each term is quoted (SQLite) or OR-ed as a bare lexeme (PostgreSQL), so
``"refund" OR ) NEAR(`` is just the words ``refund``, ``or`` and ``near``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Table, TextClause, event, text
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.fastsql import prepared

#: At most this many words of a query are searched (bounds the cost of hostile input).
MAX_TERMS = 24

_STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i if in is it me my of on or our so "
    "the their there this to was we what when where which who why will with you your".split()
)
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True, kw_only=True)
class FtsTables:
    """The tables one search index covers: sections (with ``doc_title`` and ``text``), its index."""

    sections: str
    fts: str
    pg_column: str = "search_vector"
    pg_index: str

    def create_statements(self, dialect: str) -> tuple[str, ...]:
        """The DDL that builds the index on ``dialect`` (``sqlite`` or ``postgresql``)."""
        s, f, col = self.sections, self.fts, self.pg_column
        if dialect == "sqlite":
            return (
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {f} USING fts5("
                f"doc_title, text, content='{s}', content_rowid='id', tokenize='porter unicode61')",
                f"CREATE TRIGGER IF NOT EXISTS {f}_ai AFTER INSERT ON {s} BEGIN "
                f"INSERT INTO {f}(rowid, doc_title, text) VALUES (new.id, new.doc_title, new.text); END",
                f"CREATE TRIGGER IF NOT EXISTS {f}_ad AFTER DELETE ON {s} BEGIN "
                f"INSERT INTO {f}({f}, rowid, doc_title, text) "
                f"VALUES ('delete', old.id, old.doc_title, old.text); END",
                f"CREATE TRIGGER IF NOT EXISTS {f}_au AFTER UPDATE ON {s} BEGIN "
                f"INSERT INTO {f}({f}, rowid, doc_title, text) "
                f"VALUES ('delete', old.id, old.doc_title, old.text); "
                f"INSERT INTO {f}(rowid, doc_title, text) VALUES (new.id, new.doc_title, new.text); END",
            )
        if dialect == "postgresql":
            return (
                f"ALTER TABLE {s} ADD COLUMN IF NOT EXISTS {col} tsvector GENERATED ALWAYS AS ("
                "setweight(to_tsvector('english'::regconfig, coalesce(doc_title, '')), 'A') || "
                "setweight(to_tsvector('english'::regconfig, coalesce(text, '')), 'B')) STORED",
                f"CREATE INDEX IF NOT EXISTS {self.pg_index} ON {s} USING gin ({col})",
            )
        return ()

    def drop_statements(self, dialect: str) -> tuple[str, ...]:
        """The DDL that removes the index (run before dropping the sections table)."""
        f = self.fts
        if dialect == "sqlite":
            return tuple(f"DROP TRIGGER IF EXISTS {f}_{t}" for t in ("au", "ad", "ai")) + (f"DROP TABLE IF EXISTS {f}",)
        if dialect == "postgresql":
            return (
                f"DROP INDEX IF EXISTS {self.pg_index}",
                f"ALTER TABLE {self.sections} DROP COLUMN IF EXISTS {self.pg_column}",
            )
        return ()

    def install(self, conn: Connection) -> None:
        """Create the index on a sync connection (``op.get_bind()`` in a migration)."""
        for stmt in self.create_statements(conn.dialect.name):
            conn.exec_driver_sql(stmt)

    def uninstall(self, conn: Connection) -> None:
        """Remove the index on a sync connection (a migration's downgrade)."""
        for stmt in self.drop_statements(conn.dialect.name):
            conn.exec_driver_sql(stmt)

    def skips(self, name: str, type_: str) -> bool:
        """Whether ``name`` is one of this index's objects, which exist only in the database."""
        if type_ == "table":
            return name.startswith(self.fts)
        return (type_ == "column" and name == self.pg_column) or (type_ == "index" and name == self.pg_index)


KNOWLEDGE = FtsTables(sections="knowledge_sections", fts="knowledge_fts", pg_index="ix_knowledge_sections_search")


async def ensure(conn: AsyncConnection, tables: FtsTables = KNOWLEDGE) -> None:
    """Create the index if missing and (SQLite) re-index existing sections."""
    await conn.run_sync(tables.install)
    if conn.dialect.name == "sqlite":
        await conn.exec_driver_sql(f"INSERT INTO {tables.fts}({tables.fts}) VALUES ('rebuild')")


def register(sections: Table, tables: FtsTables = KNOWLEDGE) -> None:
    """Hook the DDL onto ``sections`` so ``metadata.create_all``/``drop_all`` manage it."""

    def after_create(_target: Table, connection: Connection, **_kw: Any) -> None:
        tables.install(connection)

    def before_drop(_target: Table, connection: Connection, **_kw: Any) -> None:
        tables.uninstall(connection)

    event.listen(sections, "after_create", after_create)
    event.listen(sections, "before_drop", before_drop)


def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    """Alembic ``include_object`` hook: autogenerate must not propose dropping the search DDL
    (the FTS5 table and its shadow tables, the ``tsvector`` column and its GIN index exist only
    in the database, not in ``Base.metadata``)."""
    return not reflected or name is None or not KNOWLEDGE.skips(name, type_)


def query_terms(query: str) -> list[str]:
    """The distinct searchable words of ``query``: word characters only, no stopwords."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query.lower()):
        if word not in _STOPWORDS:
            seen.setdefault(word, None)
    return list(seen)[:MAX_TERMS]


def search_query(dialect: str, terms: list[str], *, kind: str | None, limit: int) -> tuple[TextClause, dict[str, Any]]:
    """The search (newest version of each document only) as a statement built once per shape
    (see :mod:`storage.fastsql`) and its parameters; rows are
    ``doc_id, version, section_id, kind, title, text``, best first."""
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
    t = KNOWLEDGE
    kind_filter = " AND d.kind = :kind" if with_kind else ""
    columns = "SELECT s.doc_id, s.version, s.section_id, d.kind, d.title, s.text"
    newest = "JOIN knowledge_documents AS d ON d.id = s.doc_id AND d.version = s.version"
    if dialect == "postgresql":
        sql = (
            f"{columns} FROM {t.sections} AS s {newest}, to_tsquery('english'::regconfig, :tsq) AS q "
            f"WHERE s.{t.pg_column} @@ q{kind_filter} "
            f"ORDER BY ts_rank(s.{t.pg_column}, q) DESC, s.doc_id, s.position LIMIT :limit"
        )
    else:
        sql = (
            f"{columns} FROM {t.fts} JOIN {t.sections} AS s ON s.id = {t.fts}.rowid {newest} "
            f"WHERE {t.fts} MATCH :match{kind_filter} "
            f"ORDER BY bm25({t.fts}, 2.0, 1.0), s.doc_id, s.position LIMIT :limit"
        )
    return prepared(text(sql))
