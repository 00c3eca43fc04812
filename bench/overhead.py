"""The runtime's own overhead per agent step, through ``Runtime.chat`` with the real catalogue.

A zero-latency model scripts each conversation (the model's own time is measured and
subtracted); every conversation is new and goes through the whole product path:

* ``full``: search_knowledge -> get_order -> issue_refund -> final answer. The refund takes the
  gate's full path: the proposal persisted, scope, ownership, the rules (refundable amount,
  window, daily limits), the evidence citation, the confirmation record, the audit chain.
* ``read``: search_knowledge -> get_order -> final answer.

The sandbox store (the demo dataset) is the shop. Beside it, in the same process and round,
the floor: a plain Python loop with dict messages, direct function calls and one stdlib
sqlite3 INSERT per message with a commit per step (what any agent that persists its
history must at least do).

Reported, per variant and database (SQLite file in WAL; PostgreSQL when
``SIGNOFF_BENCH_PG_URL`` is set): µs for the turn's opening (before the first model call),
for each step separately and per conversation, the ratio to the floor, SQL statements,
transactions, commits and round trips (thread hand-offs on SQLite, client/server exchanges on
PostgreSQL) per step, and a cProfile of where the time goes grouped by library.

    .venv/bin/python bench/overhead.py [--conversations 500] [--rounds 5] [--profile 200] [--no-pg]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sandbox.models  # noqa: E402, F401
import storage.audit  # noqa: E402, F401
import storage.models  # noqa: E402, F401
from agent.llm.base import ModelRequest, ModelResponse, Usage  # noqa: E402
from agent.runtime import Runtime  # noqa: E402
from bench.common import PG_URL_ENV, over_rounds, write_result  # noqa: E402
from bot.app import demo_dataset_path, sandbox_services  # noqa: E402
from sandbox.dataset import load_dataset_file  # noqa: E402
from sandbox.io import load_dataset  # noqa: E402
from sandbox.schema import upgrade  # noqa: E402
from storage.db import Database, create_database  # noqa: E402
from tools.context import Principal  # noqa: E402

#: The benchmarks' own PostgreSQL database (optional).
PG_URL = os.environ.get(PG_URL_ENV)  # noqa: TID251  (a benchmark's own knob, not a setting)

CUSTOMER = Principal(kind="customer", id="C-7", customer_id="C-7")
MESSAGE = "Where is my order O-1042? It arrived damaged, please refund it."
REFUND = {
    "order_id": "O-1042",
    "amount_minor": 4500,
    "currency": "USD",
    "reason_code": "damaged",
    "evidence": ["refund-policy@7#window"],
}
VARIANTS: dict[str, list[tuple[str, dict[str, Any]] | str]] = {
    "full": [
        ("search_knowledge", {"query": "refund window"}),
        ("get_order", {"order_id": "O-1042"}),
        ("issue_refund", REFUND),
        "Your order O-1042 was delivered. Shall I refund $45.00? Please confirm.",
    ],
    "read": [
        ("search_knowledge", {"query": "refund window"}),
        ("get_order", {"order_id": "O-1042"}),
        "Your order O-1042 was delivered; the refund window is 30 days.",
    ],
}


def phase_names(variant: str) -> list[str]:
    """``open``, one phase per tool step (named by its tool), then ``answer``."""
    return ["open", *[s[0] for s in VARIANTS[variant] if isinstance(s, tuple)], "answer"]


# -- the clock: phases between model calls ------------------------------------------------


class Phases:
    """Time (and counters) attributed to the turn's phases, split at each model call.

    ``open`` runs from ``chat()`` to the first model call, each tool step from the model's
    response to the next call, ``answer`` from the final answer to ``chat()`` returning.
    The model's own time is excluded."""

    def __init__(self, counters: Counters | None = None) -> None:
        self.counters = counters
        self.names: list[str] = []
        self.times: list[float] = []
        self.counts: list[Counter[str]] = []
        self._mark = 0.0
        self._snap: Counter[str] = Counter()

    def start(self, names: list[str]) -> None:
        self.names, self.times, self.counts = names, [], []
        self._snap = self.counters.snapshot() if self.counters else Counter()
        self._mark = time.perf_counter()

    def cut(self) -> None:
        now = time.perf_counter()
        self.times.append(now - self._mark)
        if self.counters is not None:
            snap = self.counters.snapshot()
            self.counts.append(snap - self._snap)
            self._snap = snap
        self._mark = now

    def resume(self) -> None:
        if self.counters is not None:
            self._snap = self.counters.snapshot()
        self._mark = time.perf_counter()


class ZeroModel:
    """Answers instantly from the variant's script (by the number of tool results so far)."""

    model_name = "bench-zero"

    def __init__(self, phases: Phases) -> None:
        self.phases = phases
        self.script: list[tuple[str, dict[str, Any]] | str] = []
        self.last_result: str = ""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.phases.cut()
        done = sum(1 for m in request.messages for b in m.content if b.get("type") == "tool_result")
        last = request.messages[-1].content[-1] if request.messages else {}
        self.last_result = str(last.get("content", ""))
        step = self.script[done]
        if isinstance(step, str):
            content: list[Any] = [{"type": "text", "text": step}]
            stop = "end_turn"
        else:
            content = [{"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": step[0], "input": step[1]}]
            stop = "tool_use"
        response = ModelResponse(
            stop_reason=stop,  # type: ignore[arg-type]
            content=content,
            usage=Usage(input_tokens=1200, output_tokens=40),
            model=self.model_name,
        )
        self.phases.resume()
        return response


# -- counting statements, transactions and round trips --------------------------------------


class Counters:
    """SQL statements, transactions, commits and round trips, counted as they happen.

    Statements through SQLAlchemy are counted by engine events (any engine, sync or async);
    statements the stdlib driver runs directly (signoff's SQLite fast path) by
    ``sqlite3.Connection.set_trace_callback``. Round trips are hand-offs to another thread on
    SQLite (aiosqlite's queue, the writer thread) and client/server exchanges on PostgreSQL
    (each statement, BEGIN and COMMIT)."""

    def __init__(self) -> None:
        self.c: Counter[str] = Counter()
        self.extra: list[Callable[[], int]] = []

    def snapshot(self) -> Counter[str]:
        snap = Counter(self.c)
        for read in self.extra:
            snap["round_trips"] += read()
        return snap

    def sql(self, statement: str) -> None:
        head = statement.lstrip()[:8].upper()
        if head.startswith("BEGIN"):
            pass  # transactions are counted by the engines' begin events
        elif head.startswith("COMMIT"):
            self.c["commits"] += 1
        elif head.startswith("ROLLBACK"):
            self.c["rollbacks"] += 1
        elif not head.startswith("PRAGMA"):
            self.c["statements"] += 1

    def install(self, db: Database) -> Callable[[], None]:
        """Hook ``db``'s engines and drivers; returns the undo."""
        from sqlalchemy import event

        undo: list[Callable[[], None]] = []
        engines = [db.engine.sync_engine]
        if db.sync_writer is not None:
            engines.extend(getattr(db.sync_writer, "engines", [db.sync_writer.engine]))
        pg = db.is_postgres

        def on_exec(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
            self.sql(statement)
            if pg:
                self.c["round_trips"] += 1

        def sent(conn: Any) -> bool:
            """Whether BEGIN, COMMIT or ROLLBACK reaches the server (not in autocommit, as reads run)."""
            return pg and conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT"

        def on_begin(conn: Any) -> None:
            if pg and not sent(conn):
                return  # an autocommit read: no transaction
            self.c["transactions"] += 1
            if pg:
                self.c["round_trips"] += 1

        def on_commit(conn: Any) -> None:
            if sent(conn):
                self.c["commits"] += 1
                self.c["round_trips"] += 1

        def on_rollback(conn: Any) -> None:
            if pg and not sent(conn):
                return
            self.c["rollbacks"] += 1
            if pg:
                self.c["round_trips"] += 1

        for engine in engines:
            hooks: list[tuple[str, Any]] = [("before_cursor_execute", on_exec), ("begin", on_begin)]
            hooks += [("commit", on_commit if pg else self._sqlite_commit), ("rollback", on_rollback)]
            for name, fn in hooks:
                event.listen(engine, name, fn)
                undo.append(lambda e=engine, n=name, f=fn: event.remove(e, n, f))
        undo.extend(self._hook_threads(db))
        undo.extend(self._hook_fast_path(db))
        return lambda: [u() for u in undo]  # type: ignore[func-returns-value]

    def _sqlite_commit(self, conn: Any) -> None:
        self.c["commits"] += 1

    def _hook_threads(self, db: Database) -> list[Callable[[], None]]:
        undo: list[Callable[[], None]] = []
        if db.is_postgres:
            return undo
        import aiosqlite.core

        original = aiosqlite.core.Connection._execute
        counters = self.c

        async def counted(conn: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
            counters["round_trips"] += 1
            return await original(conn, fn, *args, **kwargs)

        aiosqlite.core.Connection._execute = counted  # type: ignore[method-assign]
        undo.append(lambda: setattr(aiosqlite.core.Connection, "_execute", original))
        writer = db.sync_writer
        if writer is not None and hasattr(writer, "handoffs"):
            # Writes (and reads) that found SQLite busy and went to a thread.
            self.extra.append(lambda: writer.handoffs)
        elif writer is not None:
            run = writer.run

            async def counted_run(fn: Any, ctx: Any) -> Any:
                counters["round_trips"] += 1
                return await run(fn, ctx)

            writer.run = counted_run  # type: ignore[method-assign]
            undo.append(lambda: delattr(writer, "run"))
        return undo

    def _hook_fast_path(self, db: Database) -> list[Callable[[], None]]:
        """Statements signoff's SQLite fast path runs straight on the stdlib cursor."""
        try:
            from storage import fastsql
        except ImportError:
            return []
        trace = self.raw_pg_sql if db.is_postgres else self.raw_sql
        fastsql.TRACE.append(trace)
        return [lambda: fastsql.TRACE.remove(trace)]

    def raw_sql(self, statement: str) -> None:
        """A statement on the stdlib cursor: BEGIN and COMMIT there are SQLAlchemy-free too."""
        if statement.startswith("BEGIN"):
            self.c["transactions"] += 1
        else:
            self.sql(statement)

    def raw_pg_sql(self, statement: str) -> None:
        """A prepared statement on the asyncpg adapter's cursor: one round trip, unseen by the
        engine's events (BEGIN and COMMIT still go through SQLAlchemy and are counted there)."""
        self.sql(statement)
        self.c["round_trips"] += 1


# -- the runtime under test --------------------------------------------------------------------


async def open_db(kind: str, tmp: Path) -> tuple[Database, Callable[[], Any]]:
    """A migrated, seeded database of ``kind``, and its cleanup."""
    if kind == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp / 'overhead.db'}"
        await upgrade(url)
        db = create_database(url)
        return db, db.dispose
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from storage.db import Base

    pg_url = PG_URL
    assert pg_url
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    admin = create_async_engine(pg_url)
    async with admin.begin() as conn:
        await conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    engine = create_async_engine(pg_url, connect_args={"server_settings": {"search_path": schema}}, pool_size=10)
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    db = Database.of(engine)

    async def cleanup() -> None:
        await db.dispose()
        async with admin.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        await admin.dispose()

    return db, cleanup


async def seed(db: Database) -> None:
    """The demo dataset, rebased to now (as the tests seed it)."""
    await load_dataset(db, load_dataset_file(demo_dataset_path()), rebase_to=datetime.now(UTC).replace(microsecond=0))


def bench_runtime(db: Database, model: ZeroModel) -> Runtime:
    services = sandbox_services(db=db, model=model)
    p = services.policy
    # Hundreds of conversations by one customer within the hour: lift the per-customer and
    # per-run caps (the checks still run; they just never refuse).
    policy = p.model_copy(
        update={
            "customer": p.customer.model_copy(
                update={
                    "max_new_conversations_per_hour": 10**9,
                    "max_actions_per_day": 10**9,
                    "max_model_tokens_per_day": 10**12,
                }
            ),
        }
    )
    from dataclasses import replace

    from agent.gatekeeper import Gatekeeper

    services = replace(
        services,
        policy=policy,
        gatekeeper=Gatekeeper(
            registry=services.registry,
            policy=policy,
            confirmations=services.confirmations,
            approvals=services.approvals,
            usage=services.usage,
            people=services.people,
        ),
    )
    return Runtime(services)


async def conversation(rt: Runtime, model: ZeroModel, phases: Phases, variant: str) -> tuple[list[float], Any]:
    model.script = VARIANTS[variant]
    phases.start(phase_names(variant))
    result = await rt.chat(principal=CUSTOMER, channel="api", message=MESSAGE)
    phases.cut()
    return phases.times, result


def check(result: Any, model: ZeroModel, variant: str) -> None:
    """Each conversation really took the path it claims (a refund asks for confirmation)."""
    if result.outcome != "answered":
        raise SystemExit(f"{variant}: the turn ended {result.outcome!r}, not answered: {result.reply[:200]}")
    if variant == "full" and [p.kind for p in result.pending] != ["confirmation"]:
        raise SystemExit(f"full: the refund did not reach its confirmation: {model.last_result[:300]}")


# -- the floor ------------------------------------------------------------------------------------


class Floor:
    """A plain loop: dict messages, direct function calls, one sqlite3 INSERT per message,
    a commit per step (WAL, synchronous=NORMAL, as signoff runs SQLite)."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, conv TEXT, seq INTEGER, role TEXT, body TEXT)")
        self.orders = {"O-1042": {"id": "O-1042", "status": "DELIVERED", "total_minor": 18900, "currency": "USD"}}
        self.kb = [{"evidence_id": "refund-policy@7#window", "text": "Refunds within 30 days of delivery."}]
        self.tools: dict[str, Callable[[dict[str, Any]], Any]] = {
            "search_knowledge": lambda a: {"results": [k for k in self.kb if "refund" in a["query"]]},
            "get_order": lambda a: self.orders[a["order_id"]],
            "issue_refund": lambda a: {"status": "CONFIRMATION_REQUIRED", "order_id": a["order_id"]},
        }
        self.n = 0

    def _save(self, conv: str, messages: list[dict[str, Any]], start: int) -> None:
        self.db.execute("BEGIN")
        for i, m in enumerate(messages[start:], start):
            self.db.execute(
                "INSERT INTO messages (conv, seq, role, body) VALUES (?, ?, ?, ?)",
                (conv, i, m["role"], json.dumps(m["content"])),
            )
        self.db.execute("COMMIT")

    def conversation(self, variant: str, phases: Phases) -> list[float]:
        self.n += 1
        conv = f"c{self.n}"
        phases.start(phase_names(variant))
        messages: list[dict[str, Any]] = [{"role": "user", "content": MESSAGE}]
        self._save(conv, messages, 0)
        for step in VARIANTS[variant]:
            phases.cut()  # the model is called here (zero latency)
            if isinstance(step, str):
                messages.append({"role": "assistant", "content": step})
                self._save(conv, messages, len(messages) - 1)
                break
            name, args = step
            messages.append({"role": "assistant", "content": [{"tool": name, "input": args}]})
            result = self.tools[name](args)
            messages.append({"role": "user", "content": [{"tool_result": json.dumps(result)}]})
            self._save(conv, messages, len(messages) - 2)
        phases.cut()
        return phases.times


# -- rounds -----------------------------------------------------------------------------------------


async def measure(kind: str, variant: str, conversations: int, rounds: int, tmp: Path) -> dict[str, Any]:
    """Timed rounds of the runtime and the floor, then a counted pass."""
    db, cleanup = await open_db(kind, tmp / f"{kind}-{variant}")
    try:
        await seed(db)
        phases = Phases()
        model = ZeroModel(phases)
        rt = bench_runtime(db, model)
        floor = Floor(tmp / f"floor-{kind}-{variant}.db")
        names = phase_names(variant)
        for _ in range(5):  # warm up: imports, caches, the first connections
            check((await conversation(rt, model, phases, variant))[1], model, variant)
            floor.conversation(variant, phases)
        per_round: list[dict[str, float]] = []
        per = max(1, conversations // rounds)
        for _ in range(rounds):
            rt_samples: list[list[float]] = []
            floor_samples: list[list[float]] = []
            gc.collect()
            for _ in range(per):
                times, result = await conversation(rt, model, phases, variant)
                check(result, model, variant)
                rt_samples.append(times)
                floor_samples.append(floor.conversation(variant, phases))
            per_round.append(_round_figures(names, rt_samples, floor_samples))
        counts = await count_pass(db, rt, model, variant, min(50, conversations))
    finally:
        await cleanup()
    return {
        "database": kind,
        "variant": variant,
        "conversations": per * rounds,
        "phases": names,
        "us": {k: over_rounds([r[k] for r in per_round]) for k in per_round[0]},
        "per_step_counts": counts,
    }


def _round_figures(names: list[str], rt: list[list[float]], floor: list[list[float]]) -> dict[str, float]:
    """Medians of one round, in µs."""
    out: dict[str, float] = {}
    for i, name in enumerate(names):
        out[name] = statistics.median(s[i] for s in rt) * 1e6
        out[f"floor_{name}"] = statistics.median(s[i] for s in floor) * 1e6
    steps = len(names) - 1  # model calls: every phase but the opening ends in one, or is the answer
    conv = [sum(s) for s in rt]
    fconv = [sum(s) for s in floor]
    out["conversation"] = statistics.median(conv) * 1e6
    out["floor_conversation"] = statistics.median(fconv) * 1e6
    out["per_step"] = out["conversation"] / steps
    out["floor_per_step"] = out["floor_conversation"] / steps
    out["step_median"] = statistics.median(x for s in rt for x in s[1:]) * 1e6
    out["floor_step_median"] = statistics.median(x for s in floor for x in s[1:]) * 1e6
    out["ratio_conversation"] = out["conversation"] / out["floor_conversation"]
    out["ratio_step_median"] = out["step_median"] / out["floor_step_median"]
    return out


async def count_pass(db: Database, rt: Runtime, model: ZeroModel, variant: str, n: int) -> dict[str, dict[str, float]]:
    """Statements, transactions, commits and round trips per phase (a separate, hooked pass)."""
    counters = Counters()
    phases = Phases(counters)
    model.phases = phases
    undo = counters.install(db)
    try:
        rows: list[list[Counter[str]]] = []
        for _ in range(n):
            model.script = VARIANTS[variant]
            phases.start(phase_names(variant))
            result = await rt.chat(principal=CUSTOMER, channel="api", message=MESSAGE)
            phases.cut()
            check(result, model, variant)
            rows.append(phases.counts)
    finally:
        undo()
    names = phase_names(variant)
    keys = ("statements", "transactions", "commits", "rollbacks", "round_trips")
    out: dict[str, dict[str, float]] = {}
    for i, name in enumerate(names):
        out[name] = {k: statistics.mean(r[i][k] for r in rows) for k in keys}
    out["conversation"] = {k: sum(out[name][k] for name in names) for k in keys}
    return out


# -- the profile ------------------------------------------------------------------------------------

GROUPS = (
    ("sqlalchemy", "/sqlalchemy/"),
    ("aiosqlite", "/aiosqlite/"),
    ("asyncpg", "/asyncpg/"),
    ("greenlet", "/greenlet/"),
    ("jsonschema", "/jsonschema/"),
    ("referencing", "/referencing/"),
    ("pydantic", "/pydantic"),
    ("structlog", "/structlog/"),
    ("asyncio", "/asyncio/"),
    ("json", "/json/"),
    ("logging", "/logging/"),
    ("signoff.agent", "/agent/"),
    ("signoff.storage", "/storage/"),
    ("signoff.sandbox", "/sandbox/"),
    ("signoff.tools", "/tools/"),
    ("signoff.bot", "/bot/"),
    ("bench", "/bench/"),
)


def group_of(func: tuple[str, int, str]) -> str:
    path, _, name = func
    if path == "~":
        if "sqlite3" in name:
            return "sqlite3"
        if "select" in name or "poll" in name or "epoll" in name:
            return "asyncio"
        if "acquire" in name or "lock" in name or "wait" in name:
            return "threads"
        return "builtins"
    for group, needle in GROUPS:
        if needle in path:
            return group
    if "/sqlite3/" in path:
        return "sqlite3"
    if "threading" in path or "concurrent/futures" in path or "queue.py" in path:
        return "threads"
    return "python-stdlib"


def grouped(profile: cProfile.Profile, total: float) -> list[dict[str, Any]]:
    """Own time per library, and the inclusive time of calls into it from outside."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for func, (_cc, _nc, tt, _ct, callers) in stats.items():
        g = group_of(func)
        own[g] += tt
        for caller, edge in callers.items():
            if group_of(caller) != g:
                inclusive[g] += edge[3]
    rows = [
        {
            "group": g,
            "own_s": round(own[g], 4),
            "own_pct": round(100 * own[g] / total, 1) if total else 0.0,
            "entered_from_outside_s": round(inclusive[g], 4),
        }
        for g in own
    ]
    return sorted(rows, key=lambda r: -r["own_s"])


async def profile_pass(variant: str, n: int, tmp: Path) -> dict[str, Any]:
    (tmp / f"profile-{variant}").mkdir(exist_ok=True)
    db, cleanup = await open_db("sqlite", tmp / f"profile-{variant}")
    try:
        await seed(db)
        phases = Phases()
        model = ZeroModel(phases)
        rt = bench_runtime(db, model)
        for _ in range(5):
            await conversation(rt, model, phases, variant)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        for _ in range(n):
            await conversation(rt, model, phases, variant)
        prof.disable()
        wall = time.perf_counter() - t0
    finally:
        await cleanup()
    stats = pstats.Stats(prof)
    total = stats.total_tt  # type: ignore[attr-defined]
    top = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:25]  # type: ignore[attr-defined]
    return {
        "conversations": n,
        "wall_s_profiled": round(wall, 3),
        "busy_s": round(total, 3),
        "groups": grouped(prof, total),
        "top_own": [
            {"func": f"{Path(f[0]).name}:{f[1]}:{f[2]}", "group": group_of(f), "own_s": round(v[2], 4), "calls": v[1]}
            for f, v in top
        ],
    }


# -- printing -----------------------------------------------------------------------------------------


def show(m: dict[str, Any]) -> None:
    us = m["us"]
    print(f"\n{m['database']} / {m['variant']}: {m['conversations']} conversations, medians over rounds (min, max)")
    for name in m["phases"]:
        r, f = us[name], us[f"floor_{name}"]
        print(f"  {name:18s} {r['median']:9.0f} µs  ({r['min']:.0f}-{r['max']:.0f})   floor {f['median']:7.0f} µs")
    totals = (("step_median", "step (median)"), ("per_step", "conversation/steps"), ("conversation", "conversation"))
    for key, label in totals:
        r, f = us[key], us[f"floor_{key}"]
        print(f"  {label:18s} {r['median']:9.0f} µs  ({r['min']:.0f}-{r['max']:.0f})   floor {f['median']:7.0f} µs")
    print(
        f"  ratio to floor: conversation {us['ratio_conversation']['median']:.1f}x, "
        f"step median {us['ratio_step_median']['median']:.1f}x"
    )
    c = m["per_step_counts"]
    print("  per phase: statements / transactions / commits / round trips")
    for name in [*m["phases"], "conversation"]:
        x = c[name]
        figures = f"{x['statements']:5.1f} / {x['transactions']:4.1f} / {x['commits']:4.1f} / {x['round_trips']:5.1f}"
        print(f"    {name:18s} {figures}")


def show_profile(p: dict[str, Any]) -> None:
    print(f"\nprofile (SQLite, full, {p['conversations']} conversations, busy {p['busy_s']} s): own time by library")
    for g in p["groups"][:14]:
        inside = g["entered_from_outside_s"]
        print(f"  {g['group']:18s} {g['own_s']:8.3f} s {g['own_pct']:5.1f}%   entered from outside {inside:.3f} s")
    print("  top functions by own time:")
    for f in p["top_own"][:12]:
        print(f"    {f['own_s']:7.3f} s {f['calls']:8d}  {f['group']:16s} {f['func']}")


async def main_async(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="signoff-overhead-"))
    kinds = ["sqlite"] + (["postgresql"] if PG_URL and not args.no_pg else [])
    results: list[dict[str, Any]] = []
    for kind in kinds:
        for variant in ("full", "read"):
            (tmp / f"{kind}-{variant}").mkdir(exist_ok=True)
            m = await measure(kind, variant, args.conversations, args.rounds, tmp)
            show(m)
            results.append(m)
    prof = await profile_pass("full", args.profile, tmp) if args.profile else None
    if prof:
        show_profile(prof)
    sq = next(r for r in results if r["database"] == "sqlite" and r["variant"] == "full")
    targets = {
        "sqlite_full_step_median_us": {"target": 1000, "measured": sq["us"]["step_median"]["median"]},
        "sqlite_full_conversation_us": {"target": 5000, "measured": sq["us"]["conversation"]["median"]},
        "sqlite_full_ratio_to_floor": {"target": 5.0, "measured": sq["us"]["ratio_step_median"]["median"]},
        "sqlite_read_tool_us": {"target": 300, "measured": sq["us"]["get_order"]["median"]},
        "sqlite_turn_opening_us": {"target": 1000, "measured": sq["us"]["open"]["median"]},
    }
    print("\ntargets (SQLite, full path):")
    for k, v in targets.items():
        print(f"  {k:30s} measured {v['measured']:9.1f}  target {v['target']}")
    write_result(
        args.name,
        {
            "conversations": args.conversations,
            "rounds": args.rounds,
            "units": "µs (medians of each round, then median/min/max over rounds); counts are means per phase",
            "results": results,
            "targets": targets,
            "profile": prof,
        },
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--conversations", type=int, default=500, help="per variant and database (default 500)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--profile", type=int, default=200, help="conversations under cProfile (0: none)")
    p.add_argument("--no-pg", action="store_true", help=f"skip PostgreSQL even when {PG_URL_ENV} is set")
    p.add_argument("--name", default="overhead", help="bench/results/<name>.json (default overhead)")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
