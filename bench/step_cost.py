"""The runtime's own cost per agent step on SQLite (gate, ledger, audit, history).

The model answers instantly (a function model) and the tool does nothing, so
what is measured is signoff's own work per iteration: persisting the proposal
and the assistant message, judging the proposal, executing through the ledger
(for actions), appending the tool result and the audit events. Prints figures;
asserts nothing (targets are compared by people, not by CI timing).

    .venv/bin/python bench/step_cost.py [--steps 400] [--action]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import sandbox.models  # noqa: F401
import storage.models  # noqa: F401
from agent.executor import Executor
from agent.gatekeeper import Gatekeeper
from agent.llm.base import ModelRequest
from agent.llm.testing import FunctionModel, text_block, tool_use_block
from agent.runtime import Runtime
from bot.app import sandbox_services
from sandbox.schema import upgrade
from storage.db import create_database
from tools.context import Principal, ToolContext
from tools.registry import Registry, ToolDef, ToolMeta

PRINCIPAL = Principal(kind="customer", id="C-1", customer_id="C-1")


async def _noop(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return {"ok": True, "n": args["n"]}


def _registry(base: Registry) -> Registry:
    read = ToolDef(
        name="bench_read",
        description="noop read",
        handler=_noop,
        input_schema={
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
            "additionalProperties": False,
        },
        meta=ToolMeta(group="always", kind="read", risk_tier=0, scopes=frozenset({"knowledge:read"})),
    )
    action = replace(
        read,
        name="bench_action",
        description="noop action with a ledger key",
        meta=ToolMeta(group="always", kind="action", risk_tier=1, scopes=frozenset({"knowledge:read"})),
        key=lambda args, ctx: f"bench:{args['n']}",
    )
    return Registry.of([*base.tools.values(), read, action], base.group_blurbs)


async def run(steps: int, action: bool) -> None:
    tmp = Path(tempfile.mkdtemp())
    url = f"sqlite+aiosqlite:///{tmp / 'bench.db'}"
    await upgrade(url)
    db = create_database(url)
    counter = {"n": 0}
    tool = "bench_action" if action else "bench_read"

    def planner(request: ModelRequest) -> Any:
        counter["n"] += 1
        if counter["n"] % 10 == 0:
            return [text_block("done")]
        return [tool_use_block(tool, {"n": counter["n"]})]

    inner = FunctionModel(planner)
    model_time = {"s": 0.0}

    class TimedModel:
        """Subtracts the test model's own time (it sizes the whole request as JSON)."""

        model_name = inner.model_name

        async def complete(self, request: ModelRequest) -> Any:
            t = time.perf_counter()
            try:
                return await inner.complete(request)
            finally:
                model_time["s"] += time.perf_counter() - t

    model = TimedModel()
    services = sandbox_services(db=db, model=model)
    registry = _registry(services.registry)
    policy = services.policy.model_copy(
        update={
            "limits": services.policy.limits.model_copy(
                update={"max_actions_per_run": 10**9, "max_calls_per_tool_per_run": 10**9}
            ),
            "customer": services.policy.customer.model_copy(
                update={"max_actions_per_day": 10**9, "max_model_tokens_per_day": 10**12}
            ),
        }
    )
    services = replace(
        services,
        registry=registry,
        policy=policy,
        gatekeeper=Gatekeeper(
            registry=registry,
            policy=policy,
            confirmations=services.confirmations,
            approvals=services.approvals,
            usage=services.usage,
        ),
        executor=Executor(services.ledger),
    )
    rt = Runtime(services)
    per_step: list[float] = []
    done = 0
    # warm up
    await rt.chat(principal=PRINCIPAL, channel="api", message="warm up")
    while done < steps:
        counter["n"] = counter["n"] - counter["n"] % 10  # 9 tool steps + 1 answer per turn
        t0 = time.perf_counter()
        model_time["s"] = 0.0
        result = await rt.chat(principal=PRINCIPAL, channel="api", message="go")
        elapsed = time.perf_counter() - t0 - model_time["s"]
        per_step.append(elapsed / result.iterations * 1000)
        done += result.iterations
    await db.dispose()
    print(f"{'action' if action else 'read'} steps: {done} over {len(per_step)} turns (SQLite, WAL, file)")
    print(
        f"  runtime cost per step: mean {statistics.mean(per_step):.3f} ms, "
        f"median {statistics.median(per_step):.3f} ms, p95 {sorted(per_step)[int(len(per_step) * 0.95) - 1]:.3f} ms"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--action", action="store_true")
    a = p.parse_args()
    asyncio.run(run(a.steps, a.action))


if __name__ == "__main__":
    main()
