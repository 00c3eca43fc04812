"""Sealing secrets stored in clear: each value of the given columns rewritten through ``seal``.

Used for the Slack SDK's installation tables (bot tokens): rows written before tokens were
encrypted are sealed in place, in one transaction, the first time a process starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from sqlalchemy import Table, select, update
from sqlalchemy.ext.asyncio import AsyncEngine


async def reseal(
    engine: AsyncEngine,
    tables: Mapping[Table, Sequence[str]],
    seal: Callable[[str, str], str],
    *,
    prefix: str = "enc1:",
) -> int:
    """Rewrite every value of ``tables``' columns not starting with ``prefix`` as ``seal(value, column)``.

    Returns how many values were sealed.
    """
    count = 0
    async with engine.begin() as conn:
        for table, columns in tables.items():
            rows = (await conn.execute(select(table.c.id, *(table.c[c] for c in columns)))).all()
            for row in rows:
                values = {
                    c: seal(v, c) for c, v in zip(columns, row[1:], strict=True) if v and not v.startswith(prefix)
                }
                if values:
                    await conn.execute(update(table).where(table.c.id == row.id).values(**values))
                    count += len(values)
    return count
