"""What every continuation of a conversation needs from the runtime.

Opening a conversation and its run into a :class:`~agent.turn.Turn`, the
per-conversation lease (across replicas), applying an action a person settled (the whole gate again),
and recording that a reply reached its person. :class:`~agent.runtime.Runtime`
adds the verbs the faces call; confirmations, approvals and the worker's
continuations are written against this class alone.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

import structlog

from agent import settled
from agent.errors import DecisionError, LimitExceeded
from agent.gatekeeper import RunFacts
from agent.history import new_id
from agent.outcomes import TurnResult
from agent.policy import Policy
from agent.prompt import PROMPT_VERSION
from agent.services import Services
from agent.settled import ApplyResult
from agent.turn import Turn
from storage.audit import AuditEvent
from storage.db import WriteFn
from storage.inbox import Accepted
from storage.leases import Leases
from storage.limits import Allowance, OverLimit
from storage.opening import TurnState
from storage.records import Approval, Conversation, Run
from tools.context import Principal
from tools.intent import classify

log = logging.getLogger(__name__)
T = TypeVar("T")
_TOO_MANY = "Too many new conversations in the last hour; continue an open one or try again later."
_SPENT = "This account has used its assistant allowance for today; try again later."


def _group(principal: Principal) -> str | None:
    """The shared budget a customer bound to no account counts against (``None``: none)."""
    return principal.group if principal.kind == "customer" and not principal.customer_id else None


class Host:
    """Owns no connection and no model context between calls: all state is durable."""

    def __init__(self, services: Services) -> None:
        self.s = services
        self._leases = Leases(services.db)

    def lock(
        self,
        conversation_id: str,
        *,
        wait_s: float | None = None,
        first: WriteFn[T] | None = None,
    ) -> AbstractAsyncContextManager[T | None]:
        """One turn of this conversation at a time, across replicas and workers (a lease, see
        :mod:`storage.leases`); a wait (``wait_s``, default the lease's) that runs out raises
        ``LockBusy`` (faces see ``Busy``). ``first`` is the turn's first write, with the lease
        (:meth:`storage.leases.Leases.hold`); the context yields its result."""
        return self._leases.hold(conversation_id, wait_s=wait_s, first=first)

    # -- conversations ---------------------------------------------------------------
    async def open_conversation(
        self,
        *,
        principal: Principal,
        channel: str,
        conversation_id: str | None = None,
        external_ref: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Conversation:
        """The principal's conversation, created on first use. Another principal's id is ``not_found``."""
        conv = await self.find_conversation(principal, conversation_id=conversation_id, external_ref=external_ref)
        if conv is not None:
            return conv
        await self.check_new_conversation(principal)
        return await self.s.conversations.create(**self.new_conversation(principal, channel, external_ref, meta))

    async def find_conversation(
        self, principal: Principal, *, conversation_id: str | None, external_ref: str | None
    ) -> Conversation | None:
        """The conversation ``conversation_id`` (else the one of ``external_ref``), ``None`` when
        a new one is due. Another principal's is ``not_found``, as is an unknown id."""
        if conversation_id is not None:
            conv = await self.s.conversations.get(conversation_id)
            if conv is None or not self.may_see(principal, conv):
                raise DecisionError("not_found", "No such conversation.")
            return conv
        if external_ref is not None:
            conv = await self.s.conversations.get_by_external_ref(external_ref)
            if conv is not None:
                if not self.may_see(principal, conv):
                    raise DecisionError("not_found", "No such conversation.")
                return conv
        return None

    def new_conversation(
        self, principal: Principal, channel: str, external_ref: str | None, meta: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The fields of a new conversation of ``principal`` (``ConversationRepo.draft``)."""
        return {
            "id": new_id("conv"),
            "channel": channel,
            "external_ref": external_ref,
            "principal_kind": principal.kind,
            "principal_id": principal.id,
            "customer_id": principal.customer_id,
            "principal_group": _group(principal),
            "model": self.s.model.model_name,
            "prompt_version": PROMPT_VERSION,
            "loaded_groups": [],
            "meta": meta,
        }

    # -- per-principal limits across conversations (policy ``customer`` and ``strangers``) ---
    def allowance(self, principal: Principal, *, tokens: bool = True, conversations: bool = False) -> Allowance:
        """The caps a customer is checked against (the day's model tokens; with
        ``conversations``, new conversations in the hour): a bound customer counted by account,
        anyone else by their own key and by their group. None for staff."""
        group = _group(principal)
        a = Allowance(kind=principal.kind, ident=principal.id, customer_id=principal.customer_id, group=group)
        if principal.kind != "customer":
            return a
        customer, strangers = self.s.policy.customer, self.s.policy.strangers
        if tokens:
            a = replace(a, tokens_per_day=customer.max_model_tokens_per_day)
            if group is not None:
                a = replace(a, group_tokens_per_day=strangers.max_model_tokens_per_day_per_group)
        if conversations:
            a = replace(a, conversations_per_hour=customer.max_new_conversations_per_hour)
            if group is not None:
                a = replace(a, group_conversations_per_hour=strangers.max_new_conversations_per_hour_per_group)
        return a

    def refusal(self, principal: Principal, over: OverLimit) -> LimitExceeded:
        """The error for a cap reached (nothing is stored; the metrics still count it)."""
        self._refused(principal, over.limit)
        return LimitExceeded(over.limit, _TOO_MANY if "conversations" in over.limit else _SPENT)

    async def check_new_conversation(self, principal: Principal) -> None:
        """Refuse a customer's new conversation beyond the hourly limit (nothing is stored)."""
        try:
            await self.s.usage.check(self.allowance(principal, tokens=False, conversations=True))
        except OverLimit as over:
            raise self.refusal(principal, over) from None

    async def customer_tokens_today(self, principal: Principal) -> int | None:
        """The model tokens of the principal's own conversations in the last 24 h (an account's
        across its conversations; ``None``: not a customer)."""
        return await self.s.usage.check(self.allowance(principal, tokens=False))

    async def check_tokens_today(self, principal: Principal) -> None:
        """Refuse a customer's turn once their day's model tokens, or their group's, are spent
        (before anything is stored)."""
        try:
            await self.s.usage.check(self.allowance(principal))
        except OverLimit as over:
            raise self.refusal(principal, over) from None

    async def accept_inbound(self, face: str, keys: Sequence[str], payload: dict[str, Any]) -> Accepted:
        """``Inbox.accept`` under the policy's cap on messages waiting for the worker (``full``:
        nothing stored; the face tells its sender to retry after ``inbound.retry_after_s``)."""
        accepted = await self.s.inbox.accept(face, keys, payload, max_queued=self.s.policy.inbound.max_queued_jobs)
        if accepted.full:
            log.warning("inbound queue full (%s): %s message turned away", self.s.policy.inbound.max_queued_jobs, face)
            self._refused(Principal(kind="system", id=face), "inbound_queue")
        return accepted

    def _refused(self, principal: Principal, limit: str) -> None:
        # The refusal stores nothing; the metrics still count it.
        self.s.db.announce(
            [
                AuditEvent(
                    kind="limit.refused",
                    principal=principal.key,
                    policy_version=self.s.policy.version,
                    data={"limit": limit},
                )
            ]
        )

    @staticmethod
    def may_see(principal: Principal, conv: Conversation) -> bool:
        if principal.is_staff:
            return True
        return principal.kind == conv.principal_kind and principal.id == conv.principal_id

    async def delivered(self, result: TurnResult) -> None:
        """The reply reached its person: the confirmations it rendered now count as shown."""
        await self.mark_shown(result.shown_confirmations)

    async def mark_shown(self, confirmation_ids: Sequence[str]) -> None:
        """The runtime's own text of these confirmations reached their principal (a face that
        renders confirmations itself — cards, email hints — says so once it delivered them)."""
        await self.s.confirmations.mark_shown(confirmation_ids, self.s.clock())

    @staticmethod
    def acting_principal(conv: Conversation, caller: Principal) -> Principal:
        """The conversation's acting principal; staff acting in assist mode keep their own identity."""
        if caller.is_staff:
            return Principal(kind=caller.kind, id=caller.id, customer_id=conv.customer_id)
        return Principal(
            kind=conv.principal_kind,  # type: ignore[arg-type]
            id=conv.principal_id,
            customer_id=conv.customer_id,
            group=conv.principal_group,
        )

    async def turn(
        self, conv: Conversation, principal: Principal, *, run: Run | None = None, first_message: str | None = None
    ) -> Turn:
        """Load the conversation's durable state into a turn (the open run, or a new one)."""
        s = self.s
        run = run or await s.conversations.open_run(conv.id)
        if run is None:
            policy = s.policy  # read once: the version this run starts with and pins
            run_id = new_id("run")
            run = await s.conversations.create_run(
                id=run_id,
                conversation_id=conv.id,
                model=s.model.model_name,
                prompt_version=PROMPT_VERSION,
                policy_version=policy.version,
                trace_id=uuid.uuid4().hex,
                audit=[run_event(run_id, principal, policy.version, s.model.model_name, s.clock())],
            )
        else:
            policy = await s.pinned_policy(run.policy_version)
        state = await s.conversations.turn_state(conv.id, run.id)
        tokens = await self.customer_tokens_today(principal)
        return self.turn_of(conv, principal, run, policy, state, tokens, first_message=first_message)

    def turn_of(
        self,
        conv: Conversation,
        principal: Principal,
        run: Run,
        policy: Policy,
        state: TurnState,
        customer_tokens: int | None,
        first_message: str | None = None,
    ) -> Turn:
        """A turn over the state loaded for it (:meth:`turn`, or a turn's opening)."""
        # Every log line from here on carries the run's trace (structured JSON logs).
        structlog.contextvars.bind_contextvars(trace_id=run.trace_id, run_id=run.id, conversation_id=conv.id)
        facts = RunFacts(
            principal=principal,
            channel=conv.channel,
            conversation_id=conv.id,
            run_id=run.id,
            loaded_groups=groups_of(conv, first_message),
            knowledge_ids=set(run.state.get("knowledge_ids", [])),
        )
        for p in state.proposals:
            facts.step = max(facts.step, p.step)
            tool = self.s.registry.get(p.tool)
            if p.decision == "execute" and tool is not None:
                facts.tool_counts[p.tool] += 1
                if tool.meta.kind == "action" and not tool.meta.runtime:
                    facts.action_counts[p.tool] += 1
        return Turn(
            services=self.s,
            conversation=conv,
            run=run,
            principal=principal,
            model=self.s.model,
            history=state.history,
            facts=facts,
            policy=policy,
            now=self.s.clock(),
            tokens_before=state.tokens_used,
            customer_tokens_before=customer_tokens,
        )

    async def apply(
        self,
        turn: Turn,
        *,
        tool: str,
        args: Any,
        origin: str,
        approval: Approval | None = None,
        proposal_id: str | None = None,
        key: str | None = None,
        confirmation_id: str | None = None,
    ) -> ApplyResult:
        """Judge and act on an action a person settled: :func:`agent.settled.apply`."""
        return await settled.apply(
            self.s,
            turn,
            tool=tool,
            args=args,
            origin=origin,
            approval=approval,
            proposal_id=proposal_id,
            key=key,
            confirmation_id=confirmation_id,
        )


def groups_of(conv: Conversation, first_message: str | None) -> set[str]:
    """The tool groups a turn starts with: the conversation's, else those its first message names."""
    groups = set(conv.loaded_groups)
    return set(classify(first_message)) if not groups and first_message else groups


def run_event(run_id: str, principal: Principal, policy_version: str, model: str, at: datetime) -> AuditEvent:
    return AuditEvent(
        ts=at,
        kind="run.started",
        run_id=run_id,
        principal=principal.key,
        model=model,
        prompt_version=PROMPT_VERSION,
        policy_version=policy_version,
    )


__all__ = ["Host"]
