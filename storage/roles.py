"""PostgreSQL roles: the migrations' owner and the application's role.

The owner (``SIGNOFF_MIGRATION_DATABASE_URL``) creates and alters the tables and
owns the audit guards. The application (``SIGNOFF_DATABASE_URL``) reads and
writes the runtime and store tables but may only SELECT and INSERT audit
events and move the audit head forward (UPDATE of its ``seq`` and ``hash``,
which the head guard allows only forward and only to a row that exists). Not
owning the audit tables, it cannot UPDATE, DELETE or TRUNCATE them, nor ALTER
them to disable the triggers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import create_async_engine

#: Tables the application may only append to (and the head it may only move forward).
AUDIT_TABLES = ("audit_events", "audit_head")
#: Alembic's bookkeeping: readable, never written by the application.
VERSION_TABLE = "alembic_version"
_ROLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier; only plain names are accepted."""
    if not _ROLE.match(name):
        raise ValueError(f"not a plain role or table name: {name!r}")
    return f'"{name}"'


def app_role_grants(role: str, tables: Iterable[str], *, schema: str = "public") -> list[str]:
    """The statements (run as the owner, idempotent) that give ``role`` what the application needs.

    Every table except the audit tables and Alembic's: SELECT, INSERT, UPDATE, DELETE.
    ``audit_events``: SELECT, INSERT. ``audit_head``: SELECT and UPDATE of ``seq``, ``hash``.
    ``alembic_version``: SELECT. Earlier grants on those three are revoked first.
    """
    r, s = quote_ident(role), quote_ident(schema)
    special = {*AUDIT_TABLES, VERSION_TABLE}
    ordinary = sorted(t for t in tables if t not in special)
    statements = [f"GRANT USAGE ON SCHEMA {s} TO {r}"]
    if ordinary:
        names = ", ".join(f"{s}.{quote_ident(t)}" for t in ordinary)
        statements.append(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {names} TO {r}")
    statements += [
        f'REVOKE ALL ON {s}."audit_events", {s}."audit_head", {s}."{VERSION_TABLE}" FROM {r}',
        f'GRANT SELECT, INSERT ON {s}."audit_events" TO {r}',
        f'GRANT SELECT, UPDATE (seq, hash) ON {s}."audit_head" TO {r}',
        f'GRANT SELECT ON {s}."{VERSION_TABLE}" TO {r}',
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {s} TO {r}",
    ]
    return statements


def role_of(url: str) -> str | None:
    """The role (user name) a database URL connects as."""
    return make_url(url).username


async def grant_app_role(owner_url: str, role: str) -> list[str]:
    """Connect as the owner and run :func:`app_role_grants` for every table in its current schema."""
    engine = create_async_engine(owner_url)
    try:
        async with engine.begin() as conn:
            schema = (await conn.execute(text("SELECT current_schema()"))).scalar_one()
            tables = (
                (await conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": schema}))
                .scalars()
                .all()
            )
            statements = app_role_grants(role, tables, schema=schema)
            for statement in statements:
                await conn.execute(text(statement))
        return statements
    finally:
        await engine.dispose()


__all__ = ["AUDIT_TABLES", "app_role_grants", "grant_app_role", "quote_ident", "role_of"]
