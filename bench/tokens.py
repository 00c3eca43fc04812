"""Input tokens per conversation over the bundled eval suite, against a naive baseline.

Every case of every bundled suite (``signoff eval``'s cases, one run each) is played by its
own offline model (the case's script, the demo planner or the compromised model), but each
model step also goes out over HTTP through the real ``AnthropicClient`` to the strict local
Anthropic fake, which accounts the prompt cache as the API does (breakpoints, 20-block
lookback, the model's minimum cacheable length, 5-minute life): the figures are the fake's
``usage``. The same step is sent a second time, to a second fake, as a naive client would
send it: every tool of the catalogue on every request, no cache breakpoint. Both fakes answer
with the offline model's reply, so both conversations are the same.

Reported per conversation (case): uncached input tokens, cache writes, cache reads, and
the naive baseline's input tokens (all uncached). Target: at least 40 % fewer uncached input
tokens than the baseline. With the conversation's last block marked, the API counts the
whole prompt as read or written, so "uncached" alone is 0; the figures that say more are
uncached + writes (tokens processed at full price or above) and the cost-weighted input
(writes at 1.25x, reads at 0.1x the base price, as the API bills the 5-minute cache).

``--breakpoints system`` sends only the system breakpoint (signoff's requests before the
conversation breakpoint was added), for the before/after figure.

    .venv/bin/python bench/tokens.py [--model claude-sonnet-4-5] [--suite support ...]
        [--breakpoints system|conversation]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.evaluation.fixtures import TemplateStore, build_services  # noqa: E402
from agent.evaluation.models import effective_model, model_for  # noqa: E402
from agent.evaluation.player import Player  # noqa: E402
from agent.evaluation.runner import load_suites  # noqa: E402
from agent.llm.anthropic import AnthropicClient, AnthropicConfig  # noqa: E402
from agent.llm.base import ModelClient, ModelRequest, ModelResponse, Usage  # noqa: E402
from agent.policy import load_policy  # noqa: E402
from agent.runtime import Runtime  # noqa: E402
from bench.common import environment, summary, write_result  # noqa: E402
from tests.fakes.anthropic_api import FakeAnthropicAPI  # noqa: E402
from tools.catalogue import build_registry  # noqa: E402
from tools.registry import ToolSpec  # noqa: E402


class Relay:
    """The fakes' responder: the reply the offline model gave for this step."""

    def __init__(self) -> None:
        self.next: list[dict[str, Any]] = []

    def __call__(self, _body: dict[str, Any]) -> dict[str, Any]:
        return self.next[0]


class Tee:
    """A ModelClient: the offline model decides; the step goes to the fake as signoff sends it
    (its usage is the answer's) and to a second fake as the naive client would."""

    def __init__(
        self, brain: ModelClient, relay: Relay, ours: AnthropicClient, naive: AnthropicClient, tools: list[ToolSpec]
    ) -> None:
        self.brain, self.relay, self.ours, self.naive, self.tools = brain, relay, ours, naive, tools
        self.usage = Usage()
        self.naive_usage = Usage()
        self.requests = 0
        self.rejected = 0

    @property
    def model_name(self) -> str:
        return self.ours.model_name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        decided = await self.brain.complete(request)
        self.relay.next = [{"content": decided.content, "stop_reason": decided.stop_reason}]
        answer = await self.ours.complete(request)
        naive = await self.naive.complete(replace(request, tools=self.tools))
        self.requests += 1
        self.usage += answer.usage
        self.naive_usage += naive.usage
        return answer


def system_breakpoint_only() -> None:
    """Make the client send only the system breakpoint (what it sent before the conversation one)."""
    from agent.llm import anthropic as adapter

    full = adapter.build_params

    def build(request: ModelRequest, **kw: Any) -> dict[str, Any]:
        params = full(request, **kw)
        for message in params["messages"]:
            for block in message["content"]:
                block.pop("cache_control", None)
        return params

    adapter.build_params = build  # type: ignore[assignment]


def naive_tools() -> list[ToolSpec]:
    """Every tool of the catalogue, ``load_tools`` saying all groups are loaded."""
    specs = [t.spec() for t in build_registry().tools.values()]
    return [
        ToolSpec(name=s.name, description=s.description + "\nAll groups are loaded.", input_schema=s.input_schema)
        if s.name == "load_tools"
        else s
        for s in specs
    ]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.breakpoints == "system":
        system_breakpoint_only()
    policy = load_policy(None)
    relay = Relay()
    tools = naive_tools()
    rows: list[dict[str, Any]] = []
    epoch = datetime.now(UTC).replace(microsecond=0)
    async with (
        FakeAnthropicAPI(relay, min_cacheable_tokens=None) as fake,
        FakeAnthropicAPI(relay, min_cacheable_tokens=None) as naive_fake,
    ):
        ours = AnthropicClient(AnthropicConfig(model=args.model, api_key="bench", base_url=fake.base_url))
        naive = AnthropicClient(
            AnthropicConfig(model=args.model, api_key="bench", base_url=naive_fake.base_url, prompt_cache=False)
        )
        with tempfile.TemporaryDirectory(prefix="signoff-tokens-") as tmp:
            templates = TemplateStore(workdir=Path(tmp), epoch=epoch)
            lane = templates.lane()
            for suite in load_suites(args.suite):
                for case in suite.cases:
                    kind = effective_model("scripted", suite, case)
                    tee = Tee(model_for(kind, case), relay, ours, naive, tools)
                    template = await templates.template(case.store)
                    db = await lane.reset(template)
                    clock = templates.clock_for(case.store)
                    services = build_services(db=db, model=tee, clock=clock, policy=policy)  # type: ignore[arg-type]
                    staff = {s.id: s.role for s in template.before.staff}
                    await Player(Runtime(services), case, clock, staff).play()
                    if tee.requests:
                        rows.append(_row(suite.suite, case.id, kind, tee))
            await lane.close()
        await ours.aclose()
        await naive.aclose()
        rejected = sum(1 for r in fake.requests if r.status != 200) + sum(
            1 for r in naive_fake.requests if r.status != 200
        )
    return _figures(rows, args, rejected)


def _row(suite: str, case: str, kind: str, tee: Tee) -> dict[str, Any]:
    u, n = tee.usage, tee.naive_usage
    return {
        "suite": suite,
        "case": case,
        "model": kind,
        "requests": tee.requests,
        "uncached": u.input_tokens,
        "cache_write": u.cache_creation_input_tokens,
        "cache_read": u.cache_read_input_tokens,
        "naive_uncached": n.input_tokens + n.cache_creation_input_tokens + n.cache_read_input_tokens,
    }


def _figures(rows: list[dict[str, Any]], args: argparse.Namespace, rejected: int) -> dict[str, Any]:
    def per(key: str) -> dict[str, float]:
        return summary([float(r[key]) for r in rows])

    uncached = sum(r["uncached"] for r in rows)
    written = sum(r["cache_write"] for r in rows)
    read = sum(r["cache_read"] for r in rows)
    naive = sum(r["naive_uncached"] for r in rows)
    return {
        "model": args.model,
        "breakpoints": args.breakpoints,
        "conversations": len(rows),
        "model_requests": sum(r["requests"] for r in rows),
        "requests_rejected_by_fake": rejected,
        "per_conversation": {
            "uncached": per("uncached"),
            "cache_write": per("cache_write"),
            "cache_read": per("cache_read"),
            "naive_uncached": per("naive_uncached"),
        },
        "totals": {
            "uncached": uncached,
            "cache_write": written,
            "cache_read": read,
            "naive_uncached": naive,
        },
        "uncached_saving_vs_naive": 1 - uncached / naive,
        "uncached_plus_writes_saving_vs_naive": 1 - (uncached + written) / naive,
        "cost_weighted_saving_vs_naive": 1 - (uncached + 1.25 * written + 0.1 * read) / naive,
        "median_case_saving": statistics.median(1 - r["uncached"] / r["naive_uncached"] for r in rows),
        "cases": rows,
    }


def report(f: dict[str, Any]) -> None:
    p = f["per_conversation"]
    print(
        f"tokens: {f['conversations']} conversations, {f['model_requests']} model requests,"
        f" model {f['model']}, breakpoints {f['breakpoints']}"
    )
    for key, label in (
        ("uncached", "uncached input"),
        ("cache_write", "cache writes"),
        ("cache_read", "cache reads"),
        ("naive_uncached", "naive (all tools, no cache)"),
    ):
        print(f"  {label:28} per conversation median {p[key]['median']:8.0f}  mean {p[key]['mean']:8.0f}")
    print(
        f"  uncached input vs naive: {f['uncached_saving_vs_naive'] * 100:.1f}% fewer (target >= 40%);"
        f" counting cache writes too: {f['uncached_plus_writes_saving_vs_naive'] * 100:.1f}% fewer;"
        f" median case {f['median_case_saving'] * 100:.1f}%"
    )
    print(
        "  cost-weighted input (writes 1.25x, reads 0.1x) vs naive:"
        f" {f['cost_weighted_saving_vs_naive'] * 100:.1f}% less"
    )
    if f["requests_rejected_by_fake"]:
        print(f"  requests the fake rejected: {f['requests_rejected_by_fake']}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="claude-sonnet-4-5", help="sets the minimum cacheable length")
    p.add_argument("--suite", action="append", default=[], help="a bundled suite (default: all)")
    p.add_argument("--breakpoints", choices=["conversation", "system"], default="conversation")
    args = p.parse_args()
    figures = asyncio.run(run(args))
    report(figures)
    figures["environment"] = environment()
    write_result("tokens" if args.breakpoints == "conversation" else "tokens_system_breakpoint_only", figures)


if __name__ == "__main__":
    main()
