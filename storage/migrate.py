"""Alembic migrations, driven programmatically (``signoff db upgrade``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS = Path(__file__).with_name("migrations")


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url)
    return cfg


def _upgrade(url: str, revision: str) -> None:
    command.upgrade(alembic_config(url), revision)


def _downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)


async def upgrade(url: str, revision: str = "head") -> None:
    """Migrate ``url`` to ``revision`` (env.py runs its own event loop, so use a thread)."""
    await asyncio.to_thread(_upgrade, url, revision)


async def downgrade(url: str, revision: str) -> None:
    await asyncio.to_thread(_downgrade, url, revision)


def heads() -> list[str]:
    from alembic.script import ScriptDirectory

    return list(ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads())
