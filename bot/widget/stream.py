"""``GET /widget/api/stream``: a session's events as server-sent events, resumable.

Each stored event is one frame with id ``seq``, except text (``answer``, ``person``), which is
sent in pieces with ids ``seq.k`` so the reader sees it arrive. ``Last-Event-ID`` names the
last frame the browser has: ``12`` resumes after event 12, ``12.3`` inside event 12 after its
piece 3. Nothing is sent twice and nothing is skipped, because the ids are the store's own
order (``storage/widget.py``). A page that loads afresh asks from the start and redraws the
whole conversation. Events written after the stream opened are paced (``chunk_delay_s``
between pieces); a replay is sent at once.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from bot.widget.config import WidgetConfig
from bot.widget.events import HUB
from storage.widget import WidgetEvent, WidgetStore

CHUNKED = frozenset({"answer", "person"})
_WORDS = re.compile(r"\S+\s*|\s+")
WORDS_PER_CHUNK = 4


def chunks(text: str) -> list[str]:
    """``text`` in pieces of a few words; joined they are exactly ``text``."""
    words = _WORDS.findall(text)
    return ["".join(words[i : i + WORDS_PER_CHUNK]) for i in range(0, len(words), WORDS_PER_CHUNK)] or [""]


@dataclass(frozen=True)
class Cursor:
    seq: int = 0
    #: The last piece of event ``seq`` the reader has (``None``: all of it).
    piece: int | None = None


def parse_cursor(value: str | None) -> Cursor:
    if not value or len(value) > 32:
        return Cursor()
    head, _, tail = value.strip().partition(".")
    if not head.isdigit() or (tail and not tail.isdigit()):
        return Cursor()
    return Cursor(int(head), int(tail) if tail else None)


def frames(event: WidgetEvent, cursor: Cursor) -> list[tuple[str, dict[str, Any]]]:
    """The frames of ``event`` the reader does not have yet: (id, data)."""
    base = {"seq": event.seq, "kind": event.kind}
    if event.kind not in CHUNKED:
        return [] if event.seq <= cursor.seq and cursor.piece is None else [(str(event.seq), {**base, **event.data})]
    text = str(event.data.get("text", ""))
    extra = {k: v for k, v in event.data.items() if k != "text"}
    pieces = chunks(text)
    start = 0
    if event.seq == cursor.seq and cursor.piece is not None:
        start = cursor.piece + 1
    elif event.seq <= cursor.seq:
        return []
    return [
        (f"{event.seq}.{k}", {**base, **extra, "k": k, "n": len(pieces), "text": pieces[k]})
        for k in range(start, len(pieces))
    ]


def frame_bytes(frame_id: str, data: dict[str, Any]) -> bytes:
    return f"id: {frame_id}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def serve(
    request: web.Request,
    session_id: str,
    store: WidgetStore,
    config: WidgetConfig,
    *,
    cors: Mapping[str, str] | None = None,
) -> web.StreamResponse:
    cursor = parse_cursor(request.headers.get("Last-Event-ID"))
    response = web.StreamResponse(
        headers={
            **(cors or {}),
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
            "X-Accel-Buffering": "no",
        }
    )
    loop = asyncio.get_running_loop()
    ends = loop.time() + config.stream_max_s
    with HUB.listen(session_id) as woken:
        await response.prepare(request)
        await response.write(b"retry: 1000\n\n")
        replay = True  # what is already stored when the stream opens is sent at once
        quiet_since = loop.time()
        while loop.time() < ends and request.transport is not None and not request.transport.is_closing():
            woken.clear()
            events = await store.after(session_id, cursor.seq - (1 if cursor.piece is not None else 0))
            for event in events:
                for frame_id, data in frames(event, cursor):
                    await response.write(frame_bytes(frame_id, data))
                    if not replay and event.kind in CHUNKED and config.chunk_delay_s:
                        await asyncio.sleep(config.chunk_delay_s)
                cursor = Cursor(event.seq)
            replay = False
            if events:
                quiet_since = loop.time()
                continue
            if loop.time() - quiet_since >= config.heartbeat_s:
                await response.write(b": keep-alive\n\n")
                quiet_since = loop.time()
            try:
                await asyncio.wait_for(woken.wait(), timeout=config.poll_s)
            except TimeoutError:
                pass
    return response


__all__ = ["Cursor", "chunks", "frames", "parse_cursor", "serve"]
