"""``GET /widget/api/stream``: a session's events as server-sent events, resumable.

The frames are the contract's (INTERFACES.md, "Chat widget"): ``message`` {id, from, name?, text},
``confirmation`` {id, version, summary, state}, ``approval`` {id, state}, ``handoff`` {state,
name?}, and the widget's own ``notice`` {code}. Each stored event is one frame with SSE id
``seq``. A message written after the stream opened is first sent in ``delta`` frames {id, k, n,
text} with ids ``seq.k``, so the reader sees it arrive, then as its whole ``message`` frame;
what is already stored when the stream opens is sent whole, at once. ``Last-Event-ID`` names the
last frame the reader has: ``12`` resumes after event 12, ``12.3`` inside event 12 after its
piece 3. Nothing is sent twice and nothing is skipped, because the ids are the store's own
order (``storage/widget.py``). A page that loads afresh asks from the start and redraws the
whole conversation.
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
from bot.widget.watch import Watch
from storage.widget import WidgetEvent, WidgetStore

CHUNKED = frozenset({"answer", "person"})
_WORDS = re.compile(r"\S+\s*|\s+")
WORDS_PER_CHUNK = 4
#: Events read from the store at a time.
READ_LIMIT = 200


def chunks(text: str) -> list[str]:
    """``text`` in pieces of a few words; joined they are exactly ``text``."""
    words = _WORDS.findall(text)
    return ["".join(words[i : i + WORDS_PER_CHUNK]) for i in range(0, len(words), WORDS_PER_CHUNK)] or [""]


@dataclass(frozen=True)
class Cursor:
    seq: int = 0
    #: The last piece of event ``seq`` the reader has (``None``: all of it).
    piece: int | None = None

    @property
    def after(self) -> int:
        """The events to read are those past this ``seq`` (event ``seq`` itself if only part of it was sent)."""
        return self.seq - (1 if self.piece is not None else 0)


def parse_cursor(value: str | None) -> Cursor:
    if not value or len(value) > 32:
        return Cursor()
    head, _, tail = value.strip().partition(".")
    if not head.isdigit() or (tail and not tail.isdigit()):
        return Cursor()
    return Cursor(int(head), int(tail) if tail else None)


#: A stored kind's frame: the SSE event name and the contract's fields.
_FROM = {"user": "customer", "answer": "agent", "person": "person"}


def public(event: WidgetEvent) -> tuple[str, dict[str, Any]]:
    """The contract's frame for a stored event."""
    d = event.data
    match event.kind:
        case "user" | "answer" | "person":
            out: dict[str, Any] = {"id": _message_id(event), "from": _FROM[event.kind]}
            if event.kind == "person":
                out["name"] = str(d.get("author", ""))
            return "message", {**out, "text": str(d.get("text", ""))}
        case "confirmation":
            fields = {"id": d.get("id"), "version": d.get("version"), "summary": d.get("summary")}
            return "confirmation", {**fields, "state": d.get("status")}
        case "approval":
            return "approval", {"id": d.get("id"), "state": d.get("status")}
        case "handoff":
            return "handoff", {k: v for k, v in d.items() if k in ("state", "name") and v is not None}
        case _:
            return event.kind, dict(d)


def _message_id(event: WidgetEvent) -> str:
    """A customer's message keeps the id its page gave it; the others are named by their place."""
    client = event.data.get("id")
    return str(client) if event.kind == "user" and client else f"m{event.seq}"


def frames(event: WidgetEvent, cursor: Cursor, *, live: bool = False) -> list[tuple[str, str, dict[str, Any]]]:
    """The frames of ``event`` the reader does not have yet: (SSE id, event name, data).
    ``live``: written after the stream opened, so a message goes out in pieces first."""
    if event.seq < cursor.seq or (event.seq == cursor.seq and cursor.piece is None):
        return []
    name, data = public(event)
    out: list[tuple[str, str, dict[str, Any]]] = []
    if event.kind in CHUNKED and (live or event.seq == cursor.seq):
        pieces = chunks(data["text"])
        start = cursor.piece + 1 if event.seq == cursor.seq and cursor.piece is not None else 0
        out = [
            (f"{event.seq}.{k}", "delta", {"id": data["id"], "k": k, "n": len(pieces), "text": pieces[k]})
            for k in range(start, len(pieces))
        ]
    return [*out, (str(event.seq), name, data)]


def frame_bytes(frame_id: str, name: str, data: dict[str, Any]) -> bytes:
    return f"id: {frame_id}\nevent: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def serve(
    request: web.Request,
    session_id: str,
    store: WidgetStore,
    config: WidgetConfig,
    watch: Watch,
    *,
    cors: Mapping[str, str] | None = None,
) -> web.StreamResponse:
    """The session's stream until ``config.stream_max_s`` or the reader goes. The store is read
    when the stream opens, when ``watch`` wakes it (a write here at once, another process's within
    ``poll_s``) and after ``reread_s`` of quiet; never on a timer per stream."""
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
    with watch.listen(session_id) as ear:
        await response.prepare(request)
        await response.write(b"retry: 1000\n\n")
        replay = True  # what is already stored when the stream opens is sent at once
        quiet_since = read_by = loop.time()
        while loop.time() < ends and request.transport is not None and not request.transport.is_closing():
            if ear.woken.is_set() or loop.time() >= read_by:
                ear.woken.clear()  # before the read: a write during it wakes the stream again
                events = await store.after(session_id, cursor.after, limit=READ_LIMIT)
                for event in events:
                    for frame_id, name, data in frames(event, cursor, live=not replay):
                        await response.write(frame_bytes(frame_id, name, data))
                        if name == "delta" and config.chunk_delay_s:
                            await asyncio.sleep(config.chunk_delay_s)
                    cursor = Cursor(event.seq)
                ear.seen, replay, read_by = cursor.after, False, loop.time() + config.reread_s
                if events:
                    quiet_since = loop.time()
                    if len(events) == READ_LIMIT:  # more stored than one read takes
                        read_by = loop.time()
                        continue
            if loop.time() - quiet_since >= config.heartbeat_s:
                await response.write(b": keep-alive\n\n")
                quiet_since = loop.time()
            try:
                await asyncio.wait_for(ear.woken.wait(), timeout=config.poll_s)
            except TimeoutError:
                pass
    return response


__all__ = ["Cursor", "chunks", "frames", "parse_cursor", "public", "serve"]
