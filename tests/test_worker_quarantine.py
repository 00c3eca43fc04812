"""A job's time budget and its quarantine.

* a job past its budget is cancelled and counted as a failed attempt (it used to run on,
  and its 60 s lease let a second claim run it again beside itself);
* a job that fails ``max_attempts`` times is quarantined: terminal, logged, listed by
  ``signoff jobs``; a restarted worker never runs it again;
* a job whose process dies on its last attempt is quarantined by the next claim;
* an operator's ``signoff jobs retry`` queues it again.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from agent.llm.testing import ScriptedModel
from agent.worker import Worker, WorkerConfig
from bot.cli.commands import main
from storage.db import Database
from storage.jobs import Job, JobQueue
from tests.support import Harness, seeded

KIND = "inbound"


async def _job(h: Harness) -> int:
    job_id = await h.runtime.s.jobs.enqueue(KIND, {"n": 1})
    assert job_id is not None
    return job_id


async def _get(h: Harness, job_id: int) -> Job:
    job = await h.runtime.s.jobs.get(job_id)
    assert job is not None
    return job


async def test_a_job_over_its_budget_is_cancelled_and_counts_as_a_failed_attempt(db: Database) -> None:
    h = await seeded(db, ScriptedModel([]))
    cancelled = asyncio.Event()

    async def slow(_job: Job) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    worker = Worker(h.runtime, config=WorkerConfig(job_budget_s=0.2), handlers={KIND: slow})
    job_id = await _job(h)
    started = asyncio.get_running_loop().time()
    assert await worker.run_once() == 1
    assert asyncio.get_running_loop().time() - started < 5
    assert cancelled.is_set()
    job = await _get(h, job_id)
    assert job.status == "queued" and job.attempts == 1
    assert job.last_error == "over its time budget of 0.2 s"


async def test_the_lease_outlasts_the_budget_so_a_running_job_is_not_claimed_twice(db: Database) -> None:
    h = await seeded(db, ScriptedModel([]))
    gate, running = asyncio.Event(), asyncio.Event()
    runs: list[int] = []

    async def waits(job: Job) -> None:
        runs.append(job.id)
        running.set()
        await gate.wait()

    worker = Worker(h.runtime, config=WorkerConfig(job_budget_s=120), handlers={KIND: waits})
    await _job(h)
    first = asyncio.create_task(worker.run_once())
    await running.wait()
    h.clock.now += timedelta(seconds=90)  # past the old 60 s lease, within the budget
    assert await worker.run_once() == 0
    gate.set()
    await first
    assert runs == [runs[0]]


async def test_a_job_that_keeps_failing_is_quarantined_and_not_run_again_at_restart(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    h = await seeded(db, ScriptedModel([]))
    calls: list[int] = []

    async def boom(job: Job) -> None:
        calls.append(job.id)
        raise RuntimeError("always")

    config = WorkerConfig(max_attempts=3)
    job_id = await _job(h)
    with caplog.at_level(logging.ERROR, logger="agent.worker"):
        for _ in range(3):
            assert await Worker(h.runtime, config=config, handlers={KIND: boom}).run_once() == 1
            h.clock.now += timedelta(minutes=20)  # past any backoff
    job = await _get(h, job_id)
    assert job.status == "quarantined" and job.attempts == 3 and job.last_error == "RuntimeError: always"
    assert any("quarantined after 3 attempts" in r.getMessage() for r in caplog.records)
    assert [j.id for j in await h.runtime.s.jobs.quarantined()] == [job_id]

    # A restart: a new worker (run_forever takes over abandoned work first) never runs it.
    stop = asyncio.Event()
    restarted = Worker(h.runtime, config=WorkerConfig(max_attempts=3, poll_s=0.05), handlers={KIND: boom})
    task = asyncio.create_task(restarted.run_forever(stop))
    await asyncio.sleep(0.5)
    stop.set()
    await task
    assert len(calls) == 3
    assert await h.runtime.s.jobs.pending_count() == 0


async def test_a_database_outage_never_counts_towards_quarantine(db: Database) -> None:
    """A job that meets the database unavailable (not a fault of its own) gets its attempt back
    and runs again later: more outages than ``max_attempts`` still end in the job done, never
    quarantined (a customer's message must not be lost to a long restart)."""
    from agent.errors import Unavailable

    h = await seeded(db, ScriptedModel([]))
    outages = 5
    calls: list[int] = []

    async def flaky(job: Job) -> None:
        calls.append(job.id)
        if len(calls) <= outages:
            raise Unavailable()

    config = WorkerConfig(max_attempts=3)
    job_id = await _job(h)
    for n in range(outages):
        assert await Worker(h.runtime, config=config, handlers={KIND: flaky}).run_once() == 1
        job = await _get(h, job_id)
        assert job.status == "queued" and job.attempts == 0, (n, job)
        h.clock.now += timedelta(minutes=20)
    assert await Worker(h.runtime, config=config, handlers={KIND: flaky}).run_once() == 1
    assert (await _get(h, job_id)).status == "done" and len(calls) == outages + 1


async def test_a_job_whose_process_dies_on_its_last_attempt_is_quarantined_by_the_next_claim(db: Database) -> None:
    h = await seeded(db, ScriptedModel([]))
    jobs = h.runtime.s.jobs
    job_id = await _job(h)
    for n in range(3):  # three processes each claimed it and died (or stalled past the lease)
        assert len(await jobs.claim(f"dead-{n}", lease_s=10, max_attempts=3)) == 1
        h.clock.now += timedelta(seconds=11)
    ran: list[int] = []

    async def handler(job: Job) -> None:
        ran.append(job.id)

    assert await Worker(h.runtime, config=WorkerConfig(max_attempts=3), handlers={KIND: handler}).run_once() == 0
    assert ran == [] and (await _get(h, job_id)).status == "quarantined"


def test_signoff_jobs_lists_the_quarantined_and_retry_queues_one_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}"
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", url)
    monkeypatch.setenv("SIGNOFF_LLM_PROVIDER", "scripted")
    assert main(["db", "upgrade"]) == 0

    async def quarantine_one() -> int:
        db = Database.of(create_async_engine(url))
        try:
            q = JobQueue(db)
            job_id = await q.enqueue(KIND, {})
            assert job_id is not None
            await q.claim("w", max_attempts=1)
            assert await q.fail(job_id, "ValueError: bad payload", max_attempts=1) == "quarantined"
            return job_id
        finally:
            await db.dispose()

    job_id = asyncio.run(quarantine_one())
    capsys.readouterr()
    assert main(["jobs"]) == 0
    assert f"{job_id}\tinbound\t1 attempts\tValueError: bad payload" in capsys.readouterr().out
    assert main(["jobs", "retry", str(job_id)]) == 0
    assert main(["jobs", "retry", str(job_id)]) == 1
    assert main(["jobs"]) == 0
    assert "no quarantined jobs" in capsys.readouterr().out


async def test_a_worker_runs_as_many_jobs_at_once_as_the_setting_says(tmp_path: Path) -> None:
    """``SIGNOFF_WORKER_CONCURRENCY`` is the worker's number of jobs in flight (32 unset); a
    value out of range is refused naming it, before anything starts."""
    from agent.errors import ConfigError
    from bot.app import create_app
    from bot.settings import load_settings
    from sandbox.schema import upgrade

    url = f"sqlite+aiosqlite:///{tmp_path / 'w.db'}"
    await upgrade(url)
    for value, expected in (("150", 150), (None, 32)):
        env = {"SIGNOFF_DATABASE_URL": url, "SIGNOFF_ENV": "development"}
        if value is not None:
            env["SIGNOFF_WORKER_CONCURRENCY"] = value
        app = await create_app(load_settings(env), model=ScriptedModel([]), seed=False)
        try:
            assert app.worker().config.concurrency == expected
        finally:
            await app.close()
    for bad in ("0", "1001", "many"):
        with pytest.raises(ConfigError, match="(?i)worker_concurrency"):
            load_settings({"SIGNOFF_DATABASE_URL": url, "SIGNOFF_WORKER_CONCURRENCY": bad})
