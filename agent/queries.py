"""Read-only queries the faces (HTTP API, email bridge) and the demo need beyond the runtime's verbs.

Nothing here writes or decides. Every lookup that a principal drives is scoped
the same way the runtime scopes it: a conversation the viewer may not see is
reported exactly like a missing one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.handoff import person_reply
from agent.history import EVENT_CLOSE, EVENT_OPEN
from agent.runtime import Runtime
from storage.audit import AuditRecord
from storage.records import Approval, Confirmation, Conversation, Proposal, StoredMessage
from tools.context import Principal

#: ``person``: a person's reply to the customer while they owned the conversation (a hand-off).
Role = Literal["user", "assistant", "event", "person"]

#: Tool-result statuses a person should see instead of a bare "ok".
#: How one tool call ended, as a person reads it.
CallOutcome = Literal[
    "ok", "error", "confirmation_required", "pending_approval", "repeated", "recorded_not_executed", "unanswered"
]

_STATUSES: dict[str, CallOutcome] = {
    "CONFIRMATION_REQUIRED": "confirmation_required",
    "PENDING_APPROVAL": "pending_approval",
    "RECORDED_NOT_EXECUTED": "recorded_not_executed",
}


@dataclass(frozen=True, kw_only=True)
class ToolSummary:
    """One tool call as a person sees it: its name and how it ended."""

    name: str
    outcome: CallOutcome


@dataclass(frozen=True, kw_only=True)
class RenderedMessage:
    """A turn rendered for people: text, plus the tool calls an assistant turn made."""

    seq: int
    role: Role
    text: str
    tools: tuple[ToolSummary, ...] = ()
    #: Who wrote a ``person`` message (their display name).
    name: str | None = None


@dataclass(frozen=True, kw_only=True)
class ConversationView:
    conversation: Conversation
    messages: tuple[RenderedMessage, ...]
    history: tuple[StoredMessage, ...]
    pending_confirmations: tuple[Confirmation, ...]
    pending_approvals: tuple[Approval, ...]


async def database_ok(rt: Runtime) -> bool:
    """A trivial read through a repository: does the database answer at all?"""
    try:
        await rt.s.conversations.get("healthz")
    except Exception:
        return False
    return True


async def visible_conversation(rt: Runtime, viewer: Principal, conversation_id: str) -> Conversation | None:
    """The conversation if ``viewer`` may see it (its principal, or staff); else ``None``."""
    conv = await rt.s.conversations.get(conversation_id)
    if conv is None or not rt.may_see(viewer, conv):
        return None
    return conv


async def conversation_view(rt: Runtime, viewer: Principal, conversation_id: str) -> ConversationView | None:
    """The conversation with its history rendered for people, or ``None`` if not visible."""
    conv = await visible_conversation(rt, viewer, conversation_id)
    if conv is None:
        return None
    history = await rt.s.conversations.history(conv.id)
    confirmations = await rt.s.confirmations.pending(conv.id)
    approvals = (
        [a for a in await rt.s.approvals.pending_for_customer(conv.customer_id or "") if a.conversation_id == conv.id]
        if conv.customer_id
        else []
    )
    return ConversationView(
        conversation=conv,
        messages=tuple(render_history(history)),
        history=tuple(history),
        pending_confirmations=tuple(confirmations),
        pending_approvals=tuple(approvals),
    )


async def pending_confirmations(rt: Runtime, conversation_id: str, principal_key: str) -> list[Confirmation]:
    """The confirmations in a conversation still waiting for this principal's answer."""
    return [c for c in await rt.s.confirmations.pending(conversation_id) if c.principal == principal_key]


async def get_confirmation(rt: Runtime, confirmation_id: str) -> Confirmation | None:
    return await rt.s.confirmations.get(confirmation_id)


async def get_approval(rt: Runtime, approval_id: str) -> Approval | None:
    return await rt.s.approvals.get(approval_id)


async def list_approvals(rt: Runtime, *, status: str | None, limit: int) -> list[Approval]:
    return await rt.s.approvals.list_approvals(status=status, limit=limit)


@dataclass(frozen=True, kw_only=True)
class RunTrace:
    """A conversation as its runs stored it (``signoff demo`` prints it iteration by iteration):
    every message, and the gate's proposals of its runs by tool_use id."""

    history: tuple[StoredMessage, ...]
    proposals: dict[str, Proposal]


async def run_trace(rt: Runtime, conversation_id: str) -> RunTrace:
    history = await rt.s.conversations.history(conversation_id)
    proposals: dict[str, Proposal] = {}
    for run in sorted({m.run_id for m in history if m.run_id}):
        proposals |= {p.tool_use_id: p for p in await rt.s.conversations.proposals(run)}
    return RunTrace(history=tuple(history), proposals=proposals)


async def executions(rt: Runtime, conversation_id: str) -> list[AuditRecord]:
    """The actions executed in a conversation's runs (``execution.succeeded`` events)."""
    runs = {m.run_id for m in await rt.s.conversations.history(conversation_id) if m.run_id}
    events = await rt.s.audit.list(kind="execution.succeeded", limit=1000)
    return [e for e in events if e.run_id in runs]


# -- rendering -------------------------------------------------------------------------


@dataclass
class _Call:
    """A tool call being rendered; its outcome is filled in when its result is read."""

    id: str
    name: str
    outcome: CallOutcome = "unanswered"


@dataclass
class _Draft:
    seq: int
    role: Role
    text: str
    tools: list[_Call] = field(default_factory=list)
    name: str | None = None

    def freeze(self) -> RenderedMessage:
        return RenderedMessage(
            seq=self.seq,
            role=self.role,
            text=self.text,
            name=self.name,
            tools=tuple(ToolSummary(name=c.name, outcome=c.outcome) for c in self.tools),
        )


def render_history(history: list[StoredMessage]) -> list[RenderedMessage]:
    """User and assistant text in order; runtime events apart; tool results folded into their calls."""
    drafts: list[_Draft] = []
    calls: dict[str, _Call] = {}
    for m in history:
        texts: list[str] = []
        for block in m.content:
            kind = block.get("type")
            if kind == "text":
                text = str(block.get("text", ""))
                if m.role == "user" and text.startswith(EVENT_OPEN):
                    drafts.append(_event_draft(m.seq, _strip_event(text)))
                else:
                    texts.append(text)
            elif kind == "tool_use" and m.role == "assistant":
                call = _Call(id=str(block.get("id", "")), name=str(block.get("name", "")))
                calls[call.id] = call
                if not drafts or drafts[-1].seq != m.seq or drafts[-1].role != "assistant":
                    drafts.append(_Draft(seq=m.seq, role="assistant", text=""))
                drafts[-1].tools.append(call)
            elif kind == "tool_result":
                answered = calls.get(str(block.get("tool_use_id", "")))
                if answered is not None:
                    answered.outcome = _outcome(block)
        if texts:
            text = "\n".join(t for t in texts if t)
            if m.role == "assistant" and drafts and drafts[-1].seq == m.seq and drafts[-1].role == "assistant":
                drafts[-1].text = text
            else:
                drafts.append(_Draft(seq=m.seq, role=m.role, text=text))
    return [d.freeze() for d in drafts]


def _event_draft(seq: int, text: str) -> _Draft:
    """A runtime event; a person's relayed reply shows as theirs, with their name."""
    said = person_reply(text)
    if said is None:
        return _Draft(seq=seq, role="event", text=text)
    return _Draft(seq=seq, role="person", text=said[1], name=said[0])


def _strip_event(text: str) -> str:
    return text.removeprefix(EVENT_OPEN).removesuffix(EVENT_CLOSE)


def _outcome(block: dict[str, Any]) -> CallOutcome:
    if block.get("is_error"):
        return "error"
    try:
        body = json.loads(block.get("content") or "null")
    except (TypeError, ValueError):
        return "ok"
    if isinstance(body, dict):
        if body.get("intercepted"):
            return "repeated"
        return _STATUSES.get(str(body.get("status")), "ok")
    return "ok"


__all__ = [
    "ConversationView",
    "RenderedMessage",
    "ToolSummary",
    "conversation_view",
    "database_ok",
    "get_approval",
    "get_confirmation",
    "list_approvals",
    "pending_confirmations",
    "render_history",
    "visible_conversation",
]
