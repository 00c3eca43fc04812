"""What a PostgreSQL pool checkout costs: sequential one-row reads through ``Database.read``, each
checking a connection out of the pool and back, with the checkout's liveness check as built
(``storage/pool_ping.py``: no round trip for a connection that answered under a second ago) and
with a ping on every checkout (the empty query, as before 2026-12-06). Alternating rounds; wall
and CPU time per read (the process's own CPU: what the worker and the server pay), and the pings
sent.

    SIGNOFF_BENCH_PG_URL=postgresql+asyncpg://…/<the benchmarks' own database> \\
        .venv/bin/python bench/pool_checkout.py [--reads 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import PG_URL_ENV, fmt, over_rounds, write_result  # noqa: E402


async def one_round(url: str, reads: int, always_ping: bool) -> tuple[float, float, int]:
    """µs of wall and of CPU per read, and the pings sent."""
    from sqlalchemy import text

    import storage.pool_ping as pool_ping
    from storage.db import create_database

    pings = 0
    real_await = pool_ping.await_

    def counted(awaitable: Any) -> Any:
        nonlocal pings
        pings += 1
        return real_await(awaitable)

    kept = pool_ping.PING_IDLE_S
    pool_ping.await_, pool_ping.PING_IDLE_S = counted, (0.0 if always_ping else kept)
    db = create_database(url, pool_size=1)
    try:
        await db.read(lambda c: c.execute(text("SELECT 1")).scalar_one())  # connected
        pings = 0
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(reads):
            await db.read(lambda c: c.execute(text("SELECT 1")).scalar_one())
        return (time.perf_counter() - wall) / reads * 1e6, (time.process_time() - cpu) / reads * 1e6, pings
    finally:
        pool_ping.await_, pool_ping.PING_IDLE_S = real_await, kept
        await db.dispose()


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--reads", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    url = os.environ.get(PG_URL_ENV)  # noqa: TID251  (a benchmark's own knob, not a setting)
    if not url:
        sys.exit(f"set {PG_URL_ENV} to the benchmarks' own PostgreSQL database")
    figures: dict[str, Any] = {"reads": args.reads, "rounds": args.rounds}
    samples: dict[str, list[tuple[float, float, int]]] = {"as_built": [], "ping_every_checkout": []}
    for _ in range(args.rounds):
        for name in samples:
            samples[name].append(await one_round(url, args.reads, always_ping=name != "as_built"))
    for name, runs in samples.items():
        wall, cpu = over_rounds([r[0] for r in runs]), over_rounds([r[1] for r in runs])
        figures[name] = {"wall_us_per_read": wall, "cpu_us_per_read": cpu, "pings_per_round": runs[-1][2]}
        print(f"{name}: wall {fmt(wall)} per read, CPU {fmt(cpu)} per read, {runs[-1][2]} pings per {args.reads} reads")
    write_result("pool_checkout", figures)


if __name__ == "__main__":
    asyncio.run(main())
