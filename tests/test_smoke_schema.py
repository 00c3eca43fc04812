"""The runtime tables create on SQLite and PostgreSQL."""

from sqlalchemy import text

from storage.db import Database


async def test_runtime_tables_exist(any_db: Database) -> None:
    async with any_db.sessions() as s:
        n = (await s.execute(text("SELECT count(*) FROM conversations"))).scalar_one()
    assert n == 0
