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
from typing import Any

from alembic import command
from alembic.config import Config

from storage import search

MIGRATIONS = Path(__file__).with_name("migrations")


@dataclass(frozen=True, kw_only=True)
class MigrationSource:
    """Another branch of revisions, and which database objects autogenerate must leave alone."""

    versions: Path
    include_object: Callable[..., bool] | None = None


def alembic_config(url: str, sources: Sequence[MigrationSource] = ()) -> Config:
    """The Alembic configuration for ``url`` over the runtime's and the given migration sources."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url)
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option(
        "version_locations", os.pathsep.join([str(MIGRATIONS / "versions"), *(str(s.versions) for s in sources)])
    )
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
    await asyncio.to_thread(command.upgrade, alembic_config(url, sources), revision)


async def downgrade(url: str, revision: str, *, sources: Sequence[MigrationSource] = ()) -> None:
    """Migrate down to ``revision``."""
    await asyncio.to_thread(command.downgrade, alembic_config(url, sources), revision)


def heads(sources: Sequence[MigrationSource] = ()) -> list[str]:
    """The head revisions of every migration source."""
    from alembic.script import ScriptDirectory

    return sorted(ScriptDirectory.from_config(alembic_config("sqlite://", sources)).get_heads())
