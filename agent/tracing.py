"""OpenTelemetry spans for what the agent does, after the GenAI semantic conventions.

* every model call — ``chat {model}`` (CLIENT), by :class:`TracedModel`: ``gen_ai.operation.name``,
  ``gen_ai.provider.name``, ``gen_ai.request.model``/``.max_tokens``, ``gen_ai.response.model``/
  ``.finish_reasons``, ``gen_ai.usage.input_tokens`` (cached tokens included, as the conventions
  ask), ``.output_tokens``, ``.cache_read.input_tokens``, ``.cache_creation.input_tokens``;
* every tool execution — ``execute_tool {tool}``, by :func:`traced_execution` on ``Executor.run``;
* every gate decision — ``gate {tool}`` with ``signoff.gate.decision``/``.reason``, by
  :func:`traced_judgement` on ``Gatekeeper.judge``;
* every approval transition — ``approval {approve|reject}`` and ``approval expire``, by
  :func:`traced_decision` and :func:`traced_expiry`.

Spans carry ``gen_ai.conversation.id`` and ``signoff.run.id``; the composition root's id
generator (``bot.telemetry``) makes a run's OpenTelemetry trace id the ``trace_id`` the
audit log and the JSON logs already carry.

Only the OpenTelemetry API is used here. Until the composition root installs the SDK and
calls :func:`enable`, each wrapper reads one flag and calls straight through: no span
object, no context switch, so the step cost does not move.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind
from opentelemetry.util.types import AttributeValue

from agent.errors import DecisionError
from agent.llm.base import ModelClient, ModelRequest, ModelResponse

if TYPE_CHECKING:
    from agent.decisions import Decision
    from agent.executor import ExecOutcome

__all__ = [
    "GEN_AI",
    "enable",
    "TracedModel",
    "traced_decision",
    "traced_execution",
    "traced_expiry",
    "traced_judgement",
    "tracing_on",
]

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

_TRACER = trace.get_tracer("signoff")


class GEN_AI:  # noqa: N801 - a namespace of attribute names, spelled as the conventions spell them
    """The GenAI semantic-convention attribute names used here."""

    OPERATION = "gen_ai.operation.name"
    PROVIDER = "gen_ai.provider.name"
    CONVERSATION = "gen_ai.conversation.id"
    REQUEST_MODEL = "gen_ai.request.model"
    REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
    RESPONSE_MODEL = "gen_ai.response.model"
    RESPONSE_ID = "gen_ai.response.id"
    FINISH_REASONS = "gen_ai.response.finish_reasons"
    INPUT_TOKENS = "gen_ai.usage.input_tokens"
    OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
    CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
    CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
    TOOL_NAME = "gen_ai.tool.name"
    TOOL_TYPE = "gen_ai.tool.type"
    ERROR_TYPE = "error.type"


class _Switch:
    # Process-wide, like the tracer provider it mirrors; one attribute read per wrapped call.
    on = False


def enable() -> None:
    """Turn the spans on; the composition root calls this after installing the SDK provider
    (so does any process that configures OpenTelemetry itself)."""
    _Switch.on = True


def tracing_on() -> bool:
    """True once :func:`enable` was called (the SDK's tracer provider is installed)."""
    return _Switch.on


@contextmanager
def _span(name: str, kind: SpanKind, attributes: dict[str, AttributeValue]) -> Iterator[Span]:
    with _TRACER.start_as_current_span(name, kind=kind, attributes=attributes) as span:
        try:
            yield span
        except BaseException as exc:
            span.set_attribute(
                GEN_AI.ERROR_TYPE, getattr(exc, "reason", None) or getattr(exc, "code", None) or type(exc).__qualname__
            )
            raise


def _short(text: Any, limit: int = 64) -> str:
    # Tool names come from the model: bounded so a junk name cannot bloat a span.
    return str(text)[:limit]


# --- model calls ---------------------------------------------------------------------


class TracedModel:
    """A :class:`ModelClient` wrapper: one ``chat {model}`` span per call."""

    def __init__(self, inner: ModelClient, *, provider: str) -> None:
        self.inner = inner
        self.provider = provider

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Call the wrapped model inside a span carrying the request's and the answer's gen_ai facts."""
        if not tracing_on():
            return await self.inner.complete(request)
        model = self.model_name
        attributes: dict[str, AttributeValue] = {
            GEN_AI.OPERATION: "chat",
            GEN_AI.PROVIDER: self.provider,
            GEN_AI.REQUEST_MODEL: model,
            GEN_AI.REQUEST_MAX_TOKENS: request.max_tokens,
            **_ids(request.metadata),
        }
        with _span(f"chat {model}", SpanKind.CLIENT, attributes) as span:
            response = await self.inner.complete(request)
            span.set_attributes(_response_attributes(response))
            return response


def _ids(metadata: dict[str, str]) -> dict[str, AttributeValue]:
    out: dict[str, AttributeValue] = {}
    if metadata.get("conversation_id"):
        out[GEN_AI.CONVERSATION] = metadata["conversation_id"]
    if metadata.get("run_id"):
        out["signoff.run.id"] = metadata["run_id"]
    return out


def _response_attributes(response: ModelResponse) -> dict[str, AttributeValue]:
    u = response.usage
    attributes: dict[str, AttributeValue] = {
        GEN_AI.RESPONSE_MODEL: response.model,
        GEN_AI.FINISH_REASONS: [response.stop_reason],
        GEN_AI.INPUT_TOKENS: u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens,
        GEN_AI.OUTPUT_TOKENS: u.output_tokens,
        GEN_AI.CACHE_READ_TOKENS: u.cache_read_input_tokens,
        GEN_AI.CACHE_CREATION_TOKENS: u.cache_creation_input_tokens,
        "signoff.model.tool_calls": [_short(b.get("name")) for b in response.tool_uses],
    }
    if response.request_id:
        attributes["signoff.model.request_id"] = response.request_id
    return attributes


# --- seams: tool execution, gate, approvals --------------------------------------------


def traced_execution(run: F) -> F:
    """Decorates ``Executor.run(self, tool, args, ctx, *, key, proposal_id, run_id, ...)``."""

    @functools.wraps(run)
    def wrapper(self: Any, tool: Any, args: Any, ctx: Any, **kw: Any) -> Awaitable[Any]:
        if not _Switch.on:
            return run(self, tool, args, ctx, **kw)  # the bare coroutine: no extra frame
        return traced(self, tool, args, ctx, **kw)

    async def traced(self: Any, tool: Any, args: Any, ctx: Any, **kw: Any) -> Any:
        attributes: dict[str, AttributeValue] = {
            GEN_AI.OPERATION: "execute_tool",
            GEN_AI.TOOL_NAME: tool.name,
            GEN_AI.TOOL_TYPE: "function",
            "signoff.tool.kind": tool.meta.kind,
            "signoff.tool.keyed": kw.get("key") is not None,
        }
        for name in ("run_id", "proposal_id"):
            if kw.get(name):
                attributes[f"signoff.{name.replace('_id', '.id')}"] = kw[name]
        with _span(f"execute_tool {tool.name}", SpanKind.INTERNAL, attributes) as span:
            outcome: ExecOutcome = await run(self, tool, args, ctx, **kw)
            span.set_attributes(
                {
                    "signoff.tool.is_error": outcome.is_error,
                    "signoff.tool.deduplicated": outcome.deduplicated,
                    "signoff.tool.needs_human": outcome.needs_human,
                }
            )
            return outcome

    return cast(F, wrapper)


def traced_judgement(judge: F) -> F:
    """Decorates ``Gatekeeper.judge(self, proposed, facts, ctx, ...)``: the gate's decision as a span."""

    @functools.wraps(judge)
    def wrapper(self: Any, p: Any, facts: Any, ctx: Any, **kw: Any) -> Awaitable[Any]:
        if not _Switch.on:
            return judge(self, p, facts, ctx, **kw)  # the bare coroutine: no extra frame
        return traced(self, p, facts, ctx, **kw)

    async def traced(self: Any, p: Any, facts: Any, ctx: Any, **kw: Any) -> Any:
        attributes: dict[str, AttributeValue] = {
            GEN_AI.TOOL_NAME: _short(p.tool),
            GEN_AI.CONVERSATION: facts.conversation_id,
            "signoff.run.id": facts.run_id,
            "signoff.principal.kind": facts.principal.kind,
            "signoff.channel": facts.channel,
            "signoff.gate.step": facts.step,
            "signoff.gate.rejudged": kw.get("approval") is not None,
        }
        with _span(f"gate {_short(p.tool)}", SpanKind.INTERNAL, attributes) as span:
            decision: Decision = await judge(self, p, facts, ctx, **kw)
            span.set_attribute("signoff.gate.decision", decision.tag)
            reason = getattr(decision, "reason", None)
            if reason:
                span.set_attribute("signoff.gate.reason", reason)
            return decision

    return cast(F, wrapper)


def traced_decision(decide: F) -> F:
    """Decorates ``approvals.decide(rt, approval_id, *, decision, actor, ...)``."""

    @functools.wraps(decide)
    def wrapper(rt: Any, approval_id: str, **kw: Any) -> Awaitable[Any]:
        if not _Switch.on:
            return decide(rt, approval_id, **kw)  # the bare coroutine: no extra frame
        return traced(rt, approval_id, **kw)

    async def traced(rt: Any, approval_id: str, **kw: Any) -> Any:
        actor = kw.get("actor")
        attributes: dict[str, AttributeValue] = {
            "signoff.approval.id": approval_id,
            "signoff.approval.decision": str(kw.get("decision")),
            "signoff.approval.expected_version": int(kw.get("expected_version") or 0),
            "signoff.actor.kind": str(getattr(actor, "kind", "")),
            "signoff.approval.edited": kw.get("edited_arguments") is not None,
        }
        with _span(f"approval {_short(kw.get('decision'), 16)}", SpanKind.INTERNAL, attributes) as span:
            try:
                result = await decide(rt, approval_id, **kw)
            except DecisionError as exc:
                span.set_attribute("signoff.approval.refused", exc.code)
                raise
            span.set_attributes(_approval_attributes(result.approval))
            return result

    return cast(F, wrapper)


def traced_expiry(expire: F) -> F:
    """Decorates ``approvals._expire(rt, approval)``: the expiry transition as a span."""

    @functools.wraps(expire)
    def wrapper(rt: Any, approval: Any) -> Awaitable[Any]:
        if not _Switch.on:
            return expire(rt, approval)  # the bare coroutine: no extra frame
        return traced(rt, approval)

    async def traced(rt: Any, approval: Any) -> Any:
        with _span("approval expire", SpanKind.INTERNAL, _approval_attributes(approval)) as span:
            moved = await expire(rt, approval)
            span.set_attribute("signoff.approval.status", "expired" if moved else str(approval.status))
            return moved

    return cast(F, wrapper)


def _approval_attributes(a: Any) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        "signoff.approval.id": a.id,
        "signoff.approval.status": str(a.status),
        "signoff.approval.version": a.version,
        GEN_AI.TOOL_NAME: a.tool,
        GEN_AI.CONVERSATION: a.conversation_id,
        "signoff.run.id": a.run_id,
    }
    if a.decided_at is not None:
        attributes["signoff.approval.wait_s"] = round((a.decided_at - a.created_at).total_seconds(), 3)
    return attributes
