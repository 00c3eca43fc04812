"""Wake-ups between processes on PostgreSQL (``storage/notify.py``): a job another process commits
is claimed at once by a worker polling every 30 s; a widget event another process stores wakes the
open stream behind it at once, and not one already past it; a rolled-back insert and another
schema's (another deployment in the same database) wake nothing; the listener comes back after the
server drops its connection and then polls what it may have missed. Each "other process" is a
second engine on the same schema, with its own connections and its own listener."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import create_async_engine

from agent.llm.testing import ScriptedModel
from agent.worker import Worker, WorkerConfig
from storage.db import Database
from storage.jobs import Job, JobQueue
from storage.models import JobRow
from storage.notify import JOBS, Notifications
from storage.records import wall_clock
from storage.widget import WidgetStore
from tests.conftest import PG_URL, drop_pg, make_pg
from tests.support import seeded
from tests.wake_kit import stream_behind_is_woken, until

pytestmark = pytest.mark.skipif(not PG_URL, reason="SIGNOFF_TEST_PG_URL not set")


def _second(schema: str) -> Database:
    """Another process's handle on the same schema."""
    assert PG_URL
    return Database.of(create_async_engine(PG_URL, connect_args={"server_settings": {"search_path": schema}}))


@pytest.fixture
async def two() -> AsyncIterator[tuple[Database, Database, str]]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    here = await make_pg(schema)
    there = _second(schema)
    yield here, there, schema
    await there.dispose()
    await here.dispose()
    await drop_pg(schema)


async def _listening(db: Database) -> None:
    assert db.notifications is not None
    await asyncio.wait_for(db.notifications.listening.wait(), 10)


async def test_a_job_another_process_commits_is_claimed_at_once(two: tuple[Database, Database, str]) -> None:
    here, there, _schema = two
    h = await seeded(here, ScriptedModel([]))
    ran: asyncio.Queue[Job] = asyncio.Queue()

    async def handle(job: Job) -> None:
        await ran.put(job)

    worker = Worker(h.runtime, config=WorkerConfig(poll_s=30.0), handlers={"other": handle})
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run_forever(stop))
    try:
        await _listening(here)
        await asyncio.sleep(0.3)  # the first claim found nothing: the worker waits out its poll
        loop = asyncio.get_running_loop()
        for n in range(3):
            started = loop.time()
            await JobQueue(there, clock=h.clock).enqueue("other", {"n": n})
            job = await asyncio.wait_for(ran.get(), 5)
            assert job.payload == {"n": n} and loop.time() - started < 2, loop.time() - started
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)


async def test_a_rolled_back_job_and_another_schemas_wake_nothing(two: tuple[Database, Database, str]) -> None:
    here, there, _schema = two
    heard: list[Any] = []
    assert PG_URL
    elsewhere_schema = f"t_{uuid.uuid4().hex[:12]}"
    elsewhere = await make_pg(elsewhere_schema)
    try:
        with here.heard(JOBS, heard.append):
            await _listening(here)
            async with there.engine.connect() as conn:
                tx = await conn.begin()
                await conn.execute(insert(JobRow).values(**_job_row("rolled-back")))
                await tx.rollback()
            await JobQueue(elsewhere).enqueue("other", {"n": 1})  # same database, another schema
            await asyncio.sleep(0.5)
            assert heard == []
            await JobQueue(there).enqueue("other", {"n": 2})
            await until(lambda: heard == [[]])
    finally:
        await elsewhere.dispose()
        await drop_pg(elsewhere_schema)


def _job_row(kind: str) -> dict[str, Any]:
    now = wall_clock()
    return {"kind": kind, "payload": {}, "status": "queued", "attempts": 0, "run_after": now, "created_at": now}


async def test_a_widget_event_another_process_stores_wakes_the_stream_behind_it(
    two: tuple[Database, Database, str],
) -> None:
    here, there, _schema = two
    await stream_behind_is_woken(WidgetStore(here), WidgetStore(there), lambda: _listening(here), quiet_s=0.5)


async def test_the_listener_comes_back_after_its_connection_is_dropped(two: tuple[Database, Database, str]) -> None:
    here, there, _schema = two
    notes = here.notifications
    assert notes is not None
    heard: list[Any] = []
    with here.heard(JOBS, heard.append):
        await _listening(here)
        dropped = notes.backend_pid
        async with there.engine.connect() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": dropped})
        await until(lambda: not notes.listening.is_set())
        await asyncio.wait_for(notes.listening.wait(), 10)
        assert notes.backend_pid not in (None, dropped)
        await until(lambda: heard == [None])  # reconnected: whatever was missed is looked for
        await JobQueue(there).enqueue("other", {"n": 1})
        await until(lambda: heard == [None, []])
    assert here.notifications is notes


async def test_a_listener_lost_again_and_again_comes_back_soon_each_time(two: tuple[Database, Database, str]) -> None:
    """Backoff is for a database that cannot be reached: a connection that listened and was then
    dropped is retried at the first step each time, however often it happens."""
    here, there, _schema = two
    notes = Notifications(here.engine, retry_s=(0.1, 60.0))
    try:
        with notes.subscribe(JOBS, lambda _payload: None):
            for _ in range(3):
                await asyncio.wait_for(notes.listening.wait(), 5)
                async with there.engine.connect() as conn:
                    await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": notes.backend_pid})
                await until(lambda: not notes.listening.is_set())
            await asyncio.wait_for(notes.listening.wait(), 5)
    finally:
        await notes.close()
