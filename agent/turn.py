"""One turn of one run: its in-memory state and the recorder every step writes through.

A turn owns the in-memory view of the run (history, loaded groups, evidence
retrieved, recent calls) and writes every iteration through
``ConversationRepo.commit`` in one short transaction (:meth:`Turn.commit`), with
the audit events it describes (:meth:`Turn.event`). What the loop's steps *do*
is :mod:`agent.steps`; a turn never decides anything itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agent.claims import shadow_answer
from agent.errors import BudgetExceeded, StepLimitExceeded
from agent.gatekeeper import RunFacts
from agent.history import merged
from agent.llm.base import ModelClient, ModelRequest, ModelResponse, ToolSpec
from agent.outcomes import Outcome, Pending, TurnResult
from agent.policy import Policy
from agent.prompt import system_prompt
from agent.services import Services
from agent.wording import confirmation_notice
from storage.audit import AuditEvent
from storage.gates import drafted
from storage.limits import budget_group
from storage.records import Approval, Confirmation, Conversation, NewConfirmation, Run, RunStatus, StoredMessage
from storage.steps import StepWrite, UsageWrite
from tools.context import Principal


@dataclass(kw_only=True)
class Turn:
    """The run's state for one turn, and the one way to write it (:meth:`commit`)."""

    services: Services
    conversation: Conversation
    run: Run
    principal: Principal
    model: ModelClient
    history: list[StoredMessage]
    facts: RunFacts
    now: datetime
    #: The policy version the run started with (C16): every decision, limit and stamp of this
    #: turn reads it, whatever version is applied meanwhile.
    policy: Policy
    iterations: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tokens_before: int = 0
    #: The customer's model tokens in the last 24 h across conversations (``None``: staff).
    customer_tokens_before: int | None = None
    started: float = field(default_factory=time.monotonic)
    replies: list[str] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    #: Approvals opened in this turn whose cards are not out yet (``steps.announce`` sends them).
    unannounced: list[Approval] = field(default_factory=list)
    executed: list[dict[str, Any]] = field(default_factory=list)
    finished: dict[str, Any] | None = None
    escalated: bool = False
    #: The summaries of the actions this turn recorded in shadow (never executed).
    recorded: list[str] = field(default_factory=list)
    #: The model's words when it proposed the actions of this step (approvers see them as untrusted).
    rationale: str = ""
    notes: dict[str, dict[str, str]] = field(default_factory=dict)
    _unsaved_steps: int = 0
    #: Confirmations opened and not written yet: the next :meth:`commit` writes them.
    _confirmations: list[tuple[NewConfirmation, list[AuditEvent]]] = field(default_factory=list)
    _saved: dict[str, Any] = field(default_factory=dict)

    # -- the request ---------------------------------------------------------------
    def request(self) -> ModelRequest:
        """The model request for the next step: history, the loaded tools (and a line per other group)."""
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
        return ModelRequest(
            system=system,
            messages=merged(self.history),
            tools=specs,
            metadata={"conversation_id": self.conversation.id, "run_id": self.run.id},
        )

    def check_budgets(self) -> None:
        """Raise when the step cap, the conversation's token budget or the wall-time cap is spent."""
        limits = self.policy.run
        if self.iterations >= limits.max_steps_per_turn:
            raise StepLimitExceeded(f"{self.iterations} steps without an answer")
        if self.tokens_before + self.input_tokens + self.output_tokens >= limits.max_tokens_per_conversation:
            raise BudgetExceeded("token budget for this conversation is spent")
        spent = self.input_tokens + self.output_tokens
        if (
            self.customer_tokens_before is not None
            and self.customer_tokens_before + spent >= self.policy.customer.max_model_tokens_per_day
        ):
            raise BudgetExceeded("the customer's model tokens for today are spent")
        if time.monotonic() - self.started > limits.max_seconds_per_turn:
            raise BudgetExceeded("wall-time cap for this turn reached")

    # -- the run's state ---------------------------------------------------------------
    def run_state(self) -> dict[str, Any]:
        """What the run keeps between turns: evidence retrieved, actions executed, evidence notes."""
        return {
            "knowledge_ids": sorted(self.facts.knowledge_ids),
            "executed": self.executed_all(),
            "knowledge_notes": self.facts_notes(),
        }

    def facts_notes(self) -> dict[str, dict[str, str]]:
        """Title and excerpt of every evidence id retrieved in this run (approvers see them)."""
        return {**self.run.state.get("knowledge_notes", {}), **self.notes}

    def executed_all(self) -> list[dict[str, Any]]:
        """Every action this run executed, earlier turns included (``finish`` is checked against it)."""
        return list(self.run.state.get("executed", [])) + self.executed

    def result(self, outcome: Outcome) -> TurnResult:
        """The turn's result: the model's last words (after a shadow proposal, never claiming it
        and with the runtime's line that a person follows up), then the runtime's text of every
        confirmation asked."""
        answer = next((r for r in reversed(self.replies) if r), "")
        if self.recorded:
            done = {str(e.get("tool")) for e in self.executed_all() if not e.get("replayed")}
            customer = self.conversation.principal_kind == "customer"
            answer = shadow_answer(answer, self.recorded, self.services.registry, executed=done, customer=customer)
        asked = [p for p in self.pending if p.kind == "confirmation"]
        notice = (
            confirmation_notice([(p.summary, p.code or "") for p in asked], principal_kind=self.principal.kind)
            if asked
            else ""
        )
        return TurnResult(
            conversation_id=self.conversation.id,
            run_id=self.run.id,
            reply="\n\n".join(x for x in (answer, notice) if x),
            answer=answer,
            notice=notice,
            iterations=self.iterations,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            pending=tuple(self.pending),
            outcome=outcome,
            seq=self.history[-1].seq if self.history else None,
        )

    # -- bookkeeping the steps share -----------------------------------------------------
    def status_after(self) -> RunStatus:
        """The run's status once the model answered: completed, escalated or waiting."""
        if self.finished:
            return "completed"
        return "escalated" if self.escalated else "waiting"

    def count(self, response: ModelResponse) -> UsageWrite:
        """Count a model response against the turn's budgets; its usage row."""
        self.iterations += 1
        u = response.usage
        self.input_tokens += u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
        self.output_tokens += u.output_tokens
        return UsageWrite(
            model=response.model,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_creation_tokens=u.cache_creation_input_tokens,
            cache_read_tokens=u.cache_read_input_tokens,
            principal_group=budget_group(self.conversation.principal_group, self.conversation.customer_id),
        )

    def flush_steps(self, extra: int) -> int:
        """The steps not yet counted on the run, plus ``extra``; they count as written now."""
        n, self._unsaved_steps = self._unsaved_steps + extra, 0
        return n

    def step_done(self, step: StepWrite, *, final: bool = False) -> None:
        """Count a tool step; write the run's state with ``step`` only when it changed
        (a step's own cost is a design target)."""
        self._unsaved_steps += 1
        state, groups, pending = self.run_state(), sorted(self.facts.loaded_groups), [p.id for p in self.pending]
        changed = False
        if state != self._saved.get("state"):
            step.run_state, changed = state, True
        if pending != self._saved.get("pending", list(self.run.pending_ids)):
            step.pending_ids, changed = pending, True
        if groups != self._saved.get("groups", sorted(self.conversation.loaded_groups)):
            step.loaded_groups = groups
        if changed or final or step.run_status:
            step.run_steps_delta = self.flush_steps(0)
        self._saved.update(state=state, groups=groups, pending=pending)

    def ended(self, outcome: Outcome) -> AuditEvent:
        """The ``turn.ended`` audit event (outcome, iterations, tokens, latency)."""
        return self.event(
            "turn.ended",
            data={
                "outcome": outcome,
                "iterations": self.iterations,
                "escalated": self.escalated,
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "channel": self.conversation.channel,
            },
            latency_ms=round((time.monotonic() - self.started) * 1000, 3),
        )

    # -- the recorder --------------------------------------------------------------------
    def event(self, kind: str, **fields: Any) -> AuditEvent:
        """An audit event of this run, with its principal, model, prompt and policy versions."""
        fields.setdefault("ts", self.services.clock())
        return AuditEvent(
            kind=kind,
            run_id=self.run.id,
            trace_id=self.run.trace_id,
            principal=self.principal.key,
            model=self.run.model,
            prompt_version=self.run.prompt_version,
            policy_version=self.policy.version,
            **fields,
        )

    def step(self, **fields: Any) -> StepWrite:
        """A step write of this turn's conversation and run."""
        return StepWrite(conversation_id=self.conversation.id, run_id=self.run.id, **fields)

    async def commit(self, step: StepWrite) -> bool:
        """Write ``step`` in one transaction and keep the in-memory history in step.

        False when the step carried an ``event_key`` the conversation already holds (the
        event was delivered before, e.g. by a worker after a crash): nothing was written."""
        if self._confirmations:
            step.confirmations = [*self._confirmations, *step.confirmations]
        next_seq = await self.services.conversations.commit(step)
        if next_seq is None:
            return False
        self._confirmations = []
        self.written(step, next_seq)
        return True

    def confirm_later(self, new: NewConfirmation, event: AuditEvent) -> None:
        """Open ``new`` (with its audit event) in the next :meth:`commit`: the step that shows it."""
        self._confirmations.append((new, [event]))

    def unsaved_confirmations(self) -> list[Confirmation]:
        """The confirmations :meth:`confirm_later` holds, as they will be stored."""
        return [drafted(new) for new, _ in self._confirmations]

    def written(self, step: StepWrite, next_seq: int) -> None:
        """Keep the in-memory history in step with ``step``, committed up to ``next_seq``."""
        base = next_seq - len(step.messages)
        for i, (role, content) in enumerate(step.messages):
            self.history.append(StoredMessage(seq=base + i, role=role, content=content, run_id=self.run.id))  # type: ignore[arg-type]


__all__ = ["Outcome", "Pending", "Turn", "TurnResult"]
