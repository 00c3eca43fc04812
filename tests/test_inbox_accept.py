"""The inbox's acceptance (``storage/inbox.py``) on both databases: a message is recorded with
all its keys, its row and its turn's job at once; a redelivery under any one known key writes
nothing; of many deliveries of one message racing, exactly one is accepted; a queue at its cap
stores nothing. On PostgreSQL the acceptance is one statement (no ``BEGIN``/``COMMIT``)."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import event, func, insert, select

from storage import fastsql
from storage.db import Database
from storage.inbox import INBOUND_JOB, Inbox
from storage.jobs import JobQueue
from storage.models import InboundRow, JobRow, ProcessedEventRow
from storage.records import wall_clock


async def _rows(db: Database) -> tuple[int, int, int]:
    async with db.reader() as s:
        n = [await s.scalar(select(func.count()).select_from(t)) for t in (ProcessedEventRow, InboundRow, JobRow)]
    return (int(n[0] or 0), int(n[1] or 0), int(n[2] or 0))


async def test_a_message_is_recorded_with_its_keys_row_and_job(any_db: Database) -> None:
    inbox = Inbox(any_db, JobQueue(any_db))
    accepted = await inbox.accept("slack", ["ev:1", "msg:T1:C1:1.0", "ev:1"], {"text": "hi"})
    assert accepted.fresh and not accepted.full and accepted.id is not None
    assert await _rows(any_db) == (2, 1, 1)
    item = await inbox.get(accepted.id)
    assert item is not None and (item.face, item.status, item.payload, item.result) == (
        "slack",
        "queued",
        {"text": "hi"},
        None,
    )
    async with any_db.reader() as s:
        job = (await s.execute(select(JobRow))).scalar_one()
        keys = set((await s.execute(select(ProcessedEventRow.event_id, ProcessedEventRow.source))).all())
    assert (job.kind, job.payload, job.dedup_key, job.status) == (
        INBOUND_JOB,
        {"inbound_id": accepted.id},
        f"inbound:{accepted.id}",
        "queued",
    )
    assert keys == {("ev:1", "slack"), ("msg:T1:C1:1.0", "slack")}


async def test_a_redelivery_under_any_known_key_writes_nothing(any_db: Database) -> None:
    inbox = Inbox(any_db, JobQueue(any_db))
    assert (await inbox.accept("slack", ["ev:1", "msg:1"], {"n": 1})).fresh
    before = await _rows(any_db)
    for keys in (["ev:1"], ["ev:2", "msg:1"], ["msg:1", "ev:3"]):
        again = await inbox.accept("slack", keys, {"n": 2})
        assert (again.fresh, again.full, again.id) == (False, False, None)
    assert await _rows(any_db) == before


async def test_of_racing_deliveries_of_one_message_exactly_one_is_accepted(any_db: Database) -> None:
    inboxes = [Inbox(any_db, JobQueue(any_db)) for _ in range(8)]
    results = await asyncio.gather(
        *(i.accept("teams", [f"act:{n}", "msg:same"], {"n": n}) for n, i in enumerate(inboxes))
    )
    assert sum(r.fresh for r in results) == 1
    assert all(r.id is None for r in results if not r.fresh)
    assert await _rows(any_db) == (2, 1, 1)


async def test_a_full_queue_records_no_key(any_db: Database) -> None:
    inbox = Inbox(any_db, JobQueue(any_db))
    assert (await inbox.accept("email", ["m:1"], {}, max_queued=1)).fresh
    full = await inbox.accept("email", ["m:2", "m:3"], {}, max_queued=1)
    assert (full.fresh, full.full) == (False, True)
    assert await _rows(any_db) == (1, 1, 1)


async def test_on_postgresql_the_acceptance_is_one_statement(pg_db: Database) -> None:
    any_db = pg_db
    inbox = Inbox(any_db, JobQueue(any_db))
    await inbox.accept("slack", ["warm"], {})
    seen: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    engine = any_db.engine.sync_engine  # the autocommit engine shares its events
    event.listen(engine, "before_cursor_execute", count)
    try:
        with fastsql.traced() as fast:  # prepared statements run straight on the cursor
            assert (await inbox.accept("slack", ["ev:9", "msg:9"], {"n": 9})).fresh
    finally:
        event.remove(engine, "before_cursor_execute", count)
    sent = seen + fast
    assert len(sent) == 1 and sent[0].lstrip().startswith("WITH gate AS"), sent


async def test_a_key_a_concurrent_delivery_commits_first_undoes_the_whole_acceptance(pg_db: Database) -> None:
    """The other delivery inserted the key but has not committed when ours reads: ours waits on
    the key's row, then violates its primary key, and its message and job are undone with it."""
    inbox = Inbox(pg_db, JobQueue(pg_db))
    async with pg_db.engine.connect() as other:
        tx = await other.begin()
        await other.execute(
            insert(ProcessedEventRow).values(event_id="msg:same", source="slack", received_at=wall_clock())
        )
        ours = asyncio.create_task(inbox.accept("slack", ["ev:ours", "msg:same"], {"n": 1}))
        await asyncio.sleep(0.5)
        assert not ours.done()  # waiting on the other delivery's key
        await tx.commit()
    accepted = await asyncio.wait_for(ours, 10)
    assert (accepted.fresh, accepted.id) == (False, None)
    assert await _rows(pg_db) == (1, 0, 0)
