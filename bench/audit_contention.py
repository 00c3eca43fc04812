"""Audit appends from many writers at once on PostgreSQL: what the head row(s) cost.

Two "replicas" (two Databases, two connection pools) each run ``--writers`` concurrent
writers; every writer appends a step's three events for its own run, one transaction per
step, through ``Database.write`` and ``append_audit_sync`` (the loop's hot path). Prints
appends per second, the latency of one append transaction (p50/p95), the SQL statements
per append, and whether the log verifies afterwards. Run it on the code before and after a
change to the audit head (``PYTHONPATH=<other checkout>``): the call is the same.

    SIGNOFF_BENCH_PG_URL=postgresql+asyncpg://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/audit_contention.py [--writers 24] [--steps 40]

It works in a schema of its own (created and dropped), so a shared database is fine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import event, text  # noqa: E402
from sqlalchemy.ext.asyncio import create_async_engine  # noqa: E402

from storage.audit import AuditEvent, AuditLog, append_audit_sync  # noqa: E402
from storage.db import Base, Database  # noqa: E402


def _events(run_id: str, i: int) -> list[AuditEvent]:
    common: dict[str, Any] = {"run_id": run_id, "principal": "rep:U1", "model": "m", "policy_version": "p"}
    return [
        AuditEvent(kind="proposal", proposal_id=f"p{i}", tool="issue_refund", data={"i": i}, **common),
        AuditEvent(kind="gate.decision", proposal_id=f"p{i}", data={"decision": "execute"}, **common),
        AuditEvent(kind="execution", proposal_id=f"p{i}", latency_ms=1.5, data={"ok": True}, **common),
    ]


async def _replica(url: str, schema: str) -> Database:
    engine = create_async_engine(
        url, connect_args={"server_settings": {"search_path": schema}}, pool_size=32, max_overflow=32
    )
    return Database.of(engine)


async def _writer(db: Database, run_id: str, steps: int, took: list[float]) -> None:
    for i in range(steps):
        events = _events(run_id, i)
        start = time.perf_counter()
        await db.write(lambda conn, ctx, ev=events: append_audit_sync(conn, ev, ctx.audit_head))  # type: ignore[misc]
        took.append(time.perf_counter() - start)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=24, help="concurrent writers per replica")
    parser.add_argument("--steps", type=int, default=40, help="append transactions per writer")
    args = parser.parse_args()
    url = os.environ.get("SIGNOFF_BENCH_PG_URL")  # noqa: TID251
    if not url:
        raise SystemExit("set SIGNOFF_BENCH_PG_URL (postgresql+asyncpg://...)")
    schema = f"bench_audit_{uuid.uuid4().hex[:8]}"
    admin = create_async_engine(url)
    async with admin.begin() as conn:
        await conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    replicas = [await _replica(url, schema), await _replica(url, schema)]
    statements = [0]

    def count(*_args: Any) -> None:
        statements[0] += 1

    for db in replicas:
        event.listen(db.engine.sync_engine, "before_cursor_execute", count)
    try:
        async with replicas[0].engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        statements[0] = 0
        took: list[float] = []
        start = time.perf_counter()
        await asyncio.gather(
            *(
                _writer(db, f"run_{r}_{w}", args.steps, took)
                for r, db in enumerate(replicas)
                for w in range(args.writers)
            )
        )
        wall = time.perf_counter() - start
        appends = len(took)
        result = await AuditLog(replicas[0]).verify()
        took.sort()
        print(f"writers: 2 replicas x {args.writers}, {appends} append transactions of 3 events")
        print(f"appends/s: {appends / wall:.0f}  (wall {wall:.2f} s)")
        print(f"per append: p50 {1000 * statistics.median(took):.1f} ms, p95 {1000 * took[int(0.95 * appends)]:.1f} ms")
        print(f"SQL statements per append (incl. BEGIN/COMMIT if counted): {statements[0] / appends:.2f}")
        print(f"verify: ok={result.ok} count={result.count}")
    finally:
        for db in replicas:
            await db.dispose()
        async with admin.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await admin.dispose()


if __name__ == "__main__":
    asyncio.run(main())
