"""Observability: every metric moves when its event happens (a real runtime, a scripted
model, ``render()`` read back), the model wrapper, the breaker hook, and JSON logs."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families

from agent.errors import ModelUnavailable
from agent.llm.base import Message, ModelRequest, Usage
from agent.llm.breaker import BreakerConfig, CircuitBreaker
from agent.llm.testing import FunctionModel, ScriptedModel, text_block, tool_use_block
from agent.metrics import InstrumentedModel, Metrics, attach_metrics, estimate_cost, price_of
from bot.logging import configure_logging
from storage.db import Database
from tests.support import C7, SUP_A, seeded

EVIDENCE = ["refund-policy@7#window"]
REFUND = {"order_id": "O-1042", "amount_minor": 18900, "currency": "USD", "reason_code": "damaged"}


def value(metrics: Metrics, name: str, **labels: str) -> float:
    """A sample's value from the rendered text (0 when absent)."""
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


def script() -> ScriptedModel:
    return ScriptedModel(
        [
            [tool_use_block("get_order", {"order_id": "O-1042"})],
            [tool_use_block("get_order", {"order_id": "O-1042"})],  # intercepted (dedup)
            [tool_use_block("get_order", {"order_id": "O-1050"})],  # tool error: not_found
            [tool_use_block("issue_refund", REFUND)],  # refused: evidence_required
            [tool_use_block("search_knowledge", {"query": "refund window"})],
            [tool_use_block("issue_refund", {**REFUND, "evidence": EVIDENCE})],  # confirmation
            "Shall I refund 189.00 USD? Please confirm.",
            "A supervisor must approve this; it is pending.",  # after confirm
            "Approved and refunded.",  # after resume
            [tool_use_block("escalate_to_human", {"reason": "customer_request", "summary": "wants a person"})],
            "A colleague will follow up.",
        ],
        model_name="claude-sonnet-4-5",
    )


@pytest.fixture
async def driven(db: Database) -> Metrics:
    """A whole canonical flow plus an escalation, observed by one Metrics."""
    h = await seeded(db, script())
    metrics = attach_metrics(h.services)
    rt = h.runtime
    first = await rt.chat(principal=C7, channel="api", message="Refund O-1042 please, it is damaged.")
    confirmed = await rt.confirm(first.pending[0].id, actor=C7, accept=True)
    assert confirmed.approval is not None
    await rt.decide(confirmed.approval.id, expected_version=confirmed.approval.version, decision="approve", actor=SUP_A)
    await rt.resume(confirmed.approval.id)
    await rt.chat(principal=C7, channel="api", message="I want a person")
    return metrics


async def test_conversations_and_turns_are_counted(driven: Metrics) -> None:
    """run.started → conversations; turn.ended → turns by outcome and channel, and containment."""
    assert value(driven, "signoff_conversations_total") == 2
    assert value(driven, "signoff_turns_total", outcome="answered", channel="api") == 4
    assert value(driven, "signoff_contained_turns_total", channel="api") == 3  # the escalated turn is not
    assert value(driven, "signoff_turn_latency_seconds_count", channel="api") == 4
    assert value(driven, "signoff_turn_tokens_count") == 4


async def test_escalations_by_reason(driven: Metrics) -> None:
    assert value(driven, "signoff_escalations_total", reason="customer_request") == 1


async def test_gate_refusals_intercepts_and_tool_errors(driven: Metrics) -> None:
    """gate.reject by reason, gate.intercept as dedup, is_error results by tool."""
    assert value(driven, "signoff_gate_refusals_total", reason="evidence_required") == 1
    assert value(driven, "signoff_dedup_intercepts_total") == 1
    assert value(driven, "signoff_tool_errors_total", tool="get_order") == 1
    assert value(driven, "signoff_tool_errors_total", tool="issue_refund") == 1
    assert value(driven, "signoff_gate_decisions_total", decision="confirmation") == 1
    assert value(driven, "signoff_tool_calls_total", tool="get_order") == 3


async def test_confirmations_and_approvals_by_outcome(driven: Metrics) -> None:
    assert value(driven, "signoff_confirmations_total", outcome="requested") == 1
    assert value(driven, "signoff_confirmations_total", outcome="confirmed") == 1
    assert value(driven, "signoff_approvals_total", outcome="requested") == 1
    assert value(driven, "signoff_approvals_total", outcome="approved") == 1
    assert value(driven, "signoff_approvals_total", outcome="executed") == 1


async def test_approval_time_to_decision_is_observed_by_outcome(driven: Metrics) -> None:
    """From approval.requested to its decision: one sample, labelled with the outcome."""
    assert value(driven, "signoff_approval_decision_seconds_count", outcome="approved") == 1
    assert value(driven, "signoff_approval_decision_seconds_sum", outcome="approved") >= 0
    assert value(driven, "signoff_approval_decision_seconds_count", outcome="rejected") == 0


async def test_refund_amounts(driven: Metrics) -> None:
    """execution.succeeded of issue_refund adds minor units by currency and a histogram sample."""
    assert value(driven, "signoff_refund_amount_minor_total", currency="USD") == 18900
    assert value(driven, "signoff_refund_amount_minor_per_refund_count", currency="USD") == 1
    assert value(driven, "signoff_refund_amount_minor_per_refund_bucket", currency="USD", le="20000.0") == 1
    assert value(driven, "signoff_executions_total", tool="issue_refund") == 1


async def test_instrumented_model_records_latency_tokens_and_cost() -> None:
    """Each call adds latency, tokens by kind and cost; the cost of a turn is observed at turn end."""
    metrics = Metrics()
    model = InstrumentedModel(ScriptedModel(["hi"], model_name="claude-sonnet-4-5"), metrics)
    request = ModelRequest(
        system="s", messages=[Message(role="user", content=[text_block("x")])], tools=[], metadata={"run_id": "run_1"}
    )
    response = await model.complete(request)
    assert model.model_name == "claude-sonnet-4-5"
    assert value(metrics, "signoff_model_latency_seconds_count", model="claude-sonnet-4-5") == 1
    assert value(metrics, "signoff_model_tokens_total", kind="input") == response.usage.input_tokens
    assert value(metrics, "signoff_model_cost_usd_total") == pytest.approx(
        estimate_cost("claude-sonnet-4-5", response.usage)
    )
    from storage.audit import AuditEvent

    metrics.observe(
        [AuditEvent(kind="turn.ended", run_id="run_1", data={"outcome": "answered", "channel": "api"}, latency_ms=12.0)]
    )
    assert value(metrics, "signoff_turn_cost_usd_sum") == pytest.approx(
        estimate_cost("claude-sonnet-4-5", response.usage)
    )


async def test_instrumented_model_counts_errors_by_reason() -> None:
    def boom(_r: ModelRequest) -> str:
        raise ModelUnavailable("down", reason="circuit_open")

    metrics = Metrics()
    model = InstrumentedModel(FunctionModel(boom, model_name="m"), metrics)
    with pytest.raises(ModelUnavailable):
        await model.complete(ModelRequest(system="", messages=[], tools=[]))
    assert value(metrics, "signoff_model_errors_total", model="m", reason="circuit_open") == 1


def test_cost_table_knows_families_and_prices_unknown_models_at_zero() -> None:
    usage = Usage(
        input_tokens=1_000_000,
        output_tokens=1_000_000,
        cache_read_input_tokens=1_000_000,
        cache_creation_input_tokens=1_000_000,
    )
    assert estimate_cost("claude-sonnet-4-5", usage) == pytest.approx(3 + 15 + 0.3 + 3.75)
    assert price_of("claude-3-5-haiku-latest") is not None and price_of("llama3") is None
    assert estimate_cost("llama3", usage) == 0.0


async def test_breaker_callback_sets_state_and_counts_trips() -> None:
    """on_change exposes the state as a gauge and each opening as a trip."""
    now = [0.0]
    metrics = Metrics()
    breaker = CircuitBreaker(
        BreakerConfig(failure_threshold=1, cooldown_s=10),
        name="anthropic",
        clock=lambda: now[0],
        on_change=metrics.breaker_callback("anthropic"),
    )
    assert value(metrics, "signoff_breaker_state", breaker="anthropic") == 0

    async def fail() -> None:
        raise RuntimeError("503")

    with pytest.raises(RuntimeError):
        await breaker.call(fail)
    assert value(metrics, "signoff_breaker_state", breaker="anthropic") == 2
    assert value(metrics, "signoff_breaker_trips_total", breaker="anthropic") == 1
    now[0] = 11.0

    async def ok() -> str:
        return "ok"

    await breaker.call(ok)
    assert value(metrics, "signoff_breaker_state", breaker="anthropic") == 0


def test_each_metrics_has_its_own_registry() -> None:
    """No global state: two Metrics never share counters."""
    a, b = Metrics(), Metrics()
    a.intercepts.inc()
    assert value(a, "signoff_dedup_intercepts_total") == 1 and value(b, "signoff_dedup_intercepts_total") == 0
    assert a.content_type.startswith("text/plain")


def test_unknown_tool_names_do_not_explode_label_cardinality() -> None:
    from storage.audit import AuditEvent

    metrics = Metrics(known_tools={"get_order"})
    metrics.observe([AuditEvent(kind="gate.reject", tool="x" * 60, data={"reason": "unknown_tool", "is_error": True})])
    assert value(metrics, "signoff_tool_errors_total", tool="unknown") == 1


def test_json_logs_carry_bound_context_and_stdlib_records() -> None:
    """configure_logging routes stdlib logging through structlog as JSON with contextvars merged."""
    buf = io.StringIO()
    configure_logging(json=True, level="INFO", stream=buf)
    structlog.contextvars.bind_contextvars(trace_id="t-1", run_id="run_1", conversation_id="conv_1")
    try:
        logging.getLogger("signoff.test").info("hello %s", "world")
        structlog.get_logger("signoff.test").warning("refund", amount_minor=100)
        logging.getLogger("signoff.test").debug("hidden")
    finally:
        structlog.contextvars.clear_contextvars()
        root = logging.getLogger()
        for h in [h for h in root.handlers if h.get_name() == "signoff.structlog"]:
            root.removeHandler(h)
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert [line["event"] for line in lines] == ["hello world", "refund"]
    assert all(line["trace_id"] == "t-1" and line["conversation_id"] == "conv_1" for line in lines)
    assert lines[0]["logger"] == "signoff.test" and lines[1]["amount_minor"] == 100 and lines[1]["level"] == "warning"
