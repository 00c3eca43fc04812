"""A person takes over a conversation: the hand-off's states and rules.

``waiting`` (opened by ``escalate_to_human`` or the customer's "Talk to a person") →
``taken`` (a person owns it; the agent stores the customer's messages and says nothing) →
``returned`` (handed back to the agent with the person's notes) or ``closed`` (resolved).
Every transition is a compare-and-set with its audit event (who, when) and the durable jobs
it asks for in one transaction (``storage/handoffs.py``); the relay itself — the owner's
replies to the customer, the customer's messages into the staff thread, the SLA re-page —
runs as jobs (``agent/handoff_relay.py``), each once per key.

Faces only parse and render: they call these functions with the person who clicked or
wrote, and nothing here trusts a face's word about state.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from agent import wording
from agent.history import event_block, new_id, sanitize_user_text
from agent.outcomes import TurnResult
from agent.services import Services
from storage.audit import AuditEvent, sha256_hex
from storage.handoffs import Handoff, HandoffState, JobSpec, Move
from storage.records import Conversation
from storage.steps import NewJob, StepWrite
from tools.context import Principal

#: Block ``action_id``s (Slack) and ``Action.Execute`` verbs (Teams): contract (INTERFACES.md).
TAKEOVER = "signoff.takeover"
HANDBACK = "signoff.handback"
CLOSE = "signoff.close"
ACTIONS = frozenset({TAKEOVER, HANDBACK, CLOSE})

#: Job kinds: an owner's reply to the customer, a customer's message into the staff thread,
#: the SLA check of an unclaimed hand-off, a runtime event for the agent (hand back, close).
RELAY_JOB = "handoff.relay"
MIRROR_JOB = "handoff.mirror"
SLA_JOB = "handoff.sla"
EVENT_JOB = "handoff.event"
#: A state change the customer's face may show (the widget's ``handoff`` event).
STATE_JOB = "handoff.state"
#: The agent's suggested reply for the owner, to a customer's message (``agent/handoff_suggest.py``).
SUGGEST_JOB = "handoff.suggest"
JOB_KINDS = (RELAY_JOB, MIRROR_JOB, SLA_JOB, EVENT_JOB, STATE_JOB, SUGGEST_JOB)
#: How many times an unclaimed hand-off re-pages on-call (one SLA apart).
MAX_PAGES = 3
#: Thread messages a person starts with this are notes for the agent, never relayed.
NOTE_PREFIX = "note:"
_MAX_VALUE = 300
_PERSON_REPLY = re.compile(
    "^" + re.escape(wording.HANDOFF_REPLY_EVENT).replace(r"\{name\}", "(.{1,200}?)").replace(r"\{text\}", "(.*)") + "$",
    re.DOTALL,
)
_MAX_TEXT = 4000


class BadValue(ValueError):
    """A button value that is not exactly what we put there."""


def encode_value(conversation_id: str, handoff_id: str) -> str:
    """What a hand-off button carries: ``{"conversation", "handoff"}`` (ids only)."""
    return json.dumps({"conversation": conversation_id, "handoff": handoff_id}, separators=(",", ":"))


def decode_value(raw: object) -> tuple[str, str]:
    """``(conversation, handoff)`` from a button value; :class:`BadValue` for anything else."""
    return decode_ids(raw, ("conversation", "handoff"))


def decode_ids(raw: object, keys: tuple[str, str]) -> tuple[str, str]:
    """The two short ids under ``keys`` of a button value that has exactly those keys."""
    if not isinstance(raw, str) or len(raw) > _MAX_VALUE:
        raise BadValue("not a short string")
    try:
        data = json.loads(raw)
    except ValueError:
        raise BadValue("not JSON") from None
    if not isinstance(data, dict) or set(data) != set(keys):
        raise BadValue("unexpected keys")
    first, second = data[keys[0]], data[keys[1]]
    if not (isinstance(first, str) and isinstance(second, str) and 0 < len(first) <= 64 and 0 < len(second) <= 64):
        raise BadValue("bad ids")
    return first, second


def person_reply(event_text: str) -> tuple[str, str] | None:
    """``(name, text)`` of a runtime event that records a person's reply to the customer."""
    m = _PERSON_REPLY.match(event_text)
    return (m.group(1), m.group(2)) if m else None


@dataclass(frozen=True, kw_only=True)
class Person:
    """A staff member acting on a hand-off, and the name the customer sees."""

    principal: Principal
    name: str


@dataclass(frozen=True, kw_only=True)
class Transition:
    """What a click led to: the hand-off as it now is, whether this click moved it, and why not."""

    handoff: Handoff | None
    done: bool
    reason: str = ""


def audit_event(s: Services, kind: str, h: Handoff, who: str, **data: Any) -> AuditEvent:
    """``handoff.<kind>`` by ``who`` (a principal key), now, naming the hand-off and its conversation."""
    return AuditEvent(
        kind=f"handoff.{kind}",
        principal=who,
        ts=s.clock(),
        data={"handoff_id": h.id, "conversation_id": h.conversation_id, **data},
    )


def expectation(s: Services, at: datetime) -> str:
    """When a person will reply, told honestly from the policy's support hours and the SLA."""
    hours = s.policy.support_hours
    opening = hours.next_opening(at)
    return wording.handoff_expectation(
        open_now=hours.is_open(at),
        minutes=round(s.handoff_sla_s / 60),
        when=opening.strftime("%A %H:%M") + f" ({hours.timezone})",
    )


def state_job(h: Handoff, state: HandoffState, name: str | None) -> JobSpec:
    """Tell the customer's face that the hand-off is now ``state`` (once per transition)."""
    return JobSpec(
        kind=STATE_JOB,
        payload={"conversation_id": h.conversation_id, "state": state, "name": name},
        dedup_key=f"handoff:{h.id}:state:{state}:{h.version}",
    )


def sla_job(s: Services, handoff_id: str, page: int) -> JobSpec:
    """The SLA check ``page`` of ``handoff_id``: one SLA after the team is next on."""
    opening = s.policy.support_hours.next_opening(s.clock())
    return JobSpec(
        kind=SLA_JOB,
        payload={"handoff_id": handoff_id, "page": page},
        dedup_key=f"handoff:{handoff_id}:sla:{page}",
        run_after=opening + timedelta(seconds=s.handoff_sla_s),
    )


async def open_handoff(s: Services, conv: Conversation, *, reason: str, opened_by: str) -> tuple[Handoff, bool]:
    """The conversation's active hand-off, opened now (audited, its SLA check queued) if it has none."""
    handoff_id = new_id("hof")
    probe = Handoff(
        id=handoff_id, conversation_id=conv.id, state="waiting", reason=reason, opened_by=opened_by, owner=None,
        owner_name=None, notes=None, thread=None, surfaces={}, version=1, opened_at=s.clock(), taken_at=None,
        ended_at=None,
    )  # fmt: skip
    event = audit_event(s, "opened", probe, opened_by, reason=reason[:64])
    return await s.handoffs.open(
        id=handoff_id,
        conversation_id=conv.id,
        reason=reason,
        opened_by=opened_by,
        audit=[event],
        jobs=[sla_job(s, handoff_id, 1), state_job(probe, "waiting", None)],
    )


async def take_over(
    s: Services, handoff_id: str, conversation_id: str, person: Person, *, clicked_at: datetime | None = None
) -> Transition:
    """``person`` owns the conversation. Two people clicking at once get one owner: a click made
    before the current owner took it (``clicked_at``) never moves it; a later one takes it over."""
    h = await s.handoffs.get(handoff_id)
    if h is None or h.conversation_id != conversation_id or not person.principal.is_staff:
        return Transition(handoff=None, done=False, reason="unknown")
    if h.state == "taken" and h.owner == person.principal.id:
        return Transition(handoff=h, done=False, reason="yours")
    if h.state == "taken" and clicked_at is not None and h.taken_at is not None and clicked_at <= h.taken_at:
        return Transition(handoff=h, done=False, reason="taken")
    if not h.active:
        return Transition(handoff=h, done=False, reason="ended")
    now = s.clock()
    values = {"owner": person.principal.id, "owner_name": person.name[:200], "taken_at": now}
    waited = max((now - h.opened_at).total_seconds(), 0.0)
    event = audit_event(
        s, "taken", h, person.principal.key, owner=person.principal.id, previous_owner=h.owner, waited_s=waited
    )
    move = Move(to="taken", from_states=("waiting", "taken"), version=h.version, values=values)
    moved = await s.handoffs.move(h.id, move, audit=[event], jobs=[state_job(h, "taken", person.name)])
    if moved is None:
        return Transition(handoff=await s.handoffs.get(h.id), done=False, reason="taken")
    return Transition(handoff=moved, done=True)


def _may_end(h: Handoff, person: Person) -> bool:
    """The owner ends a taken hand-off (a supervisor too); anyone on staff ends a waiting one."""
    if not person.principal.is_staff:
        return False
    return h.state == "waiting" or h.owner == person.principal.id or person.principal.kind == "supervisor"


async def end(s: Services, handoff_id: str, conversation_id: str, person: Person, *, close: bool) -> Transition:
    """Hand back (``close`` false: the agent answers again, with the person's notes in its
    context) or Close (resolved). The agent learns it through a keyed runtime event (a job)."""
    h = await s.handoffs.get(handoff_id)
    if h is None or h.conversation_id != conversation_id:
        return Transition(handoff=None, done=False, reason="unknown")
    if not h.active:
        return Transition(handoff=h, done=False, reason="ended")
    if not _may_end(h, person):
        return Transition(handoff=h, done=False, reason="not_yours")
    to: HandoffState = "closed" if close else "returned"
    text = (
        wording.HANDOFF_CLOSED_EVENT.format(name=person.name)
        if close
        else wording.HANDOFF_RETURNED_EVENT.format(name=person.name, notes=h.notes or wording.HANDOFF_NO_NOTES)
    )
    job = JobSpec(
        kind=EVENT_JOB,
        payload={"conversation_id": h.conversation_id, "text": text, "resolved": close},
        dedup_key=f"handoff:{h.id}:{to}",
    )
    event = audit_event(s, to, h, person.principal.key, owner=h.owner)
    move = Move(to=to, from_states=("waiting", "taken"), version=h.version, values={"ended_at": s.clock()})
    moved = await s.handoffs.move(h.id, move, audit=[event], jobs=[job, state_job(h, to, person.name)])
    if moved is None:
        return Transition(handoff=await s.handoffs.get(h.id), done=False, reason="moved")
    return Transition(handoff=moved, done=True)


async def add_note(s: Services, h: Handoff, person: Person, text: str) -> bool:
    """A note for the agent from the owner (given to it at Hand back); the same note twice is kept once."""
    note = " ".join(text.split())[:1000]
    if h.state != "taken" or h.owner != person.principal.id or not note:
        return False
    lines = (h.notes or "").splitlines()
    if note in lines:
        return True
    notes = "\n".join([*lines, note])[-_MAX_TEXT:]
    move = Move(to="taken", from_states=("taken",), version=h.version, values={"notes": notes})
    return await s.handoffs.move(h.id, move, audit=[audit_event(s, "noted", h, person.principal.key)]) is not None


async def relay_reply(
    s: Services, h: Handoff, person: Person, text: str, *, key: str, suggestion: str | None = None
) -> bool:
    """The owner's reply, queued once (``key``: the staff message's identity, or the suggestion
    they sent) for the customer's channel under the person's name. Anyone else's reply stays
    in the thread (False)."""
    if h.state != "taken" or h.owner != person.principal.id or not text.strip():
        return False
    job = JobSpec(
        kind=RELAY_JOB,
        payload={
            "handoff_id": h.id,
            "conversation_id": h.conversation_id,
            "text": text[:_MAX_TEXT],
            "name": person.name,
            "key": key,
        },
        dedup_key=f"handoff:out:{key}"[:200],
    )
    extra = {"suggestion_id": suggestion} if suggestion else {}
    event = audit_event(s, "relayed", h, person.principal.key, text_sha256=sha256_hex(text)[:16], **extra)
    return await s.handoffs.enqueue_once(job, audit=[event])


async def hold_message(
    s: Services, conv: Conversation, h: Handoff, message: str, *, message_key: str | None
) -> TurnResult:
    """A customer's message while a person owns the conversation: stored in the history (once
    per ``message_key``) with the job that posts it into the staff thread (and then has a reply
    suggested to the owner there); the agent says nothing to the customer."""
    key = message_key or new_id("msg")
    step = StepWrite(
        conversation_id=conv.id,
        messages=[("user", [{"type": "text", "text": sanitize_user_text(message)}])],
        event_key=message_key,
        jobs=[
            NewJob(
                kind=MIRROR_JOB,
                payload={"handoff_id": h.id, "text": message[:_MAX_TEXT], "key": key},
                dedup_key=f"handoff:in:{conv.id}:{key}"[:200],
                run_after=s.clock(),
            )
        ],
    )
    seq = await s.conversations.commit(step)
    return TurnResult(
        conversation_id=conv.id,
        run_id="",
        reply="",
        iterations=0,
        input_tokens=0,
        output_tokens=0,
        pending=(),
        outcome="held",
        seq=seq - 1 if seq is not None else None,
    )


async def held(s: Services, conv: Conversation) -> Handoff | None:
    """The hand-off of a person who owns ``conv`` right now, if any."""
    h = await s.handoffs.active_for(conv.id)
    return h if h is not None and h.owned else None


async def record_event(s: Services, conversation_id: str, text: str, *, key: str, resolved: bool = False) -> bool:
    """A runtime event the agent reads (a person's reply, a hand back), appended once per ``key``."""
    step = StepWrite(
        conversation_id=conversation_id,
        messages=[("user", [event_block(text)])],
        event_key=key[:160],
        conversation_status="resolved" if resolved else None,
    )
    return await s.conversations.commit(step) is not None


__all__ = [
    "ACTIONS",
    "CLOSE",
    "EVENT_JOB",
    "HANDBACK",
    "JOB_KINDS",
    "MIRROR_JOB",
    "NOTE_PREFIX",
    "RELAY_JOB",
    "SLA_JOB",
    "STATE_JOB",
    "SUGGEST_JOB",
    "TAKEOVER",
    "BadValue",
    "Person",
    "Transition",
    "add_note",
    "audit_event",
    "decode_ids",
    "decode_value",
    "encode_value",
    "end",
    "expectation",
    "held",
    "hold_message",
    "open_handoff",
    "person_reply",
    "record_event",
    "relay_reply",
    "sla_job",
    "state_job",
    "take_over",
]
