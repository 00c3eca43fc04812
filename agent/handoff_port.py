"""What a face may do with hand-offs (``agent/handoff.py`` decides): find the hand-off of a
staff thread, note where its post went, and hand a person's click, note or reply to the rules.
A face reaches it as ``FacePort.handoffs``; it never sees the repositories."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from agent import handoff, handoff_suggest
from agent.handoff import Person, Transition
from agent.handoff_relay import ask_for_person
from agent.runtime import Runtime
from storage.handoffs import Handoff, Suggestion
from storage.records import Conversation


class HandoffDesk:
    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def get(self, handoff_id: str) -> Handoff | None:
        """The hand-off ``handoff_id`` (a Teams card's data names it), if any."""
        return await self._runtime.s.handoffs.get(handoff_id)

    async def in_thread(self, thread: str) -> Handoff | None:
        """The hand-off whose staff thread is ``thread`` (``slack:TEAM:CHANNEL:TS``), if any."""
        return await self._runtime.s.handoffs.in_thread(thread)

    async def posted(self, handoff_id: str, surface: str, ref: dict[str, Any], *, thread: str) -> None:
        """Its escalation post went out on ``surface`` at ``ref``: replies in ``thread`` are its."""
        await self._runtime.s.handoffs.set_surface(handoff_id, surface, ref, thread=thread)

    async def take_over(
        self, handoff_id: str, conversation_id: str, person: Person, *, clicked_at: datetime | None = None
    ) -> Transition:
        return await handoff.take_over(self._runtime.s, handoff_id, conversation_id, person, clicked_at=clicked_at)

    async def end(self, handoff_id: str, conversation_id: str, person: Person, *, close: bool) -> Transition:
        return await handoff.end(self._runtime.s, handoff_id, conversation_id, person, close=close)

    async def add_note(self, h: Handoff, person: Person, text: str) -> bool:
        return await handoff.add_note(self._runtime.s, h, person, text)

    async def relay_reply(self, h: Handoff, person: Person, text: str, *, key: str) -> bool:
        return await handoff.relay_reply(self._runtime.s, h, person, text, key=key)

    async def suggestion(self, suggestion_id: str) -> Suggestion | None:
        """The agent's suggestion ``suggestion_id`` (a Teams card's data names it), if any."""
        return await self._runtime.s.handoffs.suggestion(suggestion_id)

    async def send_suggestion(
        self, suggestion: str, conversation_id: str, person: Person, *, shown: Callable[[str], str]
    ) -> Transition:
        """``person``'s Send of a suggestion: their own reply, relayed once if they own the hand-off."""
        return await handoff_suggest.send(self._runtime.s, suggestion, conversation_id, person, shown=shown)

    async def ask_for_person(
        self, conversation: Conversation, *, by: str, tell: Callable[[str], Awaitable[None]] | None = None
    ) -> tuple[Handoff, str]:
        """The customer's "Talk to a person": the hand-off, and what the customer is told (through
        ``tell`` before any staff surface can take it over)."""
        return await ask_for_person(self._runtime, conversation, by=by, tell=tell)


__all__ = ["HandoffDesk"]
