"""The event loop's lag, and the worker's brake on it.

``signoff serve`` runs the worker on the web server's loop: jobs busy with the CPU must not take
so many turns at once that the loop is slow to answer. The worker takes no new job while the loop
runs late (``WorkerConfig.lag_limit_s``), and one job always runs.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from agent.llm.testing import ScriptedModel
from agent.loop_lag import LoopLag
from agent.worker import Worker, WorkerConfig
from storage.db import Database
from storage.jobs import Job
from tests.support import seeded

KIND = "inbound"


async def test_the_lag_is_how_late_a_timer_fires_and_it_falls_back_once_the_loop_is_free() -> None:
    lag = LoopLag(interval=0.005)
    with lag.timing():
        await lag.tick()
        assert not lag.behind(0.02)
        time.sleep(0.06)  # noqa: ASYNC251  (the loop held by one callback, on purpose)
        assert lag.behind(0.02)  # the timer due now is already late
        await lag.tick()
        assert lag.last >= 0.04 and lag.behind(0.02)
        for _ in range(3):
            await lag.tick()
        assert not lag.behind(0.02) and lag.last < 0.02
    assert not lag.running and not lag.behind(0.0)


def test_a_lag_timer_needs_a_positive_interval() -> None:
    with pytest.raises(ValueError, match="positive"):
        LoopLag(interval=0)


async def _peak_running(db: Database, config: WorkerConfig, jobs: int) -> tuple[int, int]:
    """Run ``jobs`` jobs whose steps each hold the loop 20 ms; the most that ran at once, and how many ended."""
    h = await seeded(db, ScriptedModel([]))
    for n in range(jobs):
        assert await h.runtime.s.jobs.enqueue(KIND, {"n": n}) is not None
    running, peak, ended = 0, 0, 0
    stop = asyncio.Event()

    async def busy(_job: Job) -> None:
        nonlocal running, peak, ended
        running += 1
        peak = max(peak, running)
        for _ in range(3):
            time.sleep(0.02)  # noqa: ASYNC251  (a step busy with the CPU, holding the loop on purpose)
            await asyncio.sleep(0)
        running -= 1
        ended += 1
        if ended == jobs:
            stop.set()

    worker = Worker(h.runtime, config=config, handlers={KIND: busy})
    await asyncio.wait_for(worker.run_forever(stop), timeout=60)
    return peak, ended


async def test_the_worker_takes_no_new_job_while_the_loop_runs_late(db: Database) -> None:
    peak, ended = await _peak_running(db, WorkerConfig(batch=4, poll_s=0.05), 40)
    assert ended == 40
    assert peak <= 8, peak  # a batch, and at most one more before the lag shows


async def test_without_a_lag_limit_only_the_concurrency_bounds_the_jobs(db: Database) -> None:
    peak, ended = await _peak_running(db, WorkerConfig(batch=4, poll_s=0.05, lag_limit_s=None), 40)
    assert ended == 40
    assert peak >= 20, peak
