"""The widget's open streams are polled by one poller per process (``bot/widget/watch.py``): N
open streams cost about one store read a second, not N, and a write by another process (the
store written without this process's hub) still reaches an open stream within a poll or two."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from typing import Any

import aiohttp
import pytest
from sqlalchemy import event as sa_event

from bot.widget.face import WidgetFace
from bot.widget.watch import Watch
from storage.db import Database
from storage.widget import WidgetStore
from tests.widget_kit import WidgetServer, widget_server

ORIGIN = "https://shop.example"
STREAMS = 20


@pytest.fixture(scope="module")
def server() -> Iterator[WidgetServer]:
    with widget_server(SIGNOFF_WIDGET_ORIGINS=ORIGIN, SIGNOFF_WIDGET_SESSIONS_PER_IP_HOUR="200") as s:
        yield s


def _face(server: WidgetServer) -> WidgetFace:
    face = next(f for f in server.app.faces if isinstance(getattr(f, "inner", None), WidgetFace))
    return face.inner  # type: ignore[attr-defined,no-any-return]


def _guests(server: WidgetServer, n: int) -> list[dict[str, str]]:
    async def open_all() -> list[dict[str, str]]:
        async with aiohttp.ClientSession() as http:
            out = []
            for _ in range(n):
                async with http.post(f"{server.url}/widget/api/session", json={}, headers={"Origin": ORIGIN}) as r:
                    out.append({"Origin": ORIGIN, "X-Signoff-Session": (await r.json())["session"]})
            return out

    return server.run(open_all())  # type: ignore[no-any-return]


def _counting(server: WidgetServer) -> tuple[list[str], Any]:
    """The SQL statements on ``widget_events`` from now on, and the listener to remove."""
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "widget_events" in statement:
            seen.append(statement)

    sa_event.listen(server.app.db.engine.sync_engine, "before_cursor_execute", count)
    return seen, count


def test_n_open_streams_read_the_store_about_once_a_second_not_n_times(server: WidgetServer) -> None:
    guests = _guests(server, STREAMS)
    watch = _face(server).watch

    async def scenario() -> tuple[int, bool]:
        async with aiohttp.ClientSession() as http:
            streams = [await http.get(f"{server.url}/widget/api/stream", headers=who) for who in guests]
            for r in streams:
                assert await r.content.readline() == b"retry: 1000\n"
            await asyncio.sleep(0.5)  # each stream's first read (the replay) is done
            seen, listener = _counting(server)
            try:
                await asyncio.sleep(3.0)
            finally:
                sa_event.remove(server.app.db.engine.sync_engine, "before_cursor_execute", listener)
            running = watch.running
            for r in streams:
                r.close()
        return len(seen), running

    reads, running = server.run(scenario())
    # Three poll ticks in 3 s (one query each, for all 20 streams); per-stream polling was ~60.
    assert 2 <= reads <= 5, reads
    assert running
    deadline = time.monotonic() + 10  # the streams notice their readers left; the poller then stops
    while watch.running:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_another_process_write_reaches_an_open_stream_within_two_polls(server: WidgetServer) -> None:
    """Written straight to the store (no ``HUB.wake``: what another process's write looks like here)."""
    (who,) = _guests(server, 1)
    store = WidgetStore(server.app.db)

    async def scenario() -> float:
        session = await store.by_secret(who["X-Signoff-Session"])
        assert session is not None
        async with aiohttp.ClientSession() as http, http.get(f"{server.url}/widget/api/stream", headers=who) as r:
            assert await r.content.readline() == b"retry: 1000\n"
            await asyncio.sleep(0.5)
            t0 = time.monotonic()
            await store.append(session.id, key=f"elsewhere:{session.id}", kind="notice", data={"code": "verified"})
            async for line in r.content:
                if line.startswith(b"event: notice"):
                    return time.monotonic() - t0
        raise AssertionError("the stream ended without the event")

    took = server.run(asyncio.wait_for(scenario(), 30))
    assert took < 2 * _face(server).config.poll_s + 0.5, took


async def test_one_poll_asks_once_per_chunk_and_wakes_only_the_streams_behind(any_db: Database) -> None:
    store = WidgetStore(any_db)
    ids = [f"wss_{i}" for i in range(5)]
    for sid in ids:
        await store.create(id=sid, secret=f"secret-{sid}", shop="s", ip_hash="h")
        for k in range(3):
            await store.append(sid, key=f"{sid}:{k}", kind="notice", data={"code": "x"})
    await store.append(ids[0], key="other-session-only", kind="notice", data={"code": "x"})
    assert await store.latest([*ids[:2], "wss_none"]) == {ids[0]: 4, ids[1]: 3}
    watch = Watch(store, interval=60.0, chunk=2)
    asked: list[list[str]] = []
    latest = store.latest

    async def counted(session_ids: Sequence[str]) -> dict[str, int]:
        asked.append(list(session_ids))
        return await latest(session_ids)

    store.latest = counted  # type: ignore[method-assign]
    ears = []
    try:
        with watch.listen(ids[0]) as a, watch.listen(ids[1]) as b, watch.listen(ids[2]) as c:
            with watch.listen(ids[3]) as d, watch.listen(ids[4]) as e:
                a.seen, b.seen, c.seen, d.seen = 3, 3, 2, 3  # e has not read yet: it will, unasked
                ears = [a, b, c, d, e]
                assert sorted(await watch.poll()) == [ids[0], ids[2]]
                assert [x.woken.is_set() for x in ears] == [True, False, True, False, False]
                assert [len(chunk) for chunk in asked] == [2, 2, 1]
    finally:
        await watch.close()
    assert not watch.running
    with pytest.raises(ValueError):
        Watch(store, interval=0)
