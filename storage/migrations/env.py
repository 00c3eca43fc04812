"""Alembic environment: async engines, the URL from the caller (never os.environ here)."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

import storage.models  # noqa: F401
from storage.db import Base, create_database

config = context.config
#: The runtime's tables plus whatever the caller's migration sources imported (their models).
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_object=config.attributes.get("include_object"),
    )
    with context.begin_transaction():
        context.run_migrations()


async def _online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url, "storage.migrate sets sqlalchemy.url"
    # The application's engine: on SQLite the file leaves migration already in WAL mode.
    engine = create_database(url).engine
    async with engine.connect() as conn:
        await conn.run_sync(_run)
        await conn.commit()
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    existing = config.attributes.get("connection")
    if existing is not None:
        _run(existing)
    else:
        asyncio.run(_online())
