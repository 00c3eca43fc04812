"""Tracing: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, the canonical refund conversation exports
GenAI-convention spans (model calls, tool calls, gate decisions, approval transitions) over
OTLP to a local fake collector, on the run's own trace id; without it nothing is installed
and nothing leaves the process."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.semconv._incubating.attributes import error_attributes, gen_ai_attributes

from agent.tracing import GEN_AI, tracing_on
from bot.app import create_app
from bot.settings import load_settings
from sandbox.schema import upgrade
from tests.fakes import scripted
from tests.fakes.anthropic_api import FakeAnthropicAPI, text_turn, tool_turn
from tests.fakes.otlp_collector import ExportedSpan, FakeCollector
from tests.support import C7, scrubbed_env
from tests.test_loop_support import BIG_REFUND, SEARCH

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "tracing" / "canonical_driver.py"
MODEL = "claude-sonnet-4-5"
CLIENT, INTERNAL = 3, 1  # OTLP SpanKind values


def canonical_responder() -> Any:
    return scripted(
        tool_turn("get_order", {"order_id": "O-1042"}),
        tool_turn("search_knowledge", SEARCH),
        tool_turn("issue_refund", BIG_REFUND, text="The order was delivered; checking the refund."),
        text_turn("Shall I refund $189.00 on O-1042? Please confirm."),
        text_turn("Thanks. A supervisor must approve this refund; it is pending, not done yet."),
        text_turn("Good news: your refund of $189.00 was approved and issued."),
    )


def driver_env(db: Path, api: FakeAnthropicAPI, **extra: str) -> dict[str, str]:
    keep = scrubbed_env()
    return {
        **keep,
        "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{db}",
        "SIGNOFF_LLM_PROVIDER": "anthropic",
        "ANTHROPIC_API_KEY": "sk-test",
        "ANTHROPIC_BASE_URL": api.base_url,
        "SIGNOFF_MODEL": MODEL,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        **extra,
    }


async def run_driver(tmp_path: Path, env: dict[str, str]) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(DRIVER),
        str(tmp_path / "signoff.db"),
        env=env,
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()[-3000:]
    summary: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return summary


def ancestors(span: ExportedSpan, by_id: dict[str, ExportedSpan]) -> list[str]:
    chain = []
    while span.parent_span_id in by_id:
        span = by_id[span.parent_span_id]
        chain.append(span.span_id)
    return chain


def one(spans: list[ExportedSpan], name: str) -> ExportedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


async def test_canonical_refund_exports_gen_ai_spans_on_the_runs_trace(tmp_path: Path) -> None:
    """Order lookup → refund over the ceiling → confirm → approve → resume, with an OTLP endpoint:
    six ``chat`` spans with model, tokens in/out/cache; ``execute_tool`` spans per tool; ``gate``
    spans with each decision; the ``approval approve`` transition; SQL statement spans and the
    SDK's own call span beneath ours — all on the trace id the run's audit rows carry, which the
    SDK also propagates to the provider."""
    async with FakeAnthropicAPI(canonical_responder()) as api, FakeCollector() as otlp:
        env = driver_env(
            tmp_path / "signoff.db", api, OTEL_EXPORTER_OTLP_ENDPOINT=otlp.base_url, OTEL_BSP_SCHEDULE_DELAY="50"
        )
        summary = await run_driver(tmp_path, env)
    assert summary["tracing"] is True and summary["provider"] == "TracerProvider"
    run_trace, conv = summary["trace_id"], summary["conversation_id"]
    spans = [s for s in otlp.spans if s.scope == "signoff"]
    assert {s.resource["service.name"] for s in otlp.spans} == {"signoff"}

    chats = [s for s in spans if s.name == f"chat {MODEL}"]
    assert len(chats) == 6 == len(api.requests)
    for s in chats:
        a = s.attributes
        assert s.kind == CLIENT and s.trace_id == run_trace
        assert (a[GEN_AI.OPERATION], a[GEN_AI.PROVIDER], a[GEN_AI.REQUEST_MODEL]) == ("chat", "anthropic", MODEL)
        assert a[GEN_AI.RESPONSE_MODEL] == MODEL and a[GEN_AI.CONVERSATION] == conv
        assert a[GEN_AI.OUTPUT_TOKENS] > 0
        assert a[GEN_AI.INPUT_TOKENS] >= a[GEN_AI.CACHE_READ_TOKENS] + a[GEN_AI.CACHE_CREATION_TOKENS] > 0
    assert chats[0].attributes[GEN_AI.CACHE_CREATION_TOKENS] > 0 and chats[0].attributes[GEN_AI.CACHE_READ_TOKENS] == 0
    assert all(s.attributes[GEN_AI.CACHE_READ_TOKENS] > 0 for s in chats[1:])
    assert [s.attributes[GEN_AI.FINISH_REASONS] for s in chats] == [["tool_use"]] * 3 + [["end_turn"]] * 3
    assert chats[2].attributes["signoff.model.tool_calls"] == ["issue_refund"]

    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    assert [s.attributes[GEN_AI.TOOL_NAME] for s in tools] == ["get_order", "search_knowledge", "issue_refund"]
    assert all(s.attributes[GEN_AI.OPERATION] == "execute_tool" and s.kind == INTERNAL for s in tools)
    assert tools[-1].attributes["signoff.tool.keyed"] is True and tools[-1].attributes["signoff.tool.is_error"] is False

    gates = [
        (s.attributes[GEN_AI.TOOL_NAME], s.attributes["signoff.gate.decision"])
        for s in spans
        if s.name.startswith("gate ")
    ]
    assert gates == [
        ("get_order", "execute"),
        ("search_knowledge", "execute"),
        ("issue_refund", "confirmation"),
        ("issue_refund", "approval"),
        ("issue_refund", "execute"),
    ]
    approval = one(spans, "approval approve")
    assert approval.attributes["signoff.approval.id"] == summary["approval_id"]
    assert approval.attributes["signoff.approval.status"] == "approved"
    assert approval.attributes[GEN_AI.TOOL_NAME] == "issue_refund"
    assert approval.attributes["signoff.approval.wait_s"] >= 0
    by_id = {s.span_id: s for s in otlp.spans}
    [rejudged] = [s for s in spans if s.name == "gate issue_refund" and s.attributes["signoff.gate.rejudged"]]
    assert approval.span_id in ancestors(rejudged, by_id)  # the gate re-run happens inside the decision
    assert approval.span_id in ancestors(tools[-1], by_id)  # and so does the refund
    sdk_calls = [s for s in otlp.spans if s.name == "anthropic.messages.create"]
    assert len(sdk_calls) == 6 and all(by_id[s.parent_span_id].name == f"chat {MODEL}" for s in sdk_calls)
    assert any(s.scope == "opentelemetry.instrumentation.sqlalchemy" for s in otlp.spans)
    assert all(s.trace_id == run_trace for s in spans)
    assert {r.headers["traceparent"].split("-")[1] for r in api.requests} == {run_trace}


async def test_without_an_endpoint_nothing_is_installed_and_nothing_leaves(tmp_path: Path) -> None:
    """No OTEL endpoint: the app has no tracing, the global provider stays the API's proxy, our
    wrappers do not even make no-op spans, and the SDK sends no trace headers."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}"
    await upgrade(url)
    async with FakeAnthropicAPI(scripted(text_turn("Hello!"))) as api:
        settings = load_settings(
            {"SIGNOFF_DATABASE_URL": url, "ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": api.base_url}
        )
        app = await create_app(settings)
        try:
            result = await app.runtime.chat(principal=C7, channel="api", message="hi")
        finally:
            await app.close()
    assert result.outcome == "answered"
    assert app.tracing is None and not tracing_on()
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert len(api.requests) == 1 and "traceparent" not in api.requests[0].headers


def test_attribute_names_are_the_semantic_conventions_own() -> None:
    """Every gen_ai.* name we set is spelled as the semantic-conventions package spells it."""
    ours = {v for k, v in vars(GEN_AI).items() if k.isupper()}
    known = {v for v in vars(gen_ai_attributes).values() if isinstance(v, str) and v.startswith("gen_ai.")}
    assert ours - {error_attributes.ERROR_TYPE} <= known
