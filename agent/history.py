"""The history's building blocks: runtime events, tool results, user text, ids.

History is the exact Anthropic content-block list. The runtime speaks into it
only through ``<signoff_event>`` text blocks, which users cannot forge.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, cast

from agent.llm.base import Block, Message, TextBlock, ToolResultBlock
from storage.records import StoredMessage

EVENT_OPEN, EVENT_CLOSE = "<signoff_event>", "</signoff_event>"


def new_id(prefix: str) -> str:
    """A fresh runtime id (``conv_…``, ``prop_…``): short, prefixed, readable in logs and Slack."""
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


#: The event tag in any case or spacing a model might still read as ours (``< SIGNOFF_Event``).
#: Possessive (``*+``): "<" and a long run of spaces must not be split every way between the two runs
#: (that made a 20,000-character message take seconds).
_FORGED_TAG = re.compile(r"<\s*+(/?)\s*+signoff[\s_-]*+event", re.IGNORECASE)


def sanitize_user_text(text: str) -> str:
    """Users cannot forge runtime events: neutralise the tag, in any case or spacing, in anything they write."""
    return _FORGED_TAG.sub(lambda m: f"<{m.group(1)}signoff-event-quoted", text)


def event_block(text: str) -> TextBlock:
    """A runtime event as the model reads it."""
    return {"type": "text", "text": f"{EVENT_OPEN}{text}{EVENT_CLOSE}"}


def tool_result(tool_use_id: str, result: Any, is_error: bool) -> ToolResultBlock:
    """The ``tool_result`` block answering ``tool_use_id`` (JSON text; ``is_error`` when refused or failed)."""
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    block: ToolResultBlock = {"type": "tool_result", "tool_use_id": tool_use_id, "content": text}
    if is_error:
        block["is_error"] = True
    return block


def merged(history: list[StoredMessage]) -> list[Message]:
    """Consecutive same-role messages become one (as the API itself would merge them)."""
    out: list[Message] = []
    for m in history:
        if out and out[-1].role == m.role:
            content = [*out[-1].content, *blocks_of(m)]
            if m.role == "user":  # a repaired tool_result may follow newer user text; results go first
                content.sort(key=lambda b: b.get("type") != "tool_result")
            out[-1] = Message(role=m.role, content=content)
        else:
            out.append(Message(role=m.role, content=blocks_of(m)))
    return out


def blocks_of(m: StoredMessage) -> list[Block]:
    """A stored message's content: blocks this runtime wrote (or a model adapter returned)."""
    return cast(list[Block], list(m.content))


__all__ = ["EVENT_CLOSE", "EVENT_OPEN", "event_block", "merged", "new_id", "sanitize_user_text", "tool_result"]
