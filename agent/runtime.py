"""The one runtime every face calls: chat, confirm, decide, resume.

Slack, the HTTP API, email, the CLI and the worker are thin layers over these
methods; none of them decides anything itself.
"""

from __future__ import annotations

import asyncio
import re
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

import structlog

from agent import approvals as approval_flow
from agent import gates
from agent.errors import DecisionError
from agent.gatekeeper import Proposed, RunFacts, args_hash
from agent.loop import run_loop
from agent.prompt import PROMPT_VERSION
from agent.services import Services
from agent.turn import Pending, Turn, TurnResult, event_block, new_id, sanitize_user_text
from agent.wording import CONFIRMED_EVENT, DECLINED_EVENT
from storage.records import Approval, Confirmation, Conversation, Run
from storage.steps import NewProposal, ProposalOutcome, StepWrite
from tools.context import Principal
from tools.intent import classify

AFFIRMATIVE = frozenset({
    "yes", "y", "yes please", "yeah", "yep", "yup", "go ahead", "go ahead please", "please go ahead",
    "confirm", "confirmed", "i confirm", "yes confirm", "please do", "do it", "ok", "okay",
    "sure", "yes go ahead", "that's right", "correct", "yes do it", "sounds good",
})
NEGATIVE = frozenset({"no", "n", "nope", "no thanks", "don't", "do not", "stop", "no don't", "decline", "cancel that"})


def normalise_reply(text: str) -> str:
    return re.sub(r"[^a-z' ]+", " ", text.lower()).strip().replace("  ", " ")


@dataclass(frozen=True, kw_only=True)
class ConfirmResult:
    confirmation: Confirmation
    result: Any | None
    approval: Approval | None
    reply: str | None


@dataclass(frozen=True, kw_only=True)
class ApplyResult:
    decision: str
    result: Any
    is_error: bool
    approval: Approval | None


class Runtime:
    """Owns no connection and no model context between calls: all state is durable."""

    def __init__(self, services: Services) -> None:
        self.s = services
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def lock(self, conversation_id: str) -> asyncio.Lock:
        lock = self._locks.get(conversation_id)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[conversation_id] = lock
        return lock

    # -- conversations ---------------------------------------------------------------
    async def open_conversation(self, *, principal: Principal, channel: str, conversation_id: str | None = None,
                                external_ref: str | None = None, meta: dict[str, Any] | None = None) -> Conversation:
        """The principal's conversation, created on first use. Another principal's id is ``not_found``."""
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
        return await self.s.conversations.create(
            id=new_id("conv"), channel=channel, external_ref=external_ref, principal_kind=principal.kind,
            principal_id=principal.id, customer_id=principal.customer_id, model=self.s.model.model_name,
            prompt_version=PROMPT_VERSION, loaded_groups=[], meta=meta)

    @staticmethod
    def may_see(principal: Principal, conv: Conversation) -> bool:
        if principal.is_staff:
            return True
        return principal.kind == conv.principal_kind and principal.id == conv.principal_id

    async def chat(self, *, principal: Principal, channel: str, message: str,
                   conversation_id: str | None = None, external_ref: str | None = None) -> TurnResult:
        conv = await self.open_conversation(principal=principal, channel=channel,
                                            conversation_id=conversation_id, external_ref=external_ref)
        if principal.is_staff and conv.principal_kind == "customer":
            # Staff read customers' conversations but never speak inside them as the customer.
            raise DecisionError("forbidden", "Staff work in their own assist conversation on this account.")
        acting = self.acting_principal(conv, principal)
        async with self.lock(conv.id):
            # The user's words are durable before anything acts on them.
            turn = await self.turn(conv, acting, first_message=message)
            await turn._commit(StepWrite(
                conversation_id=conv.id, run_id=turn.run.id,
                messages=[("user", [{"type": "text", "text": sanitize_user_text(message)}])],
                run_status="running", loaded_groups=sorted(turn.facts.loaded_groups)))
            pending = [c for c in await self.s.confirmations.pending(conv.id) if c.principal == acting.key]
            reply = normalise_reply(message)
            if len(pending) == 1 and (reply in AFFIRMATIVE or reply in NEGATIVE):
                event, applied = await self._settle_confirmation(conv, acting, pending[0], reply in AFFIRMATIVE)
                conv = await self.s.conversations.get(conv.id) or conv
                turn = await self.turn(conv, acting, run=await self.s.conversations.get_run(turn.run.id))
                # A second user message: requests merge consecutive user turns.
                await turn._commit(StepWrite(conversation_id=conv.id, run_id=turn.run.id,
                                             messages=[("user", [event_block(event)])]))
                if applied is not None and applied.approval is not None:
                    turn.pending.append(Pending(kind="approval", id=applied.approval.id,
                                                summary=applied.approval.summary))
            return await run_loop(turn)

    @staticmethod
    def acting_principal(conv: Conversation, caller: Principal) -> Principal:
        """The conversation's acting principal; staff acting in assist mode keep their own identity."""
        if caller.is_staff:
            return Principal(kind=caller.kind, id=caller.id, customer_id=conv.customer_id)
        return Principal(kind=conv.principal_kind, id=conv.principal_id, customer_id=conv.customer_id)  # type: ignore[arg-type]

    async def turn(self, conv: Conversation, principal: Principal, *, run: Run | None = None,
                   first_message: str | None = None) -> Turn:
        """Load the conversation's durable state into a turn (the open run, or a new one)."""
        s = self.s
        run = run or await s.conversations.open_run(conv.id)
        if run is None:
            run_id = new_id("run")
            run = await s.conversations.create_run(
                id=run_id, conversation_id=conv.id, model=s.model.model_name, prompt_version=PROMPT_VERSION,
                policy_version=s.policy.version, trace_id=uuid.uuid4().hex,
                audit=[_run_event(run_id, principal, s.policy.version, s.model.model_name)])
        # Every log line from here on carries the run's trace (structured JSON logs).
        structlog.contextvars.bind_contextvars(trace_id=run.trace_id, run_id=run.id, conversation_id=conv.id)
        state = await s.conversations.turn_state(conv.id, run.id)
        history = state.history
        groups = set(conv.loaded_groups)
        if not groups and first_message:
            groups = set(classify(first_message))
        facts = RunFacts(principal=principal, channel=conv.channel, conversation_id=conv.id, run_id=run.id,
                         loaded_groups=groups, knowledge_ids=set(run.state.get("knowledge_ids", [])))
        for p in state.proposals:
            facts.step = max(facts.step, p.step)
            tool = s.registry.get(p.tool)
            if p.decision == "execute" and tool is not None:
                facts.tool_counts[p.tool] += 1
                if tool.meta.kind == "action" and not tool.meta.runtime:
                    facts.action_counts[p.tool] += 1
        return Turn(services=s, conversation=conv, run=run, principal=principal, model=s.model,
                    history=history, facts=facts, now=s.clock(), tokens_before=state.tokens_used)

    # -- applying a decided-upon action outside a model step ---------------------------
    async def apply(self, turn: Turn, *, tool: str, args: Any, origin: str,
                    approval: Approval | None = None, proposal_id: str | None = None) -> ApplyResult:
        """Judge and act on an action that a human settled (confirmed or approved).

        The whole gate runs again: preconditions are re-checked immediately before
        execution, and a verdict that changed while it waited is not executed.
        ``proposal_id`` re-judges a proposal persisted earlier whose decision a
        crash interrupted (see ``agent.worker.recover``).
        """
        s = self.s
        p = Proposed(tool=tool, args=args, hash=args_hash(tool, args))
        prop = NewProposal(id=proposal_id or new_id("prop"), tool_use_id=f"runtime:{origin}", tool=tool,
                           arguments=args, args_hash=p.hash, principal=turn.principal.key, step=turn.facts.step,
                           policy_version=s.policy.version)
        if proposal_id is None:
            await turn._commit(StepWrite(
                conversation_id=turn.conversation.id, run_id=turn.run.id, new_proposals=[prop],
                audit=[turn._event("proposal", proposal_id=prop.id, tool=tool, args_hash=p.hash,
                                   data={"origin": origin})]))
        ctx = turn.tool_context()
        async with turn.money_lock(tool):
            decision = await s.gatekeeper.judge(p, turn.facts, ctx, approval=approval, dedup=False)
            result, is_error, key = await turn.act(decision, p, prop.id, ctx, approval=approval)
        await turn._commit(StepWrite(
            conversation_id=turn.conversation.id, run_id=turn.run.id,
            outcomes=[ProposalOutcome(id=prop.id, decision=decision.tag, reason=getattr(decision, "reason", None),
                                      result=result, is_error=is_error, idempotency_key=key)],
            audit=[turn._event(f"gate.{decision.tag}", proposal_id=prop.id, tool=tool, args_hash=p.hash,
                               idempotency_key=key, data={"origin": origin, "is_error": is_error,
                                                          "reason": getattr(decision, "reason", None)})],
            run_state=turn.run_state(), pending_ids=[x.id for x in turn.pending]))
        new_approval = None
        if decision.tag == "approval":
            new_approval = await s.approvals.get(turn.pending[-1].id)
        return ApplyResult(decision=decision.tag, result=result, is_error=is_error, approval=new_approval)

    # -- confirmations ----------------------------------------------------------------
    async def confirm(self, confirmation_id: str, *, actor: Principal, accept: bool) -> ConfirmResult:
        conf = await self.s.confirmations.get(confirmation_id)
        if conf is None:
            raise DecisionError("not_found", "No such confirmation.")
        conv = await self.s.conversations.get(conf.conversation_id)
        assert conv is not None
        if not self.may_see(actor, conv):  # acting_principal() adopts the conversation's identity: check first
            raise DecisionError("not_found", "No such confirmation.")
        acting = self.acting_principal(conv, actor)
        if conf.principal != acting.key:
            raise DecisionError("forbidden", "Only the person this action was proposed to can confirm it.")
        async with self.lock(conv.id):
            event, last = await self._settle_confirmation(conv, acting, conf, accept)
            turn = await self.turn(conv, acting)
            await turn._commit(StepWrite(conversation_id=conv.id, run_id=turn.run.id,
                                         messages=[("user", [event_block(event)])], run_status="running"))
            outcome = await run_loop(turn)
        settled = await self.s.confirmations.get(confirmation_id)
        assert settled is not None
        return ConfirmResult(confirmation=settled, result=last.result if last and last.decision == "execute" else None,
                             approval=last.approval if last else None, reply=outcome.reply or None)

    async def _settle_confirmation(self, conv: Conversation, acting: Principal, conf: Confirmation,
                                   accept: bool) -> tuple[str, ApplyResult | None]:
        """Record the principal's answer and, on yes, apply the action; returns the event text."""
        s = self.s
        who = "customer" if acting.kind == "customer" else "rep"
        if conf.status != "pending":
            raise DecisionError("conflict", f"This confirmation is already {conf.status}.")
        turn = await self.turn(conv, acting)
        moved = await s.confirmations.transition(
            conf.id, expected_version=conf.version, from_status="pending",
            to_status="confirmed" if accept else "declined", at=s.clock(),
            audit=[turn._event("confirmation.confirmed" if accept else "confirmation.declined",
                               tool=conf.tool, args_hash=conf.args_hash, data={"confirmation_id": conf.id})])
        if moved is None:
            raise DecisionError("conflict", "This confirmation was already answered.")
        if not accept:
            return DECLINED_EVENT.format(who=who, summary=conf.summary), None
        turn._assistant_text = await self._rationale(turn, conf)
        applied = await self.apply(turn, tool=conf.tool, args=conf.arguments, origin=conf.id)
        if applied.decision != "approval":  # one confirmation, one attempt: refused, it is spent
            await gates.consume_confirmation(turn, Proposed(tool=conf.tool, args=conf.arguments, hash=conf.args_hash))
        return CONFIRMED_EVENT.format(who=who, summary=conf.summary, outcome=_outcome_text(applied)), applied

    async def _rationale(self, turn: Turn, conf: Confirmation) -> str:
        """The model's own words when it proposed this action (shown to approvers as untrusted)."""
        original = await self.s.conversations.get_proposal(conf.proposal_id)
        if original is None:
            return ""
        for m in reversed(turn.history):
            if m.role == "assistant" and any(b.get("id") == original.tool_use_id for b in m.content):
                return " ".join(str(b.get("text", "")) for b in m.content if b.get("type") == "text").strip()
        return ""

    # -- approvals (the one decision function lives in agent.approvals) -----------------
    async def decide(self, approval_id: str, *, expected_version: int, decision: str, actor: Principal,
                     comment: str | None = None, edited_arguments: dict[str, Any] | None = None
                     ) -> approval_flow.DecideResult:
        return await approval_flow.decide(self, approval_id, expected_version=expected_version,
                                          decision=decision, actor=actor, comment=comment,
                                          edited_arguments=edited_arguments)

    async def resume(self, approval_id: str) -> TurnResult | None:
        return await approval_flow.resume(self, approval_id)

    async def expire_stale(self) -> int:
        return await approval_flow.expire_stale(self)


def _outcome_text(applied: ApplyResult) -> str:
    import json

    body = json.dumps(applied.result, ensure_ascii=False, default=str)[:1500]
    if applied.decision == "execute" and not applied.is_error:
        return f"executed: {body}"
    if applied.decision == "approval":
        return f"PENDING_APPROVAL: {body}"
    return f"not executed: {body}"


def _run_event(run_id: str, principal: Principal, policy_version: str, model: str) -> Any:
    from storage.audit import AuditEvent

    return AuditEvent(kind="run.started", run_id=run_id, principal=principal.key, model=model,
                      prompt_version=PROMPT_VERSION, policy_version=policy_version)


__all__ = ["AFFIRMATIVE", "NEGATIVE", "ConfirmResult", "Runtime", "normalise_reply"]
