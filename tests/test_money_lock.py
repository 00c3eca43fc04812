"""The per-customer money lock holds across processes on one SQLite file: two runtimes
(two engines, as `signoff serve` and `signoff worker` would have) queue for it, and a
lease left by a dead holder expires instead of blocking forever."""

from __future__ import annotations

import asyncio
from pathlib import Path

from storage.db import create_database
from storage.ledger import Ledger
from storage.migrate import upgrade


async def test_two_processes_on_one_sqlite_file_take_turns(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'lock.db'}"
    await upgrade(url)
    a, b = create_database(url), create_database(url)
    try:
        inside: list[str] = []
        overlaps = 0

        async def hold(ledger: Ledger, who: str) -> None:
            nonlocal overlaps
            for _ in range(5):
                async with ledger.exclusive("money:C-7"):
                    if inside:
                        overlaps += 1
                    inside.append(who)
                    await asyncio.sleep(0.005)
                    inside.remove(who)

        await asyncio.gather(hold(Ledger(a), "serve"), hold(Ledger(b), "worker"))
        assert overlaps == 0
    finally:
        await a.dispose()
        await b.dispose()


async def test_a_dead_holders_lease_expires(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'lock.db'}"
    await upgrade(url)
    db = create_database(url)
    try:
        ledger = Ledger(db)
        dead = ledger._lease("money:C-8", lease_s=0.05)
        await dead.__aenter__()  # taken and never released: the holder "died"
        await asyncio.sleep(0.1)
        async with asyncio.timeout(5):
            async with ledger._lease("money:C-8", wait_s=2):
                pass
    finally:
        await db.dispose()


async def test_a_killed_holders_lease_is_taken_over_at_once(tmp_path: Path) -> None:
    """A process killed while holding the lock (SIGKILL mid-refund) does not block the customer's
    money actions until expiry: its lease names a pid that no longer runs."""
    import sys

    from sqlalchemy import insert

    from storage.holders import _HOST
    from storage.models import LockRow

    url = f"sqlite+aiosqlite:///{tmp_path / 'lock.db'}"
    await upgrade(url)
    db = create_database(url)
    try:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
        await proc.wait()
        pid = proc.pid  # a pid that no longer runs
        from datetime import UTC, datetime, timedelta

        await db.write(lambda conn, _ctx: conn.execute(insert(LockRow.__table__).values(
            name="money:C-9", holder=f"{_HOST}:{pid}:dead", expires_at=datetime.now(UTC) + timedelta(hours=1))))
        async with asyncio.timeout(5):
            async with Ledger(db)._lease("money:C-9", wait_s=1):
                pass
    finally:
        await db.dispose()
