"""``signoff eval``: run suites k times each on fresh stores and report pass^k.

Each (case, run) gets its own SQLite file copied from a migrated, seeded
template, its own clock and its own model instance, so runs are independent
and can overlap. Exit code 1 when any case fails or any harmful outcome occurs.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.errors import ConfigError
from agent.evaluation.fixtures import Template, TemplateStore, build_services, open_database
from agent.evaluation.judge import DIMENSIONS, RunVerdict, judge
from agent.evaluation.models import OFFLINE, effective_model, model_for, real_model
from agent.evaluation.player import Player, observe
from agent.evaluation.report import CaseReport, Report
from agent.evaluation.suite import Case, Suite, SuiteError, load_suite, resolve_suites
from agent.llm.base import ModelClient
from agent.policy import Policy, load_policy
from agent.runtime import Runtime


@dataclass(frozen=True, kw_only=True)
class EvalOptions:
    """How to run: which model, how many runs per case, how many runs at once."""

    model: str = "scripted"
    runs: int = 3
    concurrency: int = 8
    policy: Policy | None = None


async def run_case(templates: TemplateStore, suite: Suite, case: Case, *, kind: str, policy: Policy,
                   real: ModelClient | None = None) -> RunVerdict:
    """One run of one case on a private copy of its template store."""
    template: Template = await templates.template(case.store)
    path = templates.copy(template)
    db = open_database(path)
    clock = templates.clock_for(case.store)
    start = clock.now
    services = build_services(db=db, model=model_for(kind, case, real=real), clock=clock, policy=policy)  # type: ignore[arg-type]
    rt = Runtime(services)
    try:
        played = await Player(rt, case, clock, {s.id: s.role for s in template.before.staff}).play()
        observed = await observe(rt, template.before)
        return judge(case, kind, played, observed, policy=policy, registry=services.registry, start=start)
    finally:
        await db.dispose()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


async def run_suites(suites: list[Suite], options: EvalOptions, *, settings: Any = None,
                     workdir: Path | None = None) -> Report:
    """Every case of every suite, ``options.runs`` times each."""
    policy = options.policy or load_policy(getattr(settings, "signoff_policy_file", None))
    real = real_model(options.model, settings) if options.model not in OFFLINE else None
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="signoff-eval-", dir=workdir) as tmp:
        templates = TemplateStore(workdir=Path(tmp), epoch=datetime.now(UTC).replace(microsecond=0))
        gate = asyncio.Semaphore(options.concurrency if real is None else min(options.concurrency, 4))
        jobs = [(suite, case, effective_model(options.model, suite, case)) for suite in suites for case in suite.cases]
        for _suite, case, kind in jobs:
            if kind == "scripted" and not any(t.model for t in case.turns):
                raise ConfigError(f"case {case.id} has no scripted model turns; use --model demo or compromised")

        async def one(suite: Suite, case: Case, kind: str) -> RunVerdict:
            async with gate:
                return await run_case(templates, suite, case, kind=kind, policy=policy, real=real)

        verdicts = await asyncio.gather(*(one(s, c, k) for s, c, k in jobs for _ in range(options.runs)))
    cases = tuple(CaseReport(suite=s.suite, suite_file=s.source, case=c.id, model=k,
                             runs=tuple(verdicts[i * options.runs:(i + 1) * options.runs]))
                  for i, (s, c, k) in enumerate(jobs))
    return Report(model=options.model, k=options.runs, cases=cases, seconds=time.perf_counter() - started)


def load_suites(names: list[str]) -> list[Suite]:
    return [load_suite(p) for p in resolve_suites(names)]


async def run_cli(*, suites: list[str], model: str, runs: int, json_out: Path | None, settings: Any = None,
                  record: Path | None = None, replay: Path | None = None) -> int:
    """The ``signoff eval`` command: table on stdout, JSON with ``--json``; 1 when anything fails.

    With ``json_out`` the run's tool selections are also written next to it as
    ``<json_out>.traces.jsonl`` (or to ``record``) for :func:`agent.evaluation.replay.replay`.
    """
    if replay is not None:
        from agent.evaluation.replay import replay as do_replay

        return await do_replay(replay, model=model, settings=settings)
    if runs < 1:
        print("signoff eval: --runs must be at least 1", file=sys.stderr)
        return 2
    try:
        loaded = load_suites(suites)
        report = await run_suites(loaded, EvalOptions(model=model, runs=runs), settings=settings)
    except SuiteError as exc:
        print("signoff eval: invalid suite", file=sys.stderr)
        for line in exc.errors[:30]:
            print(f"  {line}", file=sys.stderr)
        return 2
    print(report.table())
    if json_out is not None:
        report.write_json(json_out)
        record = record or json_out.with_suffix(".traces.jsonl")
        print(f"report written to {json_out}")
    if record is not None:
        report.write_traces(record)
        print(f"tool selections written to {record} (replay them with another model or prompt)")
    return report.exit_code


__all__ = ["DIMENSIONS", "EvalOptions", "load_suites", "run_case", "run_cli", "run_suites"]
