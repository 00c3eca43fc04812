"""Wake-ups between processes on SQLite (``storage/probe.py``): a job another process commits is
claimed within a probe's tick by a worker polling every 30 s, and only a due job of the worker's
own kinds wakes it (another kind, or one queued for later, costs no claim at all); a widget event
another process stores wakes the open stream behind it and not one already past it; a burst wider
than one probe reads makes the watch poll everything; a probe that fails is logged once and keeps
going, and a quiet one looks less often. Each "other process" is a second ``Database`` on the
same file, with its own connections."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.llm.testing import ScriptedModel
from agent.worker import Worker, WorkerConfig
from storage import widget as widget_store
from storage.db import Database, create_database
from storage.jobs import Job, JobQueue
from storage.probe import EVERY_S, probing
from storage.widget import WidgetStore
from tests.conftest import make_sqlite
from tests.support import seeded
from tests.wake_kit import stream_behind_is_woken, until


@pytest.fixture
async def two(tmp_path: Path) -> AsyncIterator[tuple[Database, Database]]:
    path = tmp_path / "shared.db"
    here = await make_sqlite(path)
    there = create_database(f"sqlite+aiosqlite:///{path}")
    yield here, there
    await there.dispose()
    await here.dispose()


class Claims(list[int]):
    """How many jobs each of a queue's claims found."""


async def _worker(db: Database, handlers: dict[str, Any]) -> tuple[Worker, JobQueue, Claims]:
    h = await seeded(db, ScriptedModel([]))
    queue, claims, claim = h.runtime.s.jobs, Claims(), h.runtime.s.jobs.claim

    async def counted(*args: Any, **kwargs: Any) -> list[Job]:
        jobs = await claim(*args, **kwargs)
        claims.append(len(jobs))
        return jobs

    queue.claim = counted  # type: ignore[method-assign]
    return Worker(h.runtime, config=WorkerConfig(poll_s=30.0), handlers=handlers), queue, claims


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[None]:
    """The worker's loop for the block, its first claim (finding nothing) done: it waits out its poll."""
    stop = asyncio.Event()
    loop = asyncio.create_task(worker.run_forever(stop))
    try:
        await asyncio.sleep(0.3)
        yield
    finally:
        stop.set()
        await asyncio.wait_for(loop, 10)


async def test_a_job_another_process_commits_is_claimed_within_a_tick(two: tuple[Database, Database]) -> None:
    here, there = two
    ran: asyncio.Queue[Job] = asyncio.Queue()

    async def handle(job: Job) -> None:
        await ran.put(job)

    worker, queue, claims = await _worker(here, {"other": handle})
    async with running(worker):
        loop = asyncio.get_running_loop()
        for n in range(3):
            started = loop.time()
            await JobQueue(there, clock=queue._clock).enqueue("other", {"n": n})
            job = await asyncio.wait_for(ran.get(), 5)
            assert job.payload == {"n": n} and loop.time() - started < 1, loop.time() - started
        await asyncio.sleep(5 * EVERY_S)
        settled = list(claims)
        await asyncio.sleep(20 * EVERY_S)
        assert claims == settled and sum(claims) == 3, claims  # nothing due: the probe claims nothing


async def test_own_jobs_other_kinds_and_later_jobs_cost_no_claim(two: tuple[Database, Database]) -> None:
    here, there = two
    done: asyncio.Queue[Job] = asyncio.Queue()

    async def handle(job: Job) -> None:
        await done.put(job)

    worker, queue, claims = await _worker(here, {"mine": handle})
    async with running(worker):
        await queue.enqueue("mine", {"n": 1})  # this process's own: woken at once, claimed once
        await asyncio.wait_for(done.get(), 5)
        await asyncio.sleep(5 * EVERY_S)
        settled = list(claims)
        await JobQueue(there, clock=queue._clock).enqueue("theirs", {"n": 2})  # a kind this worker does not run
        await JobQueue(there, clock=queue._clock).enqueue("mine", {"n": 3}, run_after=queue._now() + timedelta(hours=1))
        await asyncio.sleep(20 * EVERY_S)
        assert claims == settled and sum(claims) == 1, claims
        assert done.empty()


async def test_a_widget_event_another_process_stores_wakes_the_stream_behind_it(
    two: tuple[Database, Database],
) -> None:
    here, there = two

    async def ready() -> None:
        await asyncio.sleep(3 * EVERY_S)  # the probe has noted where it starts

    await stream_behind_is_woken(WidgetStore(here), WidgetStore(there), ready, quiet_s=10 * EVERY_S)


async def test_a_burst_wider_than_one_probe_asks_for_everything(
    two: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    here, there = two
    monkeypatch.setattr(widget_store, "PROBE_ROWS", 3)
    store, theirs = WidgetStore(here), WidgetStore(there)
    await store.create(id="wss_a", secret="secret-a", shop="s", ip_hash="h")
    heard: list[tuple[str | None, int]] = []
    with store.hearing(lambda sid, seq: heard.append((sid, seq))):
        await asyncio.sleep(3 * EVERY_S)
        await theirs.append("wss_a", key="k1", kind="notice", data={})
        await until(lambda: heard == [("wss_a", 1)])
        for n in range(2, 7):
            await theirs.append("wss_a", key=f"k{n}", kind="notice", data={})
        await until(lambda: (None, 0) in heard)
        await asyncio.sleep(3 * EVERY_S)
    assert heard[0] == ("wss_a", 1) and (None, 0) in heard, heard
    assert all(seq > 3 for sid, seq in heard[heard.index((None, 0)) + 1 :] if sid), heard  # nothing heard twice


async def test_a_failing_probe_is_logged_once_and_keeps_going(caplog: pytest.LogCaptureFixture) -> None:
    looks: list[int] = []

    async def look() -> bool:
        looks.append(1)
        if len(looks) <= 3:
            raise OSError("database is away")
        return False

    with caplog.at_level(logging.WARNING, logger="storage.probe"), probing(look, every_s=0.01, idle_s=0.01):
        await until(lambda: len(looks) >= 6)
    warnings = [r for r in caplog.records if r.name == "storage.probe"]
    assert len(warnings) == 1 and "OSError" in warnings[0].getMessage()
    with pytest.raises(ValueError):
        with probing(look, every_s=0):
            pass


async def test_a_quiet_probe_looks_less_often_until_it_finds_something() -> None:
    loop = asyncio.get_running_loop()
    at: list[float] = []
    found = False

    async def look() -> bool:
        at.append(loop.time())
        return found

    with probing(look, every_s=0.01, idle_s=0.5, quiet_s=0.05):
        await until(lambda: len(at) >= 8)  # quiet for 0.05 s, then half a second apart
        gaps = [b - a for a, b in zip(at, at[1:], strict=False)]
        assert min(gaps[6:]) >= 0.45 and min(gaps[:3]) < 0.45, gaps
        found = True
        before = len(at)
        await until(lambda: len(at) >= before + 5)  # found: every 0.01 s again
        assert at[-1] - at[before] < 0.45, at[before:]
