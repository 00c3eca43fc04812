"""The sandbox store's tables: their Alembic branch, migrated with the runtime's.

The store's revisions live in ``sandbox/migrations`` as the ``sandbox`` branch;
:func:`upgrade` migrates a database to the heads of both (what ``signoff db upgrade``
does when the composition root chooses the sandbox as the commerce backend).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

import sandbox.models  # noqa: F401  (the store's tables join the metadata autogenerate compares)
from sandbox.search import include_object
from storage import migrate

SOURCE = migrate.MigrationSource(versions=Path(__file__).with_name("migrations"), include_object=include_object)


async def upgrade(url: str, revision: str = "heads") -> None:
    """Migrate ``url``: the runtime's revisions and the store's."""
    await migrate.upgrade(url, revision, sources=[SOURCE])


async def downgrade(url: str, revision: str) -> None:
    """Migrate ``url`` down to ``revision`` (the runtime's revisions and the store's)."""
    await migrate.downgrade(url, revision, sources=[SOURCE])


async def state(engine: AsyncEngine) -> migrate.SchemaState:
    """Where the database at ``engine`` stands against the runtime's and the store's heads."""
    return await migrate.schema_state(engine, [SOURCE])


def heads() -> list[str]:
    """The head revisions of the runtime's and the store's branches."""
    return migrate.heads([SOURCE])
