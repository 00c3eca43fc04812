"""The durable job queue: each job claimed once under concurrency, dedup,
transactional enqueue, run_after, lease expiry and retry/backoff."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from storage.db import Database
from storage.jobs import Job, JobQueue, default_backoff

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


class FakeClock:
    """A settable clock for the queue (the database never supplies 'now')."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def new_job(q: JobQueue, kind: str = "resume", **kw: Any) -> int:
    job_id = await q.enqueue(kind, kw.pop("payload", {}), **kw)
    assert job_id is not None
    return job_id


async def get(q: JobQueue, job_id: int) -> Job:
    job = await q.get(job_id)
    assert job is not None
    return job


async def test_enqueued_job_is_claimed_with_its_payload(any_db: Database, clock: FakeClock) -> None:
    """A claim returns the job running under a lease, with its payload and attempt count."""
    q = JobQueue(any_db, clock=clock)
    job_id = await new_job(q, payload={"run_id": "run_1", "obs": "approved ✓"})
    assert await q.pending_count() == 1
    (job,) = await q.claim("w1", lease_s=30)
    assert job == Job(
        id=job_id,
        kind="resume",
        payload={"run_id": "run_1", "obs": "approved ✓"},
        attempts=1,
        run_after=T0 + timedelta(seconds=30),
        dedup_key=None,
        status="running",
        created_at=T0,
    )
    assert await q.claim("w2") == []
    assert await q.complete(job_id, worker_id="w1")
    assert await q.pending_count() == 0
    assert (await get(q, job_id)).status == "done"


async def test_duplicate_dedup_key_is_a_noop(any_db: Database) -> None:
    """The second enqueue with a key returns None, even after the first job is done."""
    q = JobQueue(any_db)
    first = await new_job(q, "expire", payload={"a": 1}, dedup_key="expire:ap_1")
    assert await q.enqueue("expire", {"a": 2}, dedup_key="expire:ap_1") is None
    (job,) = await q.claim("w")
    await q.complete(job.id)
    assert await q.enqueue("expire", {"a": 3}, dedup_key="expire:ap_1") is None
    assert (await get(q, first)).payload == {"a": 1}


async def test_concurrent_enqueues_with_one_dedup_key_make_one_job(any_db: Database) -> None:
    """Insert-if-absent is race-safe: 12 simultaneous enqueues, one job."""
    q = JobQueue(any_db)
    ids = await asyncio.gather(*(q.enqueue("resume", {"i": i}, dedup_key="k") for i in range(12)))
    assert len([i for i in ids if i is not None]) == 1
    assert await q.pending_count() == 1


async def test_enqueue_joins_the_callers_transaction(any_db: Database) -> None:
    """With session=, the job exists only if the caller's transaction commits."""
    q = JobQueue(any_db)
    with pytest.raises(RuntimeError):
        async with any_db.sessions() as s, s.begin():
            assert await q.enqueue("resume", {}, dedup_key="d1", session=s) is not None
            raise RuntimeError("decision not recorded")
    assert await q.pending_count() == 0
    async with any_db.sessions() as s, s.begin():
        job_id = await q.enqueue("resume", {}, dedup_key="d1", session=s)
        assert await q.enqueue("resume", {}, dedup_key="d1", session=s) is None
    assert job_id is not None and await q.pending_count() == 1


async def test_run_after_is_respected_and_oldest_due_goes_first(any_db: Database, clock: FakeClock) -> None:
    """A job is not claimable before run_after; due jobs come out oldest first."""
    q = JobQueue(any_db, clock=clock)
    later = await q.enqueue("expire", {}, run_after=T0 + timedelta(minutes=10))
    older = await q.enqueue("resume", {}, run_after=T0 - timedelta(minutes=1))
    newer = await q.enqueue("resume", {})
    due = await q.claim("w", limit=5)
    assert [j.id for j in due] == [older, newer]
    for job in due:
        await q.complete(job.id)
    assert await q.claim("w") == []
    clock.advance(599)
    assert await q.claim("w") == []
    clock.advance(1)
    assert [j.id for j in await q.claim("w")] == [later]


async def test_kinds_filter_limits_what_a_worker_takes(any_db: Database) -> None:
    """A worker asking for some kinds leaves the others queued."""
    q = JobQueue(any_db)
    await q.enqueue("resume", {})
    expire = await q.enqueue("expire", {})
    assert [j.id for j in await q.claim("w", kinds=["expire"], limit=5)] == [expire]
    assert await q.pending_count(kinds=["resume"]) == 1


async def test_expired_lease_is_reclaimed_and_the_old_holder_loses_it(any_db: Database, clock: FakeClock) -> None:
    """A job whose worker died is claimed again after its lease; the dead worker
    can no longer complete or fail it."""
    q = JobQueue(any_db, clock=clock)
    job_id = await new_job(q)
    (first,) = await q.claim("w1", lease_s=60)
    clock.advance(59)
    assert await q.claim("w2") == []
    clock.advance(1)
    (second,) = await q.claim("w2", lease_s=60)
    assert second.id == first.id == job_id and second.attempts == 2
    assert not await q.complete(job_id, worker_id="w1")
    assert await q.fail(job_id, "late", worker_id="w1") is None
    assert await q.complete(job_id, worker_id="w2")


async def test_lease_expiring_on_the_last_attempt_fails_the_job(any_db: Database, clock: FakeClock) -> None:
    """A job that kills its worker every time is not run forever."""
    q = JobQueue(any_db, clock=clock)
    job_id = await new_job(q)
    for _ in range(3):
        assert len(await q.claim("w", lease_s=10, max_attempts=3)) == 1
        clock.advance(10)
    assert await q.claim("w", lease_s=10, max_attempts=3) == []
    job = await get(q, job_id)
    assert job.status == "quarantined" and job.attempts == 3


async def test_fail_requeues_with_backoff_then_gives_up(any_db: Database, clock: FakeClock) -> None:
    """fail() requeues after the default backoff or retry_in_s, and marks the job
    failed once max_attempts claims are used."""
    q = JobQueue(any_db, clock=clock)
    job_id = await new_job(q)
    (job,) = await q.claim("w")
    assert await q.fail(job_id, "boom", max_attempts=3) == "queued"
    requeued = await get(q, job_id)
    assert requeued.last_error == "boom"
    assert requeued.run_after == T0 + timedelta(seconds=default_backoff(1))
    assert await q.claim("w") == []
    clock.advance(default_backoff(1))
    (job,) = await q.claim("w")
    assert await q.fail(job_id, "boom", retry_in_s=0, max_attempts=3) == "queued"
    (job,) = await q.claim("w")
    assert job.attempts == 3
    assert await q.fail(job_id, "still boom", max_attempts=3) == "quarantined"
    assert await q.pending_count() == 0 and await q.claim("w") == []


def test_default_backoff_doubles_and_caps() -> None:
    """5 s, 10 s, 20 s … capped at 15 minutes."""
    assert [default_backoff(n) for n in (1, 2, 3)] == [5, 10, 20]
    assert default_backoff(30) == 900


async def test_concurrent_claimers_take_each_job_exactly_once(any_db: Database) -> None:
    """12 claim loops racing over 300 jobs: every job is claimed once, none twice."""
    q = JobQueue(any_db)
    for start in range(0, 300, 50):
        async with any_db.sessions() as s, s.begin():
            for i in range(start, start + 50):
                await q.enqueue("resume", {"i": i}, session=s)
    claimed: list[tuple[str, int]] = []

    async def worker(name: str) -> None:
        rng = random.Random(name)
        while jobs := await q.claim(name, limit=rng.randint(1, 5)):
            for job in jobs:
                claimed.append((name, job.payload["i"]))
                assert await q.complete(job.id, worker_id=name)
            await asyncio.sleep(0)

    await asyncio.gather(*(worker(f"w{n}") for n in range(12)))
    items = [i for _, i in claimed]
    assert sorted(items) == list(range(300))
    assert len({name for name, _ in claimed}) > 1
    assert await q.pending_count() == 0
