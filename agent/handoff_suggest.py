"""The agent's suggestions while a person owns a conversation.

The agent never answers the customer then; for each customer message it may draft a reply
for the owner (``handoff.suggest`` job, queued once the message is in the staff thread): the
model is asked with no tools, and the draft is stored once per customer message and shown
in the staff thread, marked as a suggestion, with a **Send** button (the face renders it,
link-free). A person's Send of it is that person's own reply: relayed only if they own the
hand-off, under their name, audited, and once per suggestion however often it is clicked.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

from agent import handoff, wording
from agent.handoff import Person, Transition
from agent.llm.base import Message, ModelRequest
from agent.services import Services
from storage.handoffs import Handoff, Suggestion
from storage.records import StoredMessage

#: Block ``action_id`` (Slack) of a suggestion's Send button: contract (INTERFACES.md).
SEND = "signoff.suggestion.send"
#: How much of the conversation the draft sees, and how long a draft may be.
_MESSAGES = 40
_TRANSCRIPT_CHARS = 12_000
_MAX_TOKENS = 500
_MAX_TEXT = 3000
_VALUE_KEYS = ("conversation", "suggestion")


def suggestion_id(h: Handoff, key: str) -> str:
    """One suggestion per hand-off and customer message, whatever retries the job."""
    return "sug_" + hashlib.sha256(f"{h.id}:{key}".encode()).hexdigest()[:24]


def encode_value(s: Suggestion) -> str:
    """What a Send button carries: ``{"conversation", "suggestion"}`` (ids only, never the text)."""
    return json.dumps({"conversation": s.conversation_id, "suggestion": s.id}, separators=(",", ":"))


def decode_value(raw: object) -> tuple[str, str]:
    """``(conversation, suggestion)`` from a Send button; :class:`handoff.BadValue` otherwise."""
    return handoff.decode_ids(raw, _VALUE_KEYS)


def _line(m: StoredMessage) -> str:
    """One message of the conversation as the draft reads it (text and tool results only)."""
    parts: list[str] = []
    for block in m.content:
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            parts.append(f"[lookup result] {str(block.get('content', ''))[:1500]}")
    who = "Customer or runtime event" if m.role == "user" else "Agent"
    return f"{who}: {' '.join(parts)}" if parts else ""


def transcript(history: list[StoredMessage]) -> str:
    """The newest part of the conversation as plain text (the draft has no tools to replay)."""
    lines = [line for m in history[-_MESSAGES:] if (line := _line(m))]
    return "\n".join(lines)[-_TRANSCRIPT_CHARS:]


async def draft(s: Services, handoff_id: str, key: str) -> tuple[Handoff, Suggestion] | None:
    """The owner's suggested reply to the customer message ``key``: asked of the model (no
    tools), stored once with its audit event (which carries the draft's tokens: it belongs to no
    run, so no ``token_usage`` row). None when nobody owns the hand-off any more or the model
    has nothing to suggest."""
    h = await s.handoffs.get(handoff_id)
    if h is None or h.state != "taken":
        return None
    sid = suggestion_id(h, key)
    if (stored := await s.handoffs.suggestion(sid)) is not None:
        return h, stored
    history = await s.conversations.history(h.conversation_id)
    request = ModelRequest(
        system=wording.HANDOFF_SUGGEST_SYSTEM.format(name=h.owner_name or "a person from the team"),
        messages=[Message(role="user", content=[{"type": "text", "text": transcript(history)}])],
        tools=[],
        max_tokens=_MAX_TOKENS,
        metadata={"conversation_id": h.conversation_id, "purpose": "handoff_suggestion"},
    )
    response = await s.model.complete(request)
    text = response.text.strip()[:_MAX_TEXT]
    if not text:
        return None
    made = Suggestion(id=sid, handoff_id=h.id, conversation_id=h.conversation_id, text=text, created_at=s.clock())
    used = {"input_tokens": response.usage.input_tokens, "output_tokens": response.usage.output_tokens}
    event = handoff.audit_event(s, "suggested", h, "system:signoff", suggestion_id=sid, model=response.model, **used)
    return h, await s.handoffs.suggest(made, audit=[event])


async def send(
    s: Services, suggestion: str, conversation_id: str, person: Person, *, shown: Callable[[str], str]
) -> Transition:
    """``person`` sends the suggestion as their own reply — ``shown(text)``, exactly what the
    face showed them — if they own its hand-off; once per suggestion, however often clicked."""
    sug = await s.handoffs.suggestion(suggestion)
    if sug is None or sug.conversation_id != conversation_id or not person.principal.is_staff:
        return Transition(handoff=None, done=False, reason="unknown")
    h = await s.handoffs.get(sug.handoff_id)
    if h is None or not h.active:
        return Transition(handoff=h, done=False, reason="ended")
    if h.state != "taken" or h.owner != person.principal.id:
        return Transition(handoff=h, done=False, reason="not_owner")
    relayed = await handoff.relay_reply(s, h, person, shown(sug.text), key=f"suggestion:{sug.id}", suggestion=sug.id)
    return Transition(handoff=h, done=relayed, reason="" if relayed else "sent")


__all__ = ["SEND", "decode_value", "draft", "encode_value", "send", "suggestion_id", "transcript"]
