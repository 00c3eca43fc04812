"""Micro-benchmark: the cost of ``append_audit_many`` with 3 events on SQLite.

The agent loop appends ~3 audit events per step inside the step's transaction;
the runtime's own cost per step must stay ≤ 1.5 ms. Prints the mean (and p50 /
p95) of the append itself inside an open transaction, and of a whole
transaction (BEGIN IMMEDIATE + append + COMMIT) for context.

    .venv/bin/python bench/audit_append.py [--steps 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage.audit import AuditEvent, AuditLog, append_audit_many, sha256_hex  # noqa: E402
from storage.db import Base, create_database  # noqa: E402


def _step_events(i: int) -> list[AuditEvent]:
    common: dict[str, Any] = {
        "run_id": f"run_{i // 10}",
        "trace_id": "trace_bench",
        "principal": "rep:U123",
        "model": "claude-bench",
        "prompt_version": "p1",
        "policy_version": "pol1",
    }
    return [
        AuditEvent(kind="proposal", proposal_id=f"p{i}", tool="issue_refund",
                   args_hash=sha256_hex(str(i)), data={"step": i}, **common),
        AuditEvent(kind="gate.decision", proposal_id=f"p{i}", tool="issue_refund",
                   data={"decision": "execute", "reason": None}, **common),
        AuditEvent(kind="execution", proposal_id=f"p{i}", tool="issue_refund",
                   idempotency_key=f"refund:o{i}:12.50", latency_ms=3.2,
                   data={"ok": True, "amount": 12.5}, **common),
    ]  # fmt: skip


def _summary(label: str, samples_ms: list[float]) -> str:
    ordered = sorted(samples_ms)
    p95 = ordered[int(len(ordered) * 0.95)]
    return (
        f"{label}: mean {statistics.fmean(ordered):.3f} ms, "
        f"p50 {statistics.median(ordered):.3f} ms, p95 {p95:.3f} ms (n={len(ordered)})"
    )


async def run(steps: int, warmup: int) -> tuple[list[float], list[float]]:
    """Time ``steps`` appends (after ``warmup``) on a fresh SQLite file database."""
    with tempfile.TemporaryDirectory() as tmp:
        db = create_database(f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}")
        async with db.engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        inner: list[float] = []
        whole: list[float] = []
        for i in range(warmup + steps):
            events = _step_events(i)
            t0 = time.perf_counter()
            async with db.sessions() as s, s.begin():
                await s.connection()  # the step's transaction is already open (BEGIN IMMEDIATE)
                t1 = time.perf_counter()
                await append_audit_many(s, events)
                t2 = time.perf_counter()
            t3 = time.perf_counter()
            if i >= warmup:
                inner.append((t2 - t1) * 1000)
                whole.append((t3 - t0) * 1000)
        result = await AuditLog(db).verify()
        assert result.ok and result.count == 3 * (warmup + steps), result
        await db.dispose()
    return inner, whole


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args(argv)
    inner, whole = asyncio.run(run(args.steps, args.warmup))
    print(_summary("append_audit_many(3 events) in an already-open transaction", inner))
    print(_summary("BEGIN IMMEDIATE + append_audit_many(3) + COMMIT", whole))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
