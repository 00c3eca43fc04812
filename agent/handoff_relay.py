"""The hand-off's relay: where a person's words go, and the jobs that carry them.

:class:`Relay` is a small registry the composition root fills, one line per face:

* ``deliver_on(channel, deliver)``: how a message reaches a customer on their own channel
  (``deliver(conversation, text, author_display_name, key)``; it must send at most once per
  ``key``, through :class:`~storage.inbox.Deliveries` or the face's own once-only path);
* ``post_on(surface, post)``: how a staff surface (the Slack escalation thread, the Teams
  reply chain) shows the customer's messages and the SLA re-page (``post(handoff, text, key)``,
  once per key);
* ``suggest_on(surface, post)``: how a staff surface shows the agent's suggested reply with
  its Send button (``post(handoff, suggestion)``, once per suggestion); a hand-off none of
  whose surfaces shows suggestions gets none drafted.

The jobs (``agent.handoff.JOB_KINDS``) are durable: the worker retries one that fails, a
crash leaves it to be claimed again, and each delivery is keyed, so a message relayed twice
by a retry goes out once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from agent import handoff, handoff_suggest, wording
from agent.host import Host
from agent.notify import EscalationNotice, best_effort
from storage.handoffs import Handoff, JobSpec, Suggestion
from storage.jobs import Job
from storage.records import Conversation

log = logging.getLogger(__name__)

#: ``deliver(conversation, text, author_display_name, key)``: to the customer, once per key.
Deliver = Callable[[Conversation, str, str, str], Awaitable[None]]
#: What a staff surface is asked to show in the hand-off's thread.
PostKind = Literal["customer", "repage"]
#: ``post(handoff, kind, text, key)``: into the staff thread, once per key.
ThreadPost = Callable[[Handoff, PostKind, str, str], Awaitable[None]]
#: ``announce(conversation, state, person_name, key)``: a face shows the hand-off's state, once per key.
Announce = Callable[[Conversation, str, str | None, str], Awaitable[None]]
#: ``post(handoff, suggestion)``: the agent's suggested reply, marked as one, with Send; once per suggestion.
SuggestionPost = Callable[[Handoff, Suggestion], Awaitable[None]]
#: The author of the shop's own notices to a waiting customer.
SHOP = "signoff"


async def in_history(conversation: Conversation, text: str, name: str, key: str) -> None:
    """The HTTP API's delivery: the message is already in the conversation's messages (the
    relay job wrote it there first), which is where an API client reads it."""
    return None


@dataclass
class Relay:
    """The per-channel deliveries to customers and the staff surfaces of hand-offs."""

    customers: dict[str, Deliver] = field(default_factory=lambda: {"api": in_history})
    staff: dict[str, ThreadPost] = field(default_factory=dict)
    states: dict[str, Announce] = field(default_factory=dict)
    suggestions: dict[str, SuggestionPost] = field(default_factory=dict)

    def deliver_on(self, channel: str, deliver: Deliver) -> None:
        """Customers of ``channel`` get relayed messages through ``deliver``."""
        self.customers[channel] = deliver

    def announce_on(self, channel: str, announce: Announce) -> None:
        """Customers of ``channel`` see the hand-off's state changes (the widget's ``handoff`` event)."""
        self.states[channel] = announce

    def post_on(self, surface: str, post: ThreadPost) -> None:
        """Hand-offs shown on ``surface`` (a key of ``Handoff.surfaces``) get their thread posts through ``post``."""
        self.staff[surface] = post

    def suggest_on(self, surface: str, post: SuggestionPost) -> None:
        """Hand-offs shown on ``surface`` get the agent's suggested replies there through ``post``."""
        self.suggestions[surface] = post

    def shows_suggestions(self, h: Handoff) -> bool:
        """Whether any staff surface of ``h`` shows suggestions (else none is drafted)."""
        return any(surface in self.suggestions for surface in h.surfaces)

    async def suggest(self, h: Handoff, suggestion: Suggestion) -> None:
        for surface in h.surfaces:
            post = self.suggestions.get(surface)
            if post is not None:
                await post(h, suggestion)

    async def to_customer(self, conversation: Conversation, text: str, name: str, key: str) -> None:
        deliver = self.customers.get(conversation.channel)
        if deliver is None:
            log.warning("hand-off message in %s not delivered: no %s face", conversation.id, conversation.channel)
            return
        await deliver(conversation, text, name, key)

    async def to_staff(self, h: Handoff, kind: PostKind, text: str, key: str) -> None:
        for surface in h.surfaces:
            post = self.staff.get(surface)
            if post is not None:
                await post(h, kind, text, f"{key}:{surface}")


async def run_job(rt: Host, relay: Relay, job: Job) -> None:
    """One hand-off job (the worker's handler for each of ``handoff.JOB_KINDS``)."""
    p = job.payload
    match job.kind:
        case handoff.RELAY_JOB:
            await _relay(rt, relay, p["conversation_id"], str(p["text"]), str(p["name"]), str(p["key"]))
        case handoff.MIRROR_JOB:
            await _mirror(rt, relay, str(p["handoff_id"]), str(p["text"]), str(p["key"]))
        case handoff.SLA_JOB:
            await _sla(rt, relay, str(p["handoff_id"]), int(p["page"]))
        case handoff.STATE_JOB:
            conv = await rt.s.conversations.get(str(p["conversation_id"]))
            announce = relay.states.get(conv.channel) if conv is not None else None
            if conv is not None and announce is not None:
                await announce(conv, str(p["state"]), p.get("name"), job.dedup_key or str(job.id))
        case handoff.SUGGEST_JOB:
            await _suggest(rt, relay, str(p["handoff_id"]), str(p["key"]))
        case handoff.EVENT_JOB:
            async with rt.lock(str(p["conversation_id"])):
                await handoff.record_event(
                    rt.s,
                    str(p["conversation_id"]),
                    str(p["text"]),
                    key=job.dedup_key or "",
                    resolved=bool(p["resolved"]),
                )
        case _:
            raise ValueError(f"not a hand-off job: {job.kind}")


async def ask_for_person(
    rt: Host, conversation: Conversation, *, by: str, tell: Callable[[str], Awaitable[None]] | None = None
) -> tuple[Handoff, str]:
    """The customer's "Talk to a person": the hand-off (opened now unless one is active), its
    post with Take over on every staff surface, and what the customer is told — honestly, from
    the support hours — which the agent also reads. ``tell`` gives the customer that answer
    before the post goes out, so a person who takes over at once is never followed by it."""
    s = rt.s
    h, opened = await handoff.open_handoff(s, conversation, reason="customer_request", opened_by=by)
    told = handoff.expectation(s, s.clock())
    if tell is not None:
        await tell(told)
    if opened:
        notice = EscalationNotice(
            conversation=conversation,
            reason="customer_request",
            summary="The customer asked to talk to a person.",
            trace=(),
            handoff_id=h.id,
        )
        await best_effort(s.notifier.escalated(notice), "escalation")
    async with rt.lock(conversation.id):
        event = f"The customer asked to talk to a person and was told: {told}"
        await handoff.record_event(s, conversation.id, event, key=f"handoff:{h.id}:asked")
    return h, told


async def _relay(rt: Host, relay: Relay, conversation_id: str, text: str, name: str, key: str) -> None:
    """The person's reply: into the history first (the agent's context; the API's messages),
    then to the customer's channel — each once, whatever retries or crashes come between."""
    conv = await rt.s.conversations.get(conversation_id)
    if conv is None:
        return
    async with rt.lock(conv.id):
        event = wording.HANDOFF_REPLY_EVENT.format(name=name, text=text)
        await handoff.record_event(rt.s, conv.id, event, key=f"handoff:out:{key}")
    await relay.to_customer(conv, text, name, f"handoff:out:{key}")


async def _mirror(rt: Host, relay: Relay, handoff_id: str, text: str, key: str) -> None:
    """The customer's message into the staff thread; then, while a person owns it and a staff
    surface shows suggestions, the job that drafts one (after the message, so it reads in order)."""
    h = await rt.s.handoffs.get(handoff_id)
    if h is None:
        return
    await relay.to_staff(h, "customer", text, f"handoff:in:{key}")
    if h.state == "taken" and relay.shows_suggestions(h):
        job = JobSpec(
            kind=handoff.SUGGEST_JOB,
            payload={"handoff_id": h.id, "key": key},
            dedup_key=f"handoff:suggest:{h.id}:{key}"[:200],
        )
        await rt.s.handoffs.enqueue_once(job)


async def _suggest(rt: Host, relay: Relay, handoff_id: str, key: str) -> None:
    """A suggested reply for the owner, drafted and shown on the staff surfaces that show them."""
    h = await rt.s.handoffs.get(handoff_id)
    if h is None or h.state != "taken" or not relay.shows_suggestions(h):
        return
    drafted = await handoff_suggest.draft(rt.s, handoff_id, key)
    if drafted is not None:
        await relay.suggest(*drafted)


async def _sla(rt: Host, relay: Relay, handoff_id: str, page: int) -> None:
    """Nobody took it within the SLA: on-call is mentioned again in the thread and the customer is
    told honestly when a person will reply; the next check is queued (up to ``MAX_PAGES``)."""
    s = rt.s
    h = await s.handoffs.get(handoff_id)
    if h is None or h.state != "waiting":
        return
    conv = await s.conversations.get(h.conversation_id)
    if conv is None:
        return
    key = f"handoff:{h.id}:sla:{page}"
    await relay.to_staff(h, "repage", "", key)
    hours = s.policy.support_hours
    told = wording.HANDOFF_STILL_WAITING if hours.is_open(s.clock()) else handoff.expectation(s, s.clock())
    async with rt.lock(conv.id):
        await handoff.record_event(s, conv.id, f"The customer was told: {told}", key=f"{key}:told")
    await relay.to_customer(conv, told, SHOP, f"{key}:customer")
    event = handoff.audit_event(s, "repaged", h, "system:signoff", page=page)
    if page < handoff.MAX_PAGES:
        await s.handoffs.enqueue_once(handoff.sla_job(s, h.id, page + 1), audit=[event])
    else:
        await s.handoffs.add_work(audit=[event])


__all__ = [
    "SHOP",
    "Announce",
    "ask_for_person",
    "Deliver",
    "PostKind",
    "Relay",
    "SuggestionPost",
    "ThreadPost",
    "in_history",
    "run_job",
]
