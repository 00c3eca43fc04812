"""A job this process queues is claimed at once, not at the worker's next poll: a message a face
accepted (the inbox's job) and a job queued on its own both start within a fraction of a poll
interval of 30 s. A job queued by another process (its own JobQueue) waits for the poll."""

from __future__ import annotations

import asyncio

from agent.llm.testing import ScriptedModel
from agent.worker import Worker, WorkerConfig
from storage.db import Database
from storage.inbox import INBOUND_JOB
from storage.jobs import Job, JobQueue
from tests.support import seeded


async def test_a_job_queued_in_this_process_is_claimed_at_once_and_anothers_waits_for_the_poll(
    db: Database,
) -> None:
    h = await seeded(db, ScriptedModel([]))
    ran: asyncio.Queue[Job] = asyncio.Queue()

    async def handle(job: Job) -> None:
        await ran.put(job)

    worker = Worker(h.runtime, config=WorkerConfig(poll_s=30.0), handlers={INBOUND_JOB: handle, "other": handle})
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run_forever(stop))
    try:
        await asyncio.sleep(0.3)  # the first claim found nothing: the worker waits out its poll
        loop = asyncio.get_running_loop()
        started = loop.time()
        accepted = await h.runtime.s.inbox.accept("api", ["k:1"], {"text": "hi"})
        assert accepted.fresh
        job = await asyncio.wait_for(ran.get(), 5)
        assert job.kind == INBOUND_JOB and loop.time() - started < 2
        started = loop.time()
        await h.runtime.s.jobs.enqueue("other", {"n": 1})
        job = await asyncio.wait_for(ran.get(), 5)
        assert job.kind == "other" and loop.time() - started < 2
        await JobQueue(db).enqueue("other", {"n": 2})  # another process's queue: nothing wakes
        await asyncio.sleep(1.0)
        assert ran.empty()
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
