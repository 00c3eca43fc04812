"""A widget session's events (``storage/widget.py``): numbered 1, 2, 3… per session, each key
written once (a retried delivery writes nothing and gets ``None``), and appends racing on one
session all land, each with its own number — on SQLite and PostgreSQL (there one statement in
autocommit; a number another append took meanwhile is taken again)."""

from __future__ import annotations

import asyncio

from sqlalchemy import func, select

from storage.db import Database
from storage.models import WidgetEventRow
from storage.widget import WidgetStore


async def _rows(db: Database) -> list[tuple[str, int, str]]:
    async with db.reader() as s:
        stmt = select(WidgetEventRow.session_id, WidgetEventRow.seq, WidgetEventRow.key).order_by(
            WidgetEventRow.session_id, WidgetEventRow.seq
        )
        return [tuple(r) for r in (await s.execute(stmt)).all()]  # type: ignore[misc]


async def test_events_are_numbered_per_session_and_each_key_is_written_once(any_db: Database) -> None:
    store = WidgetStore(any_db)
    for sid in ("wss_a", "wss_b"):
        await store.create(id=sid, secret=f"secret-{sid}", shop="s", ip_hash="h")
    first = await store.append("wss_a", key="a:1", kind="user", data={"id": "1", "text": "hi"})
    assert first is not None and (first.seq, first.kind, first.data) == (1, "user", {"id": "1", "text": "hi"})
    assert (await store.append("wss_b", key="b:1", kind="notice", data={"code": "x"})).seq == 1  # type: ignore[union-attr]
    assert (await store.append("wss_a", key="a:2", kind="message", data={"text": "hello"})).seq == 2  # type: ignore[union-attr]
    assert await store.append("wss_a", key="a:1", kind="user", data={"id": "1", "text": "again"}) is None
    assert await _rows(any_db) == [("wss_a", 1, "a:1"), ("wss_a", 2, "a:2"), ("wss_b", 1, "b:1")]
    events = await store.after("wss_a", 0)
    assert [(e.seq, e.data) for e in events] == [(1, {"id": "1", "text": "hi"}), (2, {"text": "hello"})]
    assert events[0].created_at == first.created_at


async def test_racing_appends_on_one_session_all_land_with_distinct_numbers(any_db: Database) -> None:
    store = WidgetStore(any_db)
    await store.create(id="wss_r", secret="secret-r", shop="s", ip_hash="h")
    keys = [f"r:{i}" for i in range(6)]
    results = await asyncio.gather(
        *(store.append("wss_r", key=k, kind="notice", data={"code": k}) for k in [*keys, *keys])
    )
    written = [r for r in results if r is not None]
    assert sorted(e.seq for e in written) == list(range(1, 7))  # each key once, numbered without gaps
    assert sorted(e.key for e in written) == keys
    async with any_db.reader() as s:
        assert (await s.execute(select(func.count()).select_from(WidgetEventRow))).scalar_one() == 6
