"""One turn of one run: what the loop's steps do, and the run's own tools.

A turn owns the in-memory view of the run (history, loaded groups, evidence
retrieved, recent calls) and writes every iteration through
``ConversationRepo.commit`` in one short transaction.
"""

from __future__ import annotations

import logging
import time
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from agent import gates
from agent.decisions import Decision, Execute, Intercept, NeedsApproval, NeedsConfirmation, Record, Reject
from agent.errors import BudgetExceeded, StepLimitExceeded
from agent.executor import ExecOutcome, action_id_of
from agent.gatekeeper import Proposed, RunFacts, args_hash
from agent.history import merged, new_id, tool_result
from agent.llm.base import Block, ModelClient, ModelRequest, ModelResponse, ToolSpec
from agent.prompt import system_prompt
from agent.run_control import TurnControl, TurnDesk
from agent.services import Services
from agent.wording import GIVE_UP_REPLY, REFUSAL_REPLY, confirmation_notice
from storage.audit import AuditEvent
from storage.ledger import LockBusy
from storage.records import Approval, Conversation, Run, StoredMessage
from storage.steps import ConcurrentTurn, LostRace, NewProposal, ProposalOutcome, StepWrite, UsageWrite
from tools.context import Principal, ToolContext

log = logging.getLogger(__name__)

Outcome = Literal["answered", "finished", "escalated", "gave_up", "refused", "asked", "recorded"]


@dataclass(frozen=True, kw_only=True)
class Pending:
    """Something waiting on a person: a confirmation (with the code they may type back) or an approval."""

    kind: Literal["confirmation", "approval"]
    id: str
    summary: str
    #: Confirmations only; rendered by the runtime, never shown to the model.
    code: str | None = None


@dataclass(frozen=True, kw_only=True)
class TurnResult:
    """What a turn gives the face: the reply to deliver and what now waits on a person.

    ``reply`` is ``answer`` (the model's words) followed by ``notice`` (the runtime's own
    rendering, from the exact arguments, of every confirmation this turn asked for). A face
    that shows confirmations as cards may deliver ``answer`` and the cards instead; either
    way it reports delivery (``Runtime.delivered``) so a typed "yes" can bind to it.
    """

    conversation_id: str
    run_id: str
    reply: str
    iterations: int
    input_tokens: int
    output_tokens: int
    pending: tuple[Pending, ...]
    outcome: Outcome
    answer: str = ""
    notice: str = ""

    @property
    def shown_confirmations(self) -> tuple[str, ...]:
        """The confirmations whose runtime text this result carries."""
        return tuple(p.id for p in self.pending if p.kind == "confirmation")


@dataclass(kw_only=True)
class Turn:
    """The machinery behind the loop's steps for one turn."""

    services: Services
    conversation: Conversation
    run: Run
    principal: Principal
    model: ModelClient
    history: list[StoredMessage]
    facts: RunFacts
    now: datetime
    iterations: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tokens_before: int = 0
    started: float = field(default_factory=time.monotonic)
    replies: list[str] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    executed: list[dict[str, Any]] = field(default_factory=list)
    finished: dict[str, Any] | None = None
    escalated: bool = False
    #: The model's words when it proposed the actions of this step (approvers see them as untrusted).
    rationale: str = ""
    _unsaved_steps: int = 0
    _saved: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, dict[str, str]] = field(default_factory=dict)

    # -- the request ---------------------------------------------------------------
    def request(self) -> ModelRequest:
        registry = self.services.registry
        groups = sorted(self.facts.loaded_groups)
        specs: list[ToolSpec] = []
        listing = registry.unloaded_listing(groups)
        for spec in registry.specs_for(groups):
            if spec.name == "load_tools":
                extra = f"\nGroups not loaded yet:\n{listing}" if listing else "\nAll groups are loaded."
                spec = ToolSpec(name=spec.name, description=spec.description + extra, input_schema=spec.input_schema)
            specs.append(spec)
        system = system_prompt(principal_kind=self.principal.kind, customer_id=self.principal.customer_id)
        return ModelRequest(system=system, messages=merged(self.history), tools=specs,
                            metadata={"conversation_id": self.conversation.id, "run_id": self.run.id})

    def check_budgets(self) -> None:
        limits = self.services.policy.run
        if self.iterations >= limits.max_steps_per_turn:
            raise StepLimitExceeded(f"{self.iterations} steps without an answer")
        if self.tokens_before + self.input_tokens + self.output_tokens >= limits.max_tokens_per_conversation:
            raise BudgetExceeded("token budget for this conversation is spent")
        if time.monotonic() - self.started > limits.max_seconds_per_turn:
            raise BudgetExceeded("wall-time cap for this turn reached")

    # -- steps -----------------------------------------------------------------------
    async def answer(self, response: ModelResponse) -> TurnResult:
        self._count(response)
        content = response.content or [{"type": "text", "text": "…"}]
        await self.commit(StepWrite(conversation_id=self.conversation.id, run_id=self.run.id,
                                     messages=[("assistant", content)], usage=self._usage(response),
                                     run_status=self._status_after(), run_steps_delta=self._flush_steps(1),
                                     audit=[self._ended("answered")]))
        self.replies.append(response.text)
        return self.result("answered")

    async def record_partial(self, response: ModelResponse) -> None:
        self._count(response)
        await self.commit(StepWrite(conversation_id=self.conversation.id, run_id=self.run.id,
                                     messages=[("assistant", response.content)], usage=self._usage(response),
                                     run_steps_delta=self._flush_steps(1)))

    async def refused(self, response: ModelResponse) -> TurnResult:
        self._count(response)
        content = response.content or [{"type": "text", "text": REFUSAL_REPLY}]
        await self.commit(StepWrite(conversation_id=self.conversation.id, run_id=self.run.id,
                                     messages=[("assistant", content)], usage=self._usage(response),
                                     run_steps_delta=self._flush_steps(1), audit=[self._ended("refused")],
                                     run_status="escalated"))
        await self.escalate("model_refusal", "The model declined to continue this conversation.")
        self.replies.append(response.text or REFUSAL_REPLY)
        return self.result("refused")

    async def give_up(self, *, reason: str, detail: str) -> TurnResult:
        """An honest reply, the user's message kept, and the case handed to a person."""
        step = StepWrite(conversation_id=self.conversation.id, run_id=self.run.id, run_status="escalated",
                         audit=[self.event("run.gave_up", data={"reason": reason, "detail": detail[:200]}),
                                self._ended("gave_up")])
        if self.history and self.history[-1].role == "user":
            step.messages.append(("assistant", [{"type": "text", "text": GIVE_UP_REPLY}]))
        await self.commit(step)
        await self.escalate(reason, f"The agent stopped: {detail[:200]}")
        self.replies.append(GIVE_UP_REPLY)
        return self.result("gave_up")

    async def run_tools(self, response: ModelResponse | None, uses: list[Block]) -> TurnResult | None:
        """Persist the proposals, judge and act on each, persist the results. ``response``
        is ``None`` when repairing a history whose tool calls were never answered."""
        # Only a repair (no fresh response) can meet proposals that already exist.
        known = {} if response is not None else await self.services.conversations.proposals_by_tool_use(
            self.conversation.id, [u["id"] for u in uses])
        self.facts.step += 1
        fresh = [u for u in uses if u["id"] not in known]
        proposals = {u["id"]: known.get(u["id"]) for u in uses}
        new = [NewProposal(id=new_id("prop"), tool_use_id=str(u["id"]), tool=str(u.get("name", ""))[:64],
                           arguments=u.get("input"), args_hash=args_hash(str(u.get("name")), u.get("input")),
                           principal=self.principal.key, step=self.facts.step,
                           policy_version=self.services.policy.version) for u in fresh]
        step = StepWrite(conversation_id=self.conversation.id, run_id=self.run.id, new_proposals=new,
                         audit=[self.event("proposal", proposal_id=p.id, tool=p.tool, args_hash=p.args_hash)
                                for p in new])
        if response is not None:
            self._count(response)
            step.messages.append(("assistant", response.content))
            step.usage = self._usage(response)
            self.rationale = response.text
        await self.commit(step)
        ids = {p.tool_use_id: p.id for p in new} | {k: v.id for k, v in proposals.items() if v is not None}
        results: list[Block] = []
        outcomes: list[ProposalOutcome] = []
        audit: list[AuditEvent] = []
        for use in uses:
            prior = proposals[use["id"]]
            if prior is not None and prior.decision is not None:
                result, is_error = prior.result, prior.is_error
            else:
                result, is_error, outcome, events = await self.handle(use, ids[use["id"]],
                                                                      repairing=response is None)
                outcomes.append(outcome)
                audit.extend(events)
            results.append(tool_result(use["id"], result, is_error))
        step = StepWrite(
            conversation_id=self.conversation.id, run_id=self.run.id, messages=[("user", results)],
            outcomes=outcomes, audit=audit + ([self._ended("finished")] if self.finished else []),
            run_status="completed" if self.finished else ("escalated" if self.escalated else None),
        )
        self._unsaved_steps += 1
        self._run_changes(step, final=self.finished is not None or self.escalated)
        await self.commit(step)
        if self.finished is not None:
            self.replies.append(self.rationale or self.finished.get("resolution", ""))
            return self.result("finished")
        return None

    async def handle(self, use: Block, proposal_id: str, *, repairing: bool = False
                     ) -> tuple[Any, bool, ProposalOutcome, list[AuditEvent]]:
        """Judge one proposal and act on the decision. Nothing a tool or a check does can
        escape as an exception: an unexpected failure is an ``is_error`` result (C1)."""
        name, args = str(use.get("name", "")), use.get("input")
        proposed = Proposed(tool=name, args=args, hash=args_hash(name, args))
        ctx = self.tool_context(proposal_id)
        try:
            async with self.money_lock(name):
                decision = await self.decide(proposed, proposal_id, ctx, resumed=repairing)
                result, is_error, key = await self.act(decision, proposed, proposal_id, ctx)
        except (ConcurrentTurn, LostRace):
            raise
        except LockBusy:
            decision = Reject(reason="busy", message="Another action on this account is being carried out right "
                              "now; try once more in a moment.")
            result, is_error, key = decision.as_result(), True, None
        except Exception:
            log.exception("proposal %s (%s) failed", proposal_id, proposed.tool)
            decision = Reject(reason="internal_error", message="Something failed on our side while handling "
                              "this; tell the person honestly and escalate.")
            result, is_error, key = decision.as_result(), True, None
        if not isinstance(decision, NeedsConfirmation | NeedsApproval | Intercept):
            self.facts.remember(name, proposed.hash, result)
        outcome = ProposalOutcome(id=proposal_id, decision=decision.tag,
                                  reason=decision.reason if isinstance(decision, Reject) else None,
                                  result=result, is_error=is_error, idempotency_key=key)
        event = self.event(f"gate.{decision.tag}", proposal_id=proposal_id, tool=name,
                            args_hash=proposed.hash, idempotency_key=key,
                            data={"is_error": is_error,
                                  **({"reason": decision.reason} if isinstance(decision, Reject) else {})})
        return result, is_error, outcome, [event]

    async def decide(self, p: Proposed, proposal_id: str, ctx: ToolContext, *, resumed: bool,
                     approval: Approval | None = None, dedup: bool = True, key: str | None = None) -> Decision:
        """The gate's decision on a proposal. A ``resumed`` proposal (one a crash interrupted)
        that already claimed its ledger key was judged Execute then: it is never judged again
        (a re-check could fail *because* it ran), its key is the one it claimed."""
        if resumed:
            held = await self.services.ledger.by_proposal(proposal_id)
            if held is not None:
                return Execute(key=held.key)
        return await self.services.gatekeeper.judge(p, self.facts, ctx, approval=approval, dedup=dedup, key=key)

    def money_lock(self, tool: str) -> AbstractAsyncContextManager[None]:
        """One customer's money actions are judged and carried out one at a time, so the day's
        aggregate a verdict rests on still holds when the money moves (S5: no split in a race)."""
        t = self.services.registry.get(tool)
        if t is None or (t.money is None and t.money_at_stake is None) or not self.principal.customer_id:
            return nullcontext()
        return self.services.ledger.exclusive(f"money:{self.principal.customer_id}")

    async def act(self, decision: Decision, p: Proposed, proposal_id: str,
                  ctx: ToolContext, approval: Approval | None = None) -> tuple[Any, bool, str | None]:
        match decision:
            case Reject():
                return decision.as_result(), True, None
            case Intercept(previous=prev, step=at):
                return {"intercepted": True, "message": f"You made this exact call {self.facts.step - at} "
                        "step(s) ago. Its result is below; do not repeat it.", "previous_result": prev}, False, None
            case NeedsConfirmation():
                created = await gates.request_confirmation(self, p, proposal_id, decision)
                conf = created.confirmation
                # Confirmations of other actions stay pending beside it; only its own earlier
                # version (same tool, same target) was superseded.
                gone = {*created.superseded, conf.id}
                self.pending = [x for x in self.pending if x.id not in gone]
                self.pending.append(Pending(kind="confirmation", id=conf.id, summary=conf.summary, code=conf.code))
                who = "customer" if self.principal.kind == "customer" else "rep"
                return {"status": "CONFIRMATION_REQUIRED", "confirmation_id": conf.id, "action": conf.summary,
                        "message": f"Nothing has been done yet. The system itself shows the {who} exactly this "
                        "action and asks them to confirm it; say briefly that it needs their confirmation."
                        }, False, decision.key
            case NeedsApproval():
                appr = await gates.request_approval(self, p, proposal_id, decision)
                self.pending.append(Pending(kind="approval", id=appr.id, summary=decision.summary))
                return {"status": "PENDING_APPROVAL", "approval_id": appr.id, "action": decision.summary,
                        "message": "A supervisor must approve this before it happens. Tell the truth: it is "
                        "pending, not done."}, False, decision.key
            case Record(summary=summary, would_need=need):
                return {"status": "RECORDED_NOT_EXECUTED", "action": summary, "would_need": need,
                        "message": "Shadow mode: nothing was executed. A person will handle it."}, False, None
            case Execute(key=key):
                outcome = await self.execute(p, proposal_id, ctx, key)
                return outcome.result, outcome.is_error, key
        raise AssertionError(decision)

    async def execute(self, p: Proposed, proposal_id: str, ctx: ToolContext, key: str | None) -> ExecOutcome:
        tool = self.services.registry.tools[p.tool]
        money = tool.money(p.args) if tool.money else None
        base = self.event("execution", proposal_id=proposal_id, tool=p.tool, args_hash=p.hash,
                           data={"amount_minor": money.amount_minor, "currency": money.currency} if money else {})
        outcome = await self.services.executor.run(tool, p.args, ctx, key=key, proposal_id=proposal_id,
                                                   run_id=self.run.id, audit=base)
        if tool.meta.kind == "action" and not tool.meta.runtime:
            self.facts.action_counts[p.tool] += 1
            if not outcome.is_error:
                self.facts.recent.clear()  # the world changed: earlier reads are not to be replayed
            if not outcome.is_error and tool.meta.needs_confirmation:
                await gates.consume_confirmation(self, p)
                done = {"tool": p.tool, "action_id": action_id_of(outcome.result), "proposal_id": proposal_id}
                self.executed.append({**done, "replayed": True} if outcome.replayed else done)
        self.facts.tool_counts[p.tool] += 1
        if outcome.needs_human:
            await self.escalate("needs_human", f"{p.tool} may or may not have gone through; check it.")
        return outcome

    async def repair(self) -> None:
        """A crash between a tool call and its result leaves unanswered tool_use blocks:
        answer them now (the ledger guarantees no second side effect)."""
        last = next((i for i in range(len(self.history) - 1, -1, -1) if self.history[i].role == "assistant"), None)
        if last is None:
            return
        # The user may have written again before anyone repaired the turn.
        answered = {b.get("tool_use_id") for m in self.history[last + 1:] for b in m.content
                    if b.get("type") == "tool_result"}
        uses = [b for b in self.history[last].content if b.get("type") == "tool_use" and b.get("id") not in answered]
        if uses:
            await self.run_tools(None, uses)

    # -- context for tools: CaseDesk and RunControl ---------------------------------
    def tool_context(self, proposal_id: str | None = None) -> ToolContext:
        return ToolContext(principal=self.principal, backend=self.services.backend, case=TurnDesk(self),
                           run=TurnControl(self), rules=self.services.policy.rules(), now=self.now,
                           proposal_id=proposal_id)

    async def escalate(self, reason: str, summary: str) -> dict[str, Any]:
        self.escalated = True
        return await gates.escalate(self, reason, summary)

    def run_state(self) -> dict[str, Any]:
        return {"knowledge_ids": sorted(self.facts.knowledge_ids), "executed": self.executed_all(),
                "knowledge_notes": self.facts_notes()}

    def facts_notes(self) -> dict[str, dict[str, str]]:
        return {**self.run.state.get("knowledge_notes", {}), **self.notes}

    def executed_all(self) -> list[dict[str, Any]]:
        return list(self.run.state.get("executed", [])) + self.executed

    # -- bookkeeping -----------------------------------------------------------------
    def result(self, outcome: Outcome) -> TurnResult:
        answer = next((r for r in reversed(self.replies) if r), "")
        asked = [p for p in self.pending if p.kind == "confirmation"]
        notice = confirmation_notice([(p.summary, p.code or "") for p in asked],
                                     principal_kind=self.principal.kind) if asked else ""
        return TurnResult(conversation_id=self.conversation.id, run_id=self.run.id,
                          reply="\n\n".join(x for x in (answer, notice) if x), answer=answer, notice=notice,
                          iterations=self.iterations, input_tokens=self.input_tokens,
                          output_tokens=self.output_tokens, pending=tuple(self.pending), outcome=outcome)

    def _status_after(self) -> str:
        if self.finished:
            return "completed"
        return "escalated" if self.escalated else "waiting"

    def _count(self, response: ModelResponse) -> None:
        self.iterations += 1
        u = response.usage
        self.input_tokens += u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
        self.output_tokens += u.output_tokens

    def _usage(self, r: ModelResponse) -> UsageWrite:
        u = r.usage
        return UsageWrite(model=r.model, input_tokens=u.input_tokens, output_tokens=u.output_tokens,
                          cache_creation_tokens=u.cache_creation_input_tokens,
                          cache_read_tokens=u.cache_read_input_tokens)

    def _flush_steps(self, extra: int) -> int:
        n, self._unsaved_steps = self._unsaved_steps + extra, 0
        return n

    def _run_changes(self, step: StepWrite, *, final: bool = False) -> None:
        """Write the run's state only when it changed (a step's own cost is a design target)."""
        state, groups, pending = self.run_state(), sorted(self.facts.loaded_groups), [p.id for p in self.pending]
        changed = False
        if state != self._saved.get("state"):
            step.run_state, changed = state, True
        if pending != self._saved.get("pending", list(self.run.pending_ids)):
            step.pending_ids, changed = pending, True
        if groups != self._saved.get("groups", sorted(self.conversation.loaded_groups)):
            step.loaded_groups = groups
        if changed or final or step.run_status:
            step.run_steps_delta, self._unsaved_steps = self._unsaved_steps, 0
        self._saved.update(state=state, groups=groups, pending=pending)

    def _ended(self, outcome: str) -> AuditEvent:
        return self.event("turn.ended", data={
            "outcome": outcome, "iterations": self.iterations, "escalated": self.escalated,
            "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "channel": self.conversation.channel},
            latency_ms=round((time.monotonic() - self.started) * 1000, 3))

    def event(self, kind: str, **fields: Any) -> AuditEvent:
        """An audit event of this run, with its principal, model, prompt and policy versions."""
        return AuditEvent(kind=kind, run_id=self.run.id, trace_id=self.run.trace_id, principal=self.principal.key,
                          model=self.run.model, prompt_version=self.run.prompt_version,
                          policy_version=self.services.policy.version, **fields)

    async def commit(self, step: StepWrite) -> bool:
        """Write ``step`` in one transaction and keep the in-memory history in step.

        False when the step carried an ``event_key`` the conversation already holds (the
        event was delivered before, e.g. by a worker after a crash): nothing was written."""
        next_seq = await self.services.conversations.commit(step)
        if next_seq is None:
            return False
        base = next_seq - len(step.messages)
        for i, (role, content) in enumerate(step.messages):
            self.history.append(StoredMessage(seq=base + i, role=role, content=content, run_id=self.run.id))  # type: ignore[arg-type]
        return True


__all__ = ["Outcome", "Pending", "Turn", "TurnResult"]
