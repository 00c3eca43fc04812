"""The one runtime every face calls: chat, confirm, decide, resume.

Slack, the HTTP API, email, the CLI and the worker are thin layers over these
methods; none of them decides anything itself.
"""

from __future__ import annotations

import asyncio
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from agent import approvals as approval_flow
from agent import confirmations, continuation
from agent.confirmations import Answer, AskWhich, ConfirmResult, Via
from agent.errors import DecisionError
from agent.gatekeeper import Proposed, RunFacts, args_hash
from agent.history import event_block, new_id, sanitize_user_text
from agent.loop import run_loop
from agent.prompt import PROMPT_VERSION
from agent.services import Services
from agent.turn import Pending, Turn, TurnResult
from agent.wording import ASKED_WHICH_EVENT, which_one
from storage.records import Approval, Conversation, Run
from storage.steps import NewProposal, ProposalOutcome, StepWrite
from tools.context import Principal
from tools.intent import classify


@dataclass(frozen=True, kw_only=True)
class ApplyResult:
    """How the gate decided an action a person settled, and what came of it."""

    decision: str
    result: Any
    is_error: bool
    approval: Approval | None

    def outcome(self) -> dict[str, Any]:
        """The stored form (a confirmation's ``outcome``)."""
        return {"decision": self.decision, "result": self.result, "is_error": self.is_error,
                "approval_id": self.approval.id if self.approval else None}


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
                   conversation_id: str | None = None, external_ref: str | None = None,
                   deliver_later: bool = False) -> TurnResult:
        """One user message: stored first, then a typed answer to a waiting confirmation is
        settled by the runtime, anything else goes to the agent.

        The result's confirmations count as shown to the principal when this returns (the
        face delivers the reply synchronously); a face that delivers later passes
        ``deliver_later`` and calls :meth:`delivered` once the reply went out."""
        conv = await self.open_conversation(principal=principal, channel=channel,
                                            conversation_id=conversation_id, external_ref=external_ref)
        if principal.is_staff and conv.principal_kind == "customer":
            # Staff read customers' conversations but never speak inside them as the customer.
            raise DecisionError("forbidden", "Staff work in their own assist conversation on this account.")
        acting = self.acting_principal(conv, principal)
        async with self.lock(conv.id):
            # The user's words are durable before anything acts on them.
            turn = await self.turn(conv, acting, first_message=message)
            await turn.commit(StepWrite(
                conversation_id=conv.id, run_id=turn.run.id,
                messages=[("user", [{"type": "text", "text": sanitize_user_text(message)}])],
                run_status="running", loaded_groups=sorted(turn.facts.loaded_groups)))
            waiting = [c for c in await self.s.confirmations.pending(conv.id) if c.principal == acting.key]
            codes_only = conv.channel in confirmations.CODE_ONLY_CHANNELS
            match confirmations.read_reply(message, waiting, codes_only=codes_only):
                case Answer(confirmation=conf, accept=accept, via=via):
                    settled = await confirmations.answer(self, conv, acting, conf, accept, via=via)
                    result = settled.turn or await run_loop(await self.turn(conv, acting))
                case AskWhich(waiting=several):
                    result = await self._ask_which(turn, message, list(several))
                case None:
                    result = await run_loop(turn)
        if not deliver_later:
            await self.delivered(result)
        return result

    async def _ask_which(self, turn: Turn, message: str, waiting: list[Any]) -> TurnResult:
        """A bare yes/no the runtime cannot bind to one shown confirmation: the runtime itself
        lists them with their codes (no model call), and the agent learns it asked."""
        who = "customer" if turn.principal.kind == "customer" else "rep"
        items = [(c.summary, c.code) for c in waiting]
        event = ASKED_WHICH_EVENT.format(who=who, text=message.strip()[:40],
                                         actions="; ".join(c.summary for c in waiting))
        await turn.commit(StepWrite(conversation_id=turn.conversation.id, run_id=turn.run.id,
                                    messages=[("user", [event_block(event)])], run_status="waiting"))
        text = which_one(message, items)
        return TurnResult(conversation_id=turn.conversation.id, run_id=turn.run.id, reply=text, notice=text,
                          iterations=0, input_tokens=0, output_tokens=0, outcome="asked",
                          pending=tuple(Pending(kind="confirmation", id=c.id, summary=c.summary, code=c.code)
                                        for c in waiting))

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
                    approval: Approval | None = None, proposal_id: str | None = None,
                    key: str | None = None, confirmation_id: str | None = None) -> ApplyResult:
        """Judge and act on an action that a human settled (confirmed or approved).

        The whole gate runs again: preconditions are re-checked immediately before
        execution, and a verdict that changed while it waited is not executed.
        ``proposal_id`` re-judges a proposal persisted earlier (a confirmation's, or one
        a crash interrupted); ``key`` is the idempotency key fixed when the action was
        first judged; ``confirmation_id`` stores the outcome on that confirmation in the
        same transaction as the proposal's.
        """
        s = self.s
        p = Proposed(tool=tool, args=args, hash=args_hash(tool, args))
        prop_id = proposal_id or new_id("prop")
        if proposal_id is None:
            prop = NewProposal(id=prop_id, tool_use_id=f"runtime:{origin.partition(':')[2] or origin}",
                               origin=origin, tool=tool, arguments=args, args_hash=p.hash,
                               principal=turn.principal.key, step=turn.facts.step, policy_version=s.policy.version)
            await turn.commit(StepWrite(
                conversation_id=turn.conversation.id, run_id=turn.run.id, new_proposals=[prop],
                audit=[turn.event("proposal", proposal_id=prop_id, tool=tool, args_hash=p.hash,
                                  data={"origin": origin})]))
        ctx = turn.tool_context(prop_id)
        async with turn.money_lock(tool):
            decision = await turn.decide(p, prop_id, ctx, resumed=proposal_id is not None, approval=approval,
                                         dedup=False, key=key)
            result, is_error, used_key = await turn.act(decision, p, prop_id, ctx, approval=approval)
        if is_error and isinstance(result, dict) and result.get("error") == "in_progress":
            # Another live process is carrying this very proposal out: its outcome will be recorded.
            raise DecisionError("conflict", "This action is being carried out right now; its outcome follows.")
        new_approval = await s.approvals.get(turn.pending[-1].id) if decision.tag == "approval" else None
        applied = ApplyResult(decision=decision.tag, result=result, is_error=is_error, approval=new_approval)
        await turn.commit(StepWrite(
            conversation_id=turn.conversation.id, run_id=turn.run.id,
            outcomes=[ProposalOutcome(id=prop_id, decision=decision.tag, reason=getattr(decision, "reason", None),
                                      result=result, is_error=is_error, idempotency_key=used_key)],
            audit=[turn.event(f"gate.{decision.tag}", proposal_id=prop_id, tool=tool, args_hash=p.hash,
                              idempotency_key=used_key, data={"origin": origin, "is_error": is_error,
                                                              "reason": getattr(decision, "reason", None)})],
            run_state=turn.run_state(), pending_ids=[x.id for x in turn.pending],
            confirmation_outcome=(confirmation_id, applied.outcome()) if confirmation_id else None))
        return applied

    # -- confirmations ----------------------------------------------------------------
    async def confirm(self, confirmation_id: str, *, actor: Principal, accept: bool,
                      via: Via = "api", deliver_later: bool = False) -> ConfirmResult:
        """Answer a confirmation by id (an API call, a button). Answering again the same way
        returns the stored outcome; only the principal it was proposed to may answer.
        (``deliver_later``: as for :meth:`chat`.)"""
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
            fresh = await self.s.confirmations.get(confirmation_id)
            assert fresh is not None
            settled = await confirmations.answer(self, conv, acting, fresh, accept, via=via)
        if settled.turn is not None and not deliver_later:
            await self.delivered(settled.turn)
        return settled

    async def carry_out_confirmation(self, confirmation_id: str, *, deliver: bool = False) -> TurnResult | None:
        """Finish an answered confirmation a crash interrupted (the worker's job); idempotent.
        With ``deliver``, the agent's answer goes to the conversation's face."""
        conf = await self.s.confirmations.get(confirmation_id)
        if conf is None:
            return None
        async with self.lock(conf.conversation_id):
            reply = await confirmations.carry_out(self, confirmation_id)
        conv = await self.s.conversations.get(conf.conversation_id)
        if deliver and conv is not None:
            await continuation.deliver(self, conv, reply)
        return reply

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


def _run_event(run_id: str, principal: Principal, policy_version: str, model: str) -> Any:
    from storage.audit import AuditEvent

    return AuditEvent(kind="run.started", run_id=run_id, principal=principal.key, model=model,
                      prompt_version=PROMPT_VERSION, policy_version=policy_version)


__all__ = ["ApplyResult", "ConfirmResult", "Runtime"]
