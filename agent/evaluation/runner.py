"""``signoff eval``: run suites k times each on fresh stores and report pass^k.

Each (case, run) gets its own SQLite file copied from a migrated, seeded
template, its own clock and its own model instance, so runs are independent.
Runs are CPU-bound Python, so offline models are spread over worker processes
(one event loop and one set of templates each); a real model runs in-process.
Exit code 1 when any case fails or any harmful outcome occurs.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.errors import ConfigError
from agent.evaluation.fixtures import DatasetError, Lane, SandboxShops, Shops, TemplateStore, build_services
from agent.evaluation.judge import DIMENSIONS, RunVerdict, judge
from agent.evaluation.models import OFFLINE, effective_model, model_for, real_model
from agent.evaluation.player import Observed, Played, Player, observe
from agent.evaluation.report import CaseReport, Report
from agent.evaluation.suite import Case, Suite, SuiteError, load_suite, resolve_suites
from agent.llm.base import ModelClient
from agent.policy import Policy, load_policy
from agent.runtime import Runtime
from tools.catalogue import build_registry


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 4))


@dataclass(frozen=True, kw_only=True)
class EvalOptions:
    """How to run: which model, how many runs per case, and how much at once."""

    model: str = "scripted"
    runs: int = 3
    #: Worker processes for offline models (1 = in-process).
    workers: int = 1
    #: Runs in flight at once within a process (each on its own SQLite file).
    lanes: int = 2
    policy: Policy | None = None


@dataclass(frozen=True, kw_only=True)
class Job:
    """One run of one case."""

    index: int
    suite: Suite
    case: Case
    kind: str


@dataclass(frozen=True, kw_only=True)
class CaseRun:
    """Everything one run produced: what was played, the durable state after it, the verdict."""

    played: Played
    observed: Observed
    verdict: RunVerdict


async def play_case(
    templates: TemplateStore,
    lane: Lane,
    case: Case,
    *,
    kind: str,
    policy: Policy,
    real: ModelClient | None = None,
    full_export: bool = False,
    shops: Shops | None = None,
) -> CaseRun:
    """One run of one case on ``lane``, reset to a fresh copy of the case's template store, with
    a fresh shop from ``shops`` (default: the sandbox store in that copy)."""
    template = await templates.template(case.store)
    db = await lane.reset(template)
    clock = templates.clock_for(case.store)
    start = clock.now
    shop = await (shops or SandboxShops()).open(template, db=db, clock=clock, epoch=templates.epoch)
    try:
        model = model_for(kind, case, real=real)  # type: ignore[arg-type]
        services = build_services(db=db, model=model, clock=clock, policy=policy, backend=shop.backend)
        rt = Runtime(services)
        played = await Player(rt, case, clock, {s.id: s.role for s in template.before.staff}).play()
        counts = None if full_export else template.counts
        observed = await observe(rt, shop.before, export=shop.export, counts=counts)
    finally:
        await shop.close()
    verdict = judge(case, kind, played, observed, policy=policy, registry=services.registry, start=start)
    return CaseRun(played=played, observed=observed, verdict=verdict)


async def run_case(
    templates: TemplateStore,
    lane: Lane,
    case: Case,
    *,
    kind: str,
    policy: Policy,
    real: ModelClient | None = None,
    shops: Shops | None = None,
) -> RunVerdict:
    """The verdict of one run of ``case``."""
    return (await play_case(templates, lane, case, kind=kind, policy=policy, real=real, shops=shops)).verdict


async def run_jobs(
    jobs: list[Job],
    *,
    policy: Policy,
    epoch: datetime,
    lanes: int,
    real: ModelClient | None = None,
    shops: Shops | None = None,
) -> list[tuple[int, RunVerdict]]:
    """Run ``jobs`` in this process, ``lanes`` at a time (at most as many as ``shops`` holds),
    on templates built here."""
    if shops is not None:
        lanes = min(lanes, shops.lanes)
    with tempfile.TemporaryDirectory(prefix="signoff-eval-") as tmp:
        templates = TemplateStore(workdir=Path(tmp), epoch=epoch)
        for job in jobs:
            try:
                await templates.template(job.case.store)
            except DatasetError as exc:
                raise SuiteError([f"{job.suite.source}: case {job.case.id}: store: {e}" for e in exc.errors]) from None
        free: asyncio.Queue[Lane] = asyncio.Queue()
        for _ in range(max(1, lanes)):
            free.put_nowait(templates.lane())

        async def one(job: Job) -> tuple[int, RunVerdict]:
            lane = await free.get()
            try:
                verdict = await run_case(
                    templates, lane, job.case, kind=job.kind, policy=policy, real=real, shops=shops
                )
                return job.index, verdict
            finally:
                free.put_nowait(lane)

        try:
            return list(await asyncio.gather(*(one(j) for j in jobs)))
        finally:
            while not free.empty():
                await free.get_nowait().close()


def _worker(jobs: list[Job], policy: Policy, epoch: datetime, lanes: int) -> list[tuple[int, RunVerdict]]:
    """Entry point of a worker process."""
    return asyncio.run(run_jobs(jobs, policy=policy, epoch=epoch, lanes=lanes))


def needed_tools(case: Case) -> set[str]:
    """The tools ``case`` calls (scripted turns) or expects to be proposed or attempted."""
    called = {name for t in case.turns for r in t.model if not isinstance(r, str) for name in r.call or {}}
    return called | {e.tool for e in (*case.expect.tools, *case.expect.attempts)}


def lacking(supported: frozenset[str] | None) -> frozenset[str]:
    """The catalogue's tools a backend supporting ``supported`` does not offer."""
    if supported is None:
        return frozenset()
    return frozenset(build_registry().tools) - frozenset(build_registry(supported).tools)


async def run_suites(
    suites: list[Suite], options: EvalOptions, *, settings: Any = None, shops: Shops | None = None
) -> Report:
    """Every case of every suite, ``options.runs`` times each, on ``shops`` (default: the sandbox).

    A case that needs a tool the shop's backend does not offer is reported as not applicable
    (``Report.not_offered``), never run or counted."""
    policy = options.policy or load_policy(getattr(settings, "signoff_policy_file", None))
    real = real_model(options.model, settings) if options.model not in OFFLINE else None
    started = time.perf_counter()
    epoch = datetime.now(UTC).replace(microsecond=0)
    absent = lacking(shops.supported if shops is not None else None)
    every = [(suite, case, effective_model(options.model, suite, case)) for suite in suites for case in suite.cases]
    missing = {(s.suite, c.id): tuple(sorted(needed_tools(c) & absent)) for s, c, _k in every}
    cases = [(s, c, k) for s, c, k in every if not missing[(s.suite, c.id)]]
    for _suite, case, kind in cases:
        if kind == "scripted" and not any(t.model for t in case.turns):
            raise ConfigError(f"case {case.id} has no scripted model turns; use --model demo or compromised")
    jobs = [
        Job(index=i * options.runs + r, suite=s, case=c, kind=k)
        for i, (s, c, k) in enumerate(cases)
        for r in range(options.runs)
    ]
    workers = 1 if real is not None or shops is not None else min(options.workers, max(1, len(cases) // 4))
    if workers <= 1:
        results = await run_jobs(jobs, policy=policy, epoch=epoch, lanes=options.lanes, real=real, shops=shops)
    else:
        # All runs of a case go to the same worker, so each worker builds only the templates it needs.
        shards = [[j for j in jobs if (j.index // options.runs) % workers == w] for w in range(workers)]
        loop = asyncio.get_running_loop()
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            parts = await asyncio.gather(
                *(loop.run_in_executor(pool, _worker, shard, policy, epoch, options.lanes) for shard in shards)
            )
        results = [r for part in parts for r in part]
    verdicts = dict(results)
    reports = tuple(
        CaseReport(
            suite=s.suite,
            suite_file=s.source,
            case=c.id,
            model=k,
            runs=tuple(verdicts[i * options.runs + r] for r in range(options.runs)),
        )
        for i, (s, c, k) in enumerate(cases)
    )
    return Report(
        model=options.model,
        k=options.runs,
        cases=reports,
        seconds=time.perf_counter() - started,
        not_offered=tuple((suite, case, tools) for (suite, case), tools in missing.items() if tools),
    )


def load_suites(names: list[str]) -> list[Suite]:
    return [load_suite(p) for p in resolve_suites(names)]


async def run_cli(
    *,
    suites: list[str],
    model: str,
    runs: int,
    json_out: Path | None,
    settings: Any = None,
    record: Path | None = None,
    replay: Path | None = None,
    workers: int | None = None,
    shops: Shops | None = None,
) -> int:
    """The ``signoff eval`` command: table on stdout, JSON with ``--json``; 1 when anything fails.
    ``shops``: where each run's shop comes from (default: the sandbox store).

    With ``json_out`` the run's tool selections are also written next to it as
    ``<json_out>.traces.jsonl`` (or to ``record``) for :func:`agent.evaluation.replay.replay`;
    with ``replay`` the recorded cases are played again with ``model`` and the differences printed.
    """
    try:
        if replay is not None:
            from agent.evaluation.replay import replay as do_replay

            return await do_replay(replay, model=model, settings=settings)
        if runs < 1:
            print("signoff eval: --runs must be at least 1", file=sys.stderr)
            return 2
        options = EvalOptions(model=model, runs=runs, workers=workers or default_workers())
        report = await run_suites(load_suites(suites), options, settings=settings, shops=shops)
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
        print(f"tool selections written to {record} (replay them with another model or prompt version)")
    return report.exit_code


__all__ = [
    "DIMENSIONS",
    "CaseRun",
    "EvalOptions",
    "Job",
    "default_workers",
    "load_suites",
    "play_case",
    "run_case",
    "run_cli",
    "run_jobs",
    "run_suites",
]
