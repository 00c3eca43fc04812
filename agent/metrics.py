"""Prometheus metrics (C15), fed by the audit events the runtime commits.

:class:`Metrics` owns its own :class:`~prometheus_client.CollectorRegistry`
(no global state). ``Metrics.observe(events)`` is registered with
``Database.observe`` and maps each committed audit event to counters and
histograms; :class:`InstrumentedModel` wraps a model client to measure model
latency, tokens, estimated cost and errors; :meth:`Metrics.breaker_callback`
is the ``on_change`` hook of a :class:`~agent.llm.breaker.CircuitBreaker`.

Wiring (the composition root)::

    metrics = attach_metrics(services)            # db.observe(metrics.observe)
    model = InstrumentedModel(model, metrics)     # before build_services
    breaker = CircuitBreaker(on_change=metrics.breaker_callback("anthropic"))
    # GET /metrics -> metrics.render(), content type metrics.content_type

Cost per conversation is ``signoff_model_cost_usd_total / signoff_conversations_total``
in PromQL; per turn it is the ``signoff_turn_cost_usd`` histogram.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from agent.errors import ModelUnavailable
from agent.llm.base import ModelClient, ModelRequest, ModelResponse, Usage

if TYPE_CHECKING:
    from agent.services import Services

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
REFUND_BUCKETS = (500, 1000, 2500, 5000, 10000, 20000, 50000, 100000, 250000, 1000000)
DECISION_BUCKETS = (30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400)
COST_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_FINAL_APPROVAL = frozenset({"approved", "rejected", "expired", "superseded"})
BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}
#: Gate refusal reasons that are a per-principal limit, and the limit's name.
GATE_LIMITS = {"daily_action_limit_reached": "actions_per_day"}
_LABEL = re.compile(r"^[a-z][a-z0-9_.:-]{0,63}$")


@dataclass(frozen=True, kw_only=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_write: float

    def cost(self, u: Usage) -> float:
        return (
            u.input_tokens * self.input
            + u.output_tokens * self.output
            + u.cache_read_input_tokens * self.cache_read
            + u.cache_creation_input_tokens * self.cache_write
        ) / 1_000_000


#: Model-family prefixes and list prices (USD per million tokens). Unknown models cost 0.
PRICES: tuple[tuple[str, Price], ...] = (
    ("claude-opus", Price(input=15.0, output=75.0, cache_read=1.5, cache_write=18.75)),
    ("claude-sonnet", Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)),
    ("claude-3-5-sonnet", Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)),
    ("claude-3-7-sonnet", Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)),
    ("claude-haiku", Price(input=1.0, output=5.0, cache_read=0.1, cache_write=1.25)),
    ("claude-3-5-haiku", Price(input=0.8, output=4.0, cache_read=0.08, cache_write=1.0)),
    ("gpt-4o-mini", Price(input=0.15, output=0.6, cache_read=0.075, cache_write=0.0)),
    ("gpt-4o", Price(input=2.5, output=10.0, cache_read=1.25, cache_write=0.0)),
)


def price_of(model: str) -> Price | None:
    """The price table entry whose prefix matches ``model``; the longest prefix wins."""
    matches = [(prefix, p) for prefix, p in PRICES if model.lower().startswith(prefix)]
    return max(matches, key=lambda m: len(m[0]))[1] if matches else None


def estimate_cost(model: str, usage: Usage) -> float:
    """Estimated USD cost of one call; 0.0 for models not in :data:`PRICES`."""
    price = price_of(model)
    return price.cost(usage) if price else 0.0


class Metrics:
    """Every signoff metric, in a registry of its own."""

    def __init__(self, *, registry: CollectorRegistry | None = None, known_tools: Iterable[str] = ()) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._tools = frozenset(known_tools)
        self._turn_cost: OrderedDict[str, float] = OrderedDict()
        self._requested: OrderedDict[str, datetime] = OrderedDict()
        self._outcome_metrics(self.registry)
        self._gate_metrics(self.registry)
        self._latency_and_cost_metrics(self.registry)

    def _outcome_metrics(self, r: CollectorRegistry) -> None:
        self.conversations = Counter("signoff_conversations", "Conversations (agent runs) started.", registry=r)
        self.turns = Counter(
            "signoff_turns", "Turns ended, by outcome and channel.", ["outcome", "channel"], registry=r
        )
        self.contained = Counter(
            "signoff_contained_turns", "Turns answered or finished without escalation.", ["channel"], registry=r
        )
        self.escalations = Counter("signoff_escalations", "Escalations to a person, by reason.", ["reason"], registry=r)
        self.handoff_takeover = Histogram(
            "signoff_handoff_takeover_seconds",
            "Time from a hand-off to a person opening to a person taking it over.",
            buckets=DECISION_BUCKETS,
            registry=r,
        )
        # Moved by the transitions each process commits: summed over processes it is the open count.
        self.handoffs_open = Gauge(
            "signoff_handoffs_open", "Hand-offs waiting for a person or owned by one.", registry=r
        )
        self.handoffs_handled = Counter(
            "signoff_handoffs_handled", "Hand-offs a person handed back or closed, by staff id.", ["staff"], registry=r
        )

    def _gate_metrics(self, r: CollectorRegistry) -> None:
        self.gate = Counter("signoff_gate_decisions", "Gate decisions, by decision.", ["decision"], registry=r)
        self.refusals = Counter("signoff_gate_refusals", "Gate rejections, by reason.", ["reason"], registry=r)
        self.limit_refusals = Counter(
            "signoff_limit_refusals",
            "Refusals by a per-principal limit of the policy, by the limit's name.",
            ["limit"],
            registry=r,
        )
        self.intercepts = Counter("signoff_dedup_intercepts", "Repeated identical calls intercepted.", registry=r)
        self.confirmations = Counter("signoff_confirmations", "Confirmation transitions.", ["outcome"], registry=r)
        self.approvals = Counter("signoff_approvals", "Approval transitions.", ["outcome"], registry=r)
        self.approval_wait = Histogram(
            "signoff_approval_decision_seconds",
            "Time from an approval's request to its decision or expiry.",
            ["outcome"],
            buckets=DECISION_BUCKETS,
            registry=r,
        )
        self.tool_calls = Counter("signoff_tool_calls", "Tool proposals judged, by tool.", ["tool"], registry=r)
        self.tool_errors = Counter(
            "signoff_tool_errors", "Tool calls that ended in an error result, by tool.", ["tool"], registry=r
        )
        self.executions = Counter("signoff_executions", "Actions executed, by tool.", ["tool"], registry=r)
        self.refund_minor = Counter(
            "signoff_refund_amount_minor", "Money refunded, in minor units.", ["currency"], registry=r
        )
        self.refund_hist = Histogram(
            "signoff_refund_amount_minor_per_refund",
            "Refund sizes in minor units.",
            ["currency"],
            buckets=REFUND_BUCKETS,
            registry=r,
        )

    def _latency_and_cost_metrics(self, r: CollectorRegistry) -> None:
        self.turn_latency = Histogram(
            "signoff_turn_latency_seconds", "Wall time of one turn.", ["channel"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.turn_tokens = Histogram(
            "signoff_turn_tokens",
            "Model tokens used by one turn.",
            buckets=(500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 200000),
            registry=r,
        )
        self.turn_cost = Histogram(
            "signoff_turn_cost_usd", "Estimated model cost of one turn.", buckets=COST_BUCKETS, registry=r
        )
        self.model_latency = Histogram(
            "signoff_model_latency_seconds",
            "Latency of one model call.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.model_tokens = Counter("signoff_model_tokens", "Model tokens, by kind.", ["model", "kind"], registry=r)
        self.model_cost = Counter("signoff_model_cost_usd", "Estimated model cost in USD.", ["model"], registry=r)
        self.model_errors = Counter(
            "signoff_model_errors", "Failed model calls, by reason.", ["model", "reason"], registry=r
        )
        self.breaker_state = Gauge(
            "signoff_breaker_state", "Circuit breaker: 0 closed, 1 half-open, 2 open.", ["breaker"], registry=r
        )
        self.feedback = Counter(
            "signoff_feedback", "Feedback buttons clicked under answers.", ["vote", "channel"], registry=r
        )
        self.audit_suppressed = Counter(
            "signoff_audit_suppressed",
            "Clicks answered but not audited again: the person was past their audit budget (agent/audit_budget.py).",
            ["kind", "channel"],
            registry=r,
        )
        self.breaker_trips = Counter(
            "signoff_breaker_trips", "Times a circuit breaker opened.", ["breaker"], registry=r
        )
        # Read from the database at each scrape (bot.server): it only ever grows, so the alert
        # SignoffAuditHeadWentDown fires when a truncated log had its head rewritten.
        self.audit_head_seq = Gauge(
            "signoff_audit_head_seq", "The audit chain's head seq as stored, read at scrape time.", registry=r
        )
        self.ledger_stuck = Gauge(
            "signoff_ledger_stuck", "Ledger rows executing longer than the reconciliation bound.", registry=r
        )
        self.reconciliations = Counter(
            "signoff_reconciliations", "Stuck ledger rows reconciled, by result.", ["result"], registry=r
        )
        self.db_errors = Counter("signoff_database_errors", "Database outages met, by kind.", ["kind"], registry=r)
        self._rollout_metrics(r)

    def _rollout_metrics(self, r: CollectorRegistry) -> None:
        """The rollout report's figures per unit (channel, kind, tool), read at scrape time at most
        every few minutes (``agent.rollout_metrics``)."""
        unit = ["channel", "kind", "tool"]
        self.rollout_proposed = Gauge(
            "signoff_rollout_proposed", "Shadow proposals in the report window, per unit.", unit, registry=r
        )
        self.rollout_agreement = Gauge(
            "signoff_rollout_agreement",
            "Share of shadow proposals staff then carried out with the same arguments (0..1), per unit.",
            unit,
            registry=r,
        )
        self.rollout_misses = Gauge(
            "signoff_rollout_misses",
            "Staff actions in shadow conversations the agent proposed nothing for.",
            unit,
            registry=r,
        )
        self.rollout_false_actions = Gauge(
            "signoff_rollout_false_actions",
            "Shadow proposals staff did something else about, or nothing, within the matching window.",
            unit,
            registry=r,
        )
        #: When the rollout gauges were last computed (``time.monotonic``), ``None``: never.
        self.rollout_read_at: float | None = None

    # -- audit events ------------------------------------------------------------------
    def observe(self, events: list[Any]) -> None:
        """Map committed audit events (``storage.audit.AuditEvent``) to metrics."""
        for e in events:
            handler = self._HANDLERS.get(e.kind) or self._prefix_handler(e.kind)
            if handler is not None:
                handler(self, e)

    def _prefix_handler(self, kind: str) -> Callable[[Metrics, Any], None] | None:
        head, _, _ = kind.partition(".")
        return {
            "gate": Metrics._on_gate,
            "confirmation": Metrics._on_confirmation,
            "approval": Metrics._on_approval,
            "ledger": Metrics._on_ledger,
        }.get(head)

    def _on_ledger(self, e: Any) -> None:
        # Announced, never stored, by agent/reconcile.py: one pass's count, one row's result.
        if e.kind == "ledger.stuck":
            self.ledger_stuck.set(int(e.data.get("count", 0)))
        elif e.kind == "ledger.reconciled":
            self.reconciliations.labels(_label(e.data.get("result"))).inc()

    def record_db_fault(self, kind: str) -> None:
        """A database outage of ``kind`` (``storage.faults.FaultKind``) was met."""
        self.db_errors.labels(_label(kind)).inc()

    def _on_run(self, e: Any) -> None:
        self.conversations.inc()

    def _on_turn(self, e: Any) -> None:
        outcome = _label(e.data.get("outcome"))
        channel = _label(e.data.get("channel"))
        self.turns.labels(outcome, channel).inc()
        if outcome in ("answered", "finished") and not e.data.get("escalated"):
            self.contained.labels(channel).inc()
        if e.latency_ms is not None:
            self.turn_latency.labels(channel).observe(float(e.latency_ms) / 1000)
        tokens = int(e.data.get("input_tokens") or 0) + int(e.data.get("output_tokens") or 0)
        self.turn_tokens.observe(tokens)
        if e.run_id:
            self.turn_cost.observe(self._turn_cost.pop(e.run_id, 0.0))

    def _on_audit_suppressed(self, e: Any) -> None:
        self.audit_suppressed.labels(_label(e.data.get("kind")), _label(e.data.get("channel"))).inc()

    def _on_feedback(self, e: Any) -> None:
        self.feedback.labels(_label(e.data.get("vote")), _label(e.data.get("channel"))).inc()

    def _on_escalation(self, e: Any) -> None:
        self.escalations.labels(_label(e.data.get("reason"))).inc()

    def _on_handoff(self, e: Any) -> None:
        step = e.kind.partition(".")[2]
        if step == "opened":
            self.handoffs_open.inc()
        elif step == "taken" and not e.data.get("previous_owner"):
            self.handoff_takeover.observe(max(float(e.data.get("waited_s") or 0.0), 0.0))
        elif step in ("returned", "closed"):
            self.handoffs_open.dec()
            if e.data.get("owner"):
                self.handoffs_handled.labels(_label(e.data["owner"])).inc()

    def _on_gate(self, e: Any) -> None:
        decision = e.kind.partition(".")[2]
        tool = self._tool(e.tool)
        self.gate.labels(_label(decision)).inc()
        self.tool_calls.labels(tool).inc()
        if decision == "reject":
            reason = _label(e.data.get("reason"))
            self.refusals.labels(reason).inc()
            if reason in GATE_LIMITS:
                self.limit_refusals.labels(GATE_LIMITS[reason]).inc()
        if decision == "intercept":
            self.intercepts.inc()
        if e.data.get("is_error"):
            self.tool_errors.labels(tool).inc()

    def _on_limit(self, e: Any) -> None:
        self.limit_refusals.labels(_label(e.data.get("limit"))).inc()

    def _on_execution(self, e: Any) -> None:
        self.executions.labels(self._tool(e.tool)).inc()
        if e.tool == "issue_refund" and e.data.get("amount_minor") is not None:
            currency = _label(str(e.data.get("currency", "")).lower()).upper()
            amount = int(e.data["amount_minor"])
            self.refund_minor.labels(currency).inc(amount)
            self.refund_hist.labels(currency).observe(amount)

    def _on_confirmation(self, e: Any) -> None:
        self.confirmations.labels(_label(e.kind.partition(".")[2])).inc()

    def _on_approval(self, e: Any) -> None:
        outcome = _label(e.kind.partition(".")[2])
        self.approvals.labels(outcome).inc()
        approval_id = e.data.get("approval_id")
        if not isinstance(approval_id, str):
            return
        # Time to decision is measured where the request was seen: the request and its
        # decision pass through one process's observer (one serve, or a test).
        if outcome == "requested":
            self._requested[approval_id] = e.ts
            while len(self._requested) > 10_000:
                self._requested.popitem(last=False)
        elif outcome in _FINAL_APPROVAL and approval_id in self._requested:
            waited = (e.ts - self._requested.pop(approval_id)).total_seconds()
            self.approval_wait.labels(outcome).observe(max(waited, 0.0))

    _HANDLERS: dict[str, Callable[[Metrics, Any], None]] = {
        "run.started": _on_run,
        "turn.ended": _on_turn,
        "escalation": _on_escalation,
        "handoff.opened": _on_handoff,
        "handoff.taken": _on_handoff,
        "handoff.returned": _on_handoff,
        "handoff.closed": _on_handoff,
        "execution.succeeded": _on_execution,
        "feedback": _on_feedback,
        "audit.suppressed": _on_audit_suppressed,
        "limit.refused": _on_limit,
    }

    def _tool(self, name: str | None) -> str:
        if not name:
            return "none"
        if self._tools:
            return name if name in self._tools else "unknown"
        return _label(name)

    # -- model calls -----------------------------------------------------------------
    def record_model_call(self, model: str, seconds: float, usage: Usage, run_id: str | None) -> None:
        """One successful model call: latency, tokens by kind, estimated cost."""
        m = _label(model)
        self.model_latency.labels(m).observe(seconds)
        for kind, n in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_input_tokens),
            ("cache_write", usage.cache_creation_input_tokens),
        ):
            if n:
                self.model_tokens.labels(m, kind).inc(n)
        cost = estimate_cost(model, usage)
        self.model_cost.labels(m).inc(cost)
        if run_id:
            self._turn_cost[run_id] = self._turn_cost.get(run_id, 0.0) + cost
            while len(self._turn_cost) > 10_000:
                self._turn_cost.popitem(last=False)

    def record_model_error(self, model: str, reason: str) -> None:
        self.model_errors.labels(_label(model), _label(reason)).inc()

    # -- circuit breaker ----------------------------------------------------------------
    def breaker_callback(self, name: str = "model") -> Callable[[str], None]:
        """An ``on_change(state)`` hook for ``CircuitBreaker``: state gauge and trip counter."""
        self.breaker_state.labels(name).set(0)

        def on_change(state: str) -> None:
            self.breaker_state.labels(name).set(BREAKER_STATES.get(state, 0))
            if state == "open":
                self.breaker_trips.labels(name).inc()

        return on_change

    # -- exposition ----------------------------------------------------------------------
    content_type = CONTENT_TYPE_LATEST

    def render(self) -> bytes:
        """Everything in the Prometheus text exposition format."""
        return generate_latest(self.registry)


class InstrumentedModel:
    """A :class:`ModelClient` wrapper that records latency, tokens, cost and errors."""

    def __init__(self, model: ModelClient, metrics: Metrics) -> None:
        self.inner = model
        self.metrics = metrics

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        start = time.perf_counter()
        try:
            response = await self.inner.complete(request)
        except ModelUnavailable as exc:
            self.metrics.record_model_error(self.model_name, exc.reason)
            raise
        except Exception as exc:
            self.metrics.record_model_error(self.model_name, type(exc).__name__.lower())
            raise
        self.metrics.record_model_call(
            response.model or self.model_name,
            time.perf_counter() - start,
            response.usage,
            request.metadata.get("run_id"),
        )
        return response


def attach_metrics(services: Services, metrics: Metrics | None = None) -> Metrics:
    """Feed ``services.db``'s committed audit events into ``metrics`` (a new one by default)."""
    metrics = metrics or Metrics(known_tools=services.registry.tools)
    services.db.observe(metrics.observe)
    services.db.fault_listeners.append(metrics.record_db_fault)
    return metrics


def _label(value: Any) -> str:
    text = str(value or "none").lower()
    return text if _LABEL.match(text) else "other"


__all__ = ["InstrumentedModel", "Metrics", "PRICES", "Price", "attach_metrics", "estimate_cost", "price_of"]
