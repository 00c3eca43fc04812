"""What the wake-up tests of both databases share (``test_notify_pg.py``, ``test_probe.py``): the
widget scenario "another process's event wakes the stream behind it and not one past it", and a
bounded wait."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from bot.widget.watch import Watch
from storage.widget import WidgetStore


async def until(check: Callable[[], Any], *, seconds: float = 5.0) -> None:
    """Wait up to ``seconds`` for ``check()``."""
    for _ in range(int(seconds / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not heard in {seconds:g} s")


async def stream_behind_is_woken(
    store: WidgetStore, theirs: WidgetStore, ready: Callable[[], Awaitable[None]], *, quiet_s: float
) -> None:
    """Two open streams at seq 1; another process (``theirs``) stores an event of the first: it is
    woken within a second and the second is not; then one of the second below what that stream
    has read: it is not woken within ``quiet_s``. ``ready``: wait until the watch is listening."""
    for sid in ("wss_a", "wss_b"):
        await store.create(id=sid, secret=f"secret-{sid}", shop="s", ip_hash="h")
        await store.append(sid, key=f"{sid}:0", kind="notice", data={"code": "x"})
    watch = Watch(store, interval=60.0)
    try:
        with watch.listen("wss_a") as a, watch.listen("wss_b") as b:
            a.seen, b.seen = 1, 1
            await ready()
            loop = asyncio.get_running_loop()
            started = loop.time()
            await theirs.append("wss_a", key="wss_a:1", kind="notice", data={"code": "y"})
            await asyncio.wait_for(a.woken.wait(), 5)
            assert loop.time() - started < 1 and not b.woken.is_set()
            b.seen = 3  # a stream already past what is stored is not woken by hearing of it
            await theirs.append("wss_b", key="wss_b:1", kind="notice", data={"code": "y"})
            await asyncio.sleep(quiet_s)
            assert not b.woken.is_set()
    finally:
        await watch.close()
