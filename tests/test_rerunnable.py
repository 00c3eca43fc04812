"""Re-runnable storage functions (``storage.faults.rerunnable``): the only ones anything runs
again, and each is run twice on an aborted transaction here.

The abort is real: the first attempt's COMMIT fails as a dropped connection does ("disk I/O
error", an outage), SQLAlchemy rolls the transaction back, and ``until_available`` runs the
function again. The rows and the audit chain must equal those of a database where it ran once."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from storage.audit import AuditEvent
from storage.db import Database
from storage.faults import is_rerunnable, rerunnable, until_available
from storage.jobs import JobQueue
from storage.ledger import Ledger
from storage.migrate import schema_state
from tests.conftest import make_sqlite

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
TABLES = ("tool_executions", "jobs", "audit_events", "audit_head")


@contextmanager
def commit_fails_once(db: Database) -> Iterator[list[int]]:
    """The next COMMIT on any of ``db``'s engines fails as a dropped connection does."""
    engines = [db.engine.sync_engine] + (db.sync_writer.engines if db.sync_writer else [])
    failed: list[int] = []

    def fail(_conn: Any) -> None:
        if not failed:
            failed.append(1)
            raise sqlite3.OperationalError("disk I/O error")

    for engine in engines:
        event.listen(engine, "commit", fail)
    try:
        yield failed
    finally:
        for engine in engines:
            event.remove(engine, "commit", fail)


async def _rows(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    async with db.engine.connect() as conn:
        out = {}
        for table in TABLES:
            result = await conn.execute(text(f"SELECT * FROM {table} ORDER BY 1"))  # noqa: S608
            out[table] = [tuple(r) for r in result.all()]
        return out


async def _ledger_claimed(db: Database) -> Callable[[], Awaitable[Any]]:
    ledger = Ledger(db, clock=lambda: NOW)
    assert await ledger.claim(key="k1", tool="issue_refund", arguments={"a": 1}, proposal_id=None, run_id=None) is None
    audit = [AuditEvent(kind="tool.executed", idempotency_key="k1", ts=NOW, data={"ok": True})]
    return lambda: ledger.settle("k1", status="succeeded", result={"refund": "R-1"}, audit=audit)


async def _job_running(db: Database, *, failing: bool) -> Callable[[], Awaitable[Any]]:
    jobs = JobQueue(db, clock=lambda: NOW)
    job_id = await jobs.enqueue("inbound", {"n": 1}, dedup_key="d1")
    assert job_id is not None
    assert [j.id for j in await jobs.claim("w1")] == [job_id]
    if failing:
        return lambda: jobs.fail(job_id, "boom", retry_in_s=5, worker_id="w1", counted=False)
    return lambda: jobs.complete(job_id, worker_id="w1")


SETUPS: dict[str, tuple[Callable[..., Any], Callable[[Database], Awaitable[Callable[[], Awaitable[Any]]]]]] = {
    "Ledger.settle": (Ledger.settle, _ledger_claimed),
    "JobQueue.complete": (JobQueue.complete, lambda db: _job_running(db, failing=False)),
    "JobQueue.fail": (JobQueue.fail, lambda db: _job_running(db, failing=True)),
    "Database.ping": (Database.ping, lambda db: _noop(db)),
    "schema_state": (schema_state, lambda db: _schema_read(db)),
}


async def _schema_read(db: Database) -> Callable[[], Awaitable[Any]]:
    return lambda: schema_state(db.engine)


async def _noop(db: Database) -> Callable[[], Awaitable[Any]]:
    return db.ping


@pytest.mark.parametrize("name", sorted(SETUPS))
async def test_a_marked_function_run_again_after_an_aborted_commit_leaves_what_one_run_leaves(
    tmp_path: Path, name: str
) -> None:
    marked, setup = SETUPS[name]
    assert is_rerunnable(marked), name
    once, twice = await make_sqlite(tmp_path / "once.db"), await make_sqlite(tmp_path / "twice.db")
    try:
        first = await (await setup(once))()
        fn = await setup(twice)
        with commit_fails_once(twice) as failed:
            second = await until_available(rerunnable(fn), budget_s=30, what=name, first_s=0.001)
        assert failed == [1] or name in ("Database.ping", "schema_state")  # reads commit nothing
        assert second == first
        assert await _rows(twice) == await _rows(once)
    finally:
        await once.dispose()
        await twice.dispose()


async def test_nothing_unmarked_is_run_again() -> None:
    calls: list[int] = []

    async def unmarked() -> None:
        calls.append(1)

    with pytest.raises(TypeError, match="not marked rerunnable"):
        await until_available(unmarked, budget_s=1, what="unmarked")
    assert calls == []


def test_every_function_until_available_runs_is_marked() -> None:
    """The storage functions callers hand to ``until_available`` (through closures) are marked."""
    assert all(is_rerunnable(f) for f, _ in SETUPS.values())
