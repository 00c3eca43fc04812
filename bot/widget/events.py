"""What a widget session's stream holds, written once per key, and who is woken when it grows.

Kinds (the browser renders each from these fields only, as text):

* ``user`` ``{text}``: the customer's own message, echoed once it is stored.
* ``answer`` ``{text}``: the agent's words (``TurnResult.answer``; the runtime's notice with its
  typed codes is not shown: the widget has buttons).
* ``confirmation`` ``{id, version, status, summary}``: from the runtime's confirmation record —
  ``summary`` is the runtime's rendering of the exact arguments, never model text. A later
  event with the same ``id`` replaces the card (answered, expired).
* ``approval`` ``{id, status}``: waiting for a teammate, then its outcome.
* ``person`` ``{text, author}``: a person's reply (the hand-off relay: :func:`append_outbound`).
* ``handoff`` ``{state, name?}``: a person's hand-off waiting, taken (by ``name``), returned, closed.
* ``notice`` ``{code}``: the face's own messages (verified, limit reached…), worded by the widget.

The stream sends each as the contract's frame (``bot/widget/stream.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from agent.face_port import FacePort
from agent.outcomes import TurnResult
from storage.records import Approval, Confirmation, Conversation
from storage.widget import WidgetSession, WidgetStore


class Hub:
    """Wakes this process's open streams of a session when an event is written here (another
    process's writes are found by the face's one poller, which wakes them here: ``watch.py``)."""

    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Event]] = {}

    def wake(self, session_id: str) -> None:
        for event in self._waiting.get(session_id, ()):
            event.set()

    @contextlib.contextmanager
    def listen(self, session_id: str) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        self._waiting.setdefault(session_id, set()).add(event)
        try:
            yield event
        finally:
            waiting = self._waiting.get(session_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiting[session_id]


#: The process's hub (streams and writers of one process share it).
HUB = Hub()


def store_of(port: FacePort) -> WidgetStore:
    return WidgetStore(port.database, clock=port.clock)


async def emit(store: WidgetStore, session_id: str, *, key: str, kind: str, data: dict[str, Any]) -> bool:
    """Write one event once; True when this call wrote it."""
    written = await store.append(session_id, key=key, kind=kind, data=data)
    HUB.wake(session_id)
    return written is not None


def confirmation_card(conf: Confirmation) -> dict[str, Any]:
    return {"id": conf.id, "version": conf.version, "status": conf.status, "summary": conf.summary}


def approval_card(approval: Approval) -> dict[str, Any]:
    return {"id": approval.id, "status": approval.status}


async def show_confirmation(store: WidgetStore, session_id: str, conf: Confirmation) -> None:
    key = f"widget:conf:{session_id}:{conf.id}:{conf.version}:{conf.status}"
    await emit(store, session_id, key=key, kind="confirmation", data=confirmation_card(conf))


async def show_approval(store: WidgetStore, session_id: str, approval: Approval) -> None:
    key = f"widget:appr:{session_id}:{approval.id}:{approval.status}"
    await emit(store, session_id, key=key, kind="approval", data=approval_card(approval))


async def deliver(port: FacePort, session: WidgetSession, result: TurnResult) -> None:
    """One turn's answer into the session's stream (once per answer, however often called)."""
    store = store_of(port)
    text = result.answer or ("" if result.pending else result.reply)
    if text:
        key = f"widget:answer:{session.id}:{result.delivery_key}"
        await emit(store, session.id, key=key, kind="answer", data={"text": text})
    for pending in result.pending:
        if pending.kind == "confirmation":
            conf = await port.confirmation(pending.id)
            if conf is not None:
                await show_confirmation(store, session.id, conf)
        else:
            approval = await port.approval(pending.id)
            if approval is not None:
                await show_approval(store, session.id, approval)
    if session.conversation_id != result.conversation_id:
        await store.set_conversation(session.id, result.conversation_id)
    # The cards carry what the runtime's notice would have said: they count as shown.
    await port.mark_shown(result.shown_confirmations)


async def refresh_approvals(port: FacePort, session: WidgetSession) -> None:
    """Every approval this session was told about, at its current status (decided, expired)."""
    store = store_of(port)
    latest: dict[str, str] = {}
    for event in await store.after(session.id, 0, limit=10_000):
        if event.kind == "approval":
            latest[str(event.data.get("id"))] = str(event.data.get("status"))
    for approval_id, status in latest.items():
        approval = await port.approval(approval_id)
        if approval is not None and approval.status != status:
            await show_approval(store, session.id, approval)


async def append_outbound(port: FacePort, conversation_id: str, *, text: str, author: str, key: str) -> int:
    """A person's reply to a widget customer: appended once per ``key`` to the stream of every
    session whose conversation this is, shown with ``author`` (their display name). Returns the
    number of sessions that hold it (0: no widget session has this conversation)."""
    store = store_of(port)
    sessions = await store.for_conversation(conversation_id)
    for session in sessions:
        await emit(
            store,
            session.id,
            key=f"widget:person:{session.id}:{key}",
            kind="person",
            data={"text": text, "author": author},
        )
    return len(sessions)


async def bind_started(port: FacePort, conversation: Conversation) -> None:
    """The session that started ``conversation`` (its ``external_ref`` names it) holds it, even
    when news of it (a hand-off's state, a person's reply) comes before the turn's answer, which
    is when the session is otherwise bound."""
    prefix, _, rest = (conversation.external_ref or "").partition(":")
    session_id = rest.partition(":")[0]
    if prefix != "widget" or not session_id:
        return
    store = store_of(port)
    session = await store.get(session_id)
    if session is not None and session.conversation_id is None:
        await store.set_conversation(session.id, conversation.id)


async def announce_handoff(port: FacePort, conversation_id: str, *, state: str, name: str | None, key: str) -> int:
    """The hand-off's new state in the stream of every session of the conversation, once per ``key``."""
    store = store_of(port)
    sessions = await store.for_conversation(conversation_id)
    data = {"state": state, "name": name} if name else {"state": state}
    for session in sessions:
        await emit(store, session.id, key=f"widget:handoff:{session.id}:{key}", kind="handoff", data=data)
    return len(sessions)


async def notice(port: FacePort, session_id: str, code: str, key: str) -> None:
    await emit(store_of(port), session_id, key=f"widget:notice:{session_id}:{key}", kind="notice", data={"code": code})


__all__ = [
    "HUB",
    "Hub",
    "announce_handoff",
    "bind_started",
    "append_outbound",
    "deliver",
    "emit",
    "notice",
    "refresh_approvals",
    "show_approval",
    "show_confirmation",
    "store_of",
]
