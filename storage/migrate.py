"""Alembic migrations, driven programmatically (``signoff db upgrade``).

The runtime's revisions live in ``storage/migrations/versions``. A backend that keeps
its own tables in the same database (the sandbox store) adds a :class:`MigrationSource`:
its revisions form their own Alembic branch, migrated in the same run. Storage never
imports such a backend; the caller hands the source in.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncEngine

from storage import revisions, search
from storage.faults import rerunnable

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).with_name("migrations")


@dataclass(frozen=True, kw_only=True)
class MigrationSource:
    """Another branch of revisions, and which database objects autogenerate must leave alone."""

    versions: Path
    include_object: Callable[..., bool] | None = None


def alembic_config(url: str, sources: Sequence[MigrationSource] = ()) -> Config:
    """The Alembic configuration for ``url`` over the runtime's and the given migration sources."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url)
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("version_locations", os.pathsep.join(str(folder) for folder in version_folders(sources)))
    # The runtime's own search index exists only in the database: autogenerate leaves it alone.
    hooks = [search.include_object, *(s.include_object for s in sources if s.include_object is not None)]
    cfg.attributes["include_object"] = _all(hooks)
    return cfg


def _all(hooks: list[Callable[..., bool]]) -> Callable[..., bool]:
    def include(*args: Any) -> bool:
        return all(hook(*args) for hook in hooks)

    return include


async def upgrade(url: str, revision: str = "heads", *, sources: Sequence[MigrationSource] = ()) -> None:
    """Migrate ``url`` to ``revision`` (every branch by default). env.py runs its own event loop: a thread."""
    from alembic import command

    await asyncio.to_thread(command.upgrade, alembic_config(url, sources), revision)


async def downgrade(url: str, revision: str, *, sources: Sequence[MigrationSource] = ()) -> None:
    """Migrate down to ``revision``."""
    from alembic import command

    await asyncio.to_thread(command.downgrade, alembic_config(url, sources), revision)


def version_folders(sources: Sequence[MigrationSource] = ()) -> list[Path]:
    """The runtime's version folder and each source's, as ``version_locations`` lists them."""
    return [MIGRATIONS / "versions", *(s.versions for s in sources)]


def heads(sources: Sequence[MigrationSource] = ()) -> list[str]:
    """The head revisions of every migration source."""
    return list(revisions.graph(version_folders(sources)).heads)


@dataclass(frozen=True, kw_only=True)
class SchemaState:
    """Where a database's schema stands against this release's migrations."""

    #: The database's Alembic revisions (empty: none recorded).
    at: tuple[str, ...]
    #: This release's head revisions.
    heads: tuple[str, ...]
    #: Revisions this release does not know: a newer release migrated the database.
    unknown: tuple[str, ...]
    #: Whether the runtime's tables exist (created without Alembic, e.g. by tests, when ``at`` is empty).
    has_tables: bool

    @property
    def behind(self) -> bool:
        """``signoff db upgrade`` is needed: no revision and no tables, or every recorded revision
        is one this release knows and some head of it is not reached."""
        if not self.at:
            return not self.has_tables
        return not self.unknown and not set(self.heads) <= set(self.at)


@rerunnable  # a read
async def schema_state(engine: AsyncEngine, sources: Sequence[MigrationSource] = ()) -> SchemaState:
    """The database's revisions (its ``alembic_version``) against the heads of ``sources``."""
    graph = revisions.graph(version_folders(sources))
    async with engine.connect() as conn:
        at, has_tables = await conn.run_sync(revisions.current)
    return SchemaState(
        at=at, heads=graph.heads, unknown=tuple(r for r in at if r not in graph.known), has_tables=has_tables
    )
