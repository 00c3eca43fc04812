"""Scale-out on PostgreSQL: two `signoff serve --no-worker` replicas and two `signoff worker`s
on one database, against one replica and one worker, under the same load in the same run.

Real processes, the real SDK clients: the model is the strict local Anthropic fake answering
after ``--model-ms`` (a deployment where the model, not our CPU, dominates), Slack is the
local fake Web API. The load, driven concurrently through every replica (``--clients`` at a
time, closed loop), per round:

* HTTP API customers asking about an order (get_order, then an answer);
* HTTP API refunds above the customer's ceiling: chat on one replica, the customer's confirm
  on the other, then two supervisors approving the same approval at once, one through each
  replica (exactly one may win; the worker then finishes the conversation);
* HTTP API cancellations (chat, confirm on the other replica);
* signed Slack DMs from customers (acked by a replica, answered by a worker).

Throughput is completed conversations per second, from the first request until every
conversation is answered and the job queue is empty. Then, on the database: no idempotency
key executed twice (ledger and audit), no order refunded or cancelled twice (the sandbox
store), and the conversation lease across replicas: pairs of messages sent to one
conversation through both replicas at once, whose turns (from the stored messages' times)
must never overlap.

    SIGNOFF_BENCH_PG_URL=postgresql+asyncpg://… .venv/bin/python bench/scaleout.py \\
        [--rounds 2] [--clients 48] [--model-ms 250]

The database's ``public`` schema is dropped and rebuilt for every configuration: give it a
database of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import PG_URL_ENV, environment, over_rounds, summary, write_result  # noqa: E402
from bot.api.auth import make_token  # noqa: E402
from sandbox.slack_web import FakeSlackApi  # noqa: E402
from tests.fakes.anthropic_api import FakeAnthropicAPI, text_turn, tool_turn  # noqa: E402
from tests.slack_kit import (  # noqa: E402
    DEMO,
    POLICY,
    SIGNOFF,
    env_for,
    event_body,
    run_cli,
    signed_headers,
    until_healthy,
)
from tests.test_api_serve import free_port  # noqa: E402

JWT_SECRET = "bench-jwt-secret-that-is-long-enough-for-hs256"
GROUP = {"get_order": "orders", "cancel_order": "orders", "issue_refund": "billing"}
REFUND_RE = re.compile(r"refund order (O-\d+), (\d+) ([A-Z]{3})")
CANCEL_RE = re.compile(r"cancel order (O-\d+)")
ORDER_RE = re.compile(r"where is my order (O-\d+)")


# -- the model: a stateless planner behind the strict fake, answering after a fixed latency ----
def _texts(body: dict[str, Any]) -> tuple[str, str, list[str]]:
    """(first user text, last message as JSON, names of the tools called so far bar load_tools)."""
    first, used = "", []
    for m in body["messages"]:
        content = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        for b in content:
            if not first and m["role"] == "user" and b.get("type") == "text":
                first = str(b.get("text", ""))
            if b.get("type") == "tool_use" and b["name"] != "load_tools":
                used.append(b["name"])
    return first, json.dumps(body["messages"][-1]), used


def _script(first: str) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """The calls this conversation's first message asks for, and the answer once they are made."""
    if m := REFUND_RE.search(first):
        refund = {
            "order_id": m[1],
            "amount_minor": int(m[2]),
            "currency": m[3],
            "reason_code": "damaged",
            "evidence": ["refund-policy@7#window"],
        }
        knowledge = ("search_knowledge", {"query": "refund window damaged"})
        return [knowledge, ("issue_refund", refund)], "This refund needs your confirmation."
    if m := CANCEL_RE.search(first):
        cancel = {"order_id": m[1], "reason_code": "customer_request", "evidence": ["cancellations@2#before-shipping"]}
        calls = [("get_order", {"order_id": m[1]}), ("search_knowledge", {"query": "cancel before shipping"})]
        return [*calls, ("cancel_order", cancel)], "Cancelling needs your confirmation."
    if m := ORDER_RE.search(first):
        return [("get_order", {"order_id": m[1]})], "Here is where your order stands."
    return [], "Hello! How can I help?"


def planner(body: dict[str, Any]) -> dict[str, Any]:
    first, last, used = _texts(body)
    calls, answer = _script(first)
    if len(used) < len(calls) and ('"tool_result"' in last or not used):
        name, args = calls[len(used)]
        offered = {t["name"] for t in body.get("tools", [])}
        if name not in offered and name in GROUP:
            return tool_turn("load_tools", {"group": GROUP[name]})
        return tool_turn(name, args)
    if "approved" in last:
        return text_turn("Your refund is issued.")
    if "confirmed" in last:
        return text_turn("Thanks, that is under way.")
    return text_turn(answer)


# -- the load --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Item:
    kind: str  # query | refund | cancel | slack
    customer: str
    order: str
    amount: int = 0
    currency: str = ""
    slack_user: str = ""


def build_load(n_queries: int, n_cancels: int, n_slack: int, n_refunds: int) -> list[Item]:
    """The same items for every configuration (seeded shuffle), from the demo dataset."""
    d = json.loads(DEMO.read_text())
    as_of = _ts(d["as_of"])
    refunded: Counter[str] = Counter()
    for r in d["refunds"]:
        refunded[r["order_id"]] += r["amount_minor"]
    orders, slack_ids = d["orders"], {c["id"]: c["slack_user_id"] for c in d["customers"] if c.get("slack_user_id")}
    refunds = [
        Item("refund", o["customer_id"], o["id"], 6000, o["currency"])
        for o in orders
        if o["status"] == "DELIVERED"
        and o.get("delivered_at")
        and as_of - _ts(o["delivered_at"]) < 25 * 86400
        and o["currency"] in ("USD", "EUR", "GBP")
        and o["total_minor"] - refunded[o["id"]] >= 6000
    ][:n_refunds]
    cancels = [Item("cancel", o["customer_id"], o["id"]) for o in orders if o["status"] in ("PENDING", "PAID")]
    queries = [Item("query", o["customer_id"], o["id"]) for o in orders if o["status"] in ("SHIPPED", "DELIVERED")]
    slack = [
        Item("slack", o["customer_id"], o["id"], slack_user=slack_ids[o["customer_id"]])
        for o in orders
        if o["customer_id"] in slack_ids
    ]
    rnd = random.Random(14)
    load = refunds + cancels[:n_cancels] + rnd.sample(queries, n_queries) + [rnd.choice(slack) for _ in range(n_slack)]
    rnd.shuffle(load)
    return load


def _ts(s: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def bench_policy(path: Path) -> Path:
    """The bundled policy with the per-customer volume limits lifted (the load reuses customers)."""
    text_ = POLICY.read_text()
    for old, new in (
        ("max_new_conversations_per_hour: 20", "max_new_conversations_per_hour: 100000"),
        ("max_actions_per_day: 20", "max_actions_per_day: 100000"),
        ("max_refunds_per_customer_per_day: 3", "max_refunds_per_customer_per_day: 1000"),
    ):
        assert old in text_, old
        text_ = text_.replace(old, new)
    path.write_text(text_)
    return path


# -- processes ---------------------------------------------------------------------------------
@dataclass
class Proc:
    args: list[str]
    env: dict[str, str]
    log: Path
    port: int | None = None
    proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                str(SIGNOFF), *self.args, env=self.env, stdout=log, stderr=log
            )
        if self.port is None:
            return
        if not await until_healthy(self.url, tries=600):
            raise RuntimeError(f"signoff {' '.join(self.args)} did not come up; see {self.log}")

    def cpu_s(self) -> float:
        """User + system CPU seconds the process used so far (from /proc)."""
        assert self.proc is not None
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout=30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


def serve(env: dict[str, str], log: Path) -> Proc:
    port = free_port()
    return Proc(["serve", "--no-worker", "--port", str(port)], env, log, port=port)


async def reset_database(admin: AsyncEngine, env: dict[str, str]) -> None:
    async with admin.begin() as conn:
        await conn.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        await conn.execute(text("CREATE SCHEMA public"))
    for args in (("db", "upgrade"), ("store", "load", str(DEMO), "--rebase-to-now")):
        code, out = await run_cli(env, *args)
        if code != 0:
            raise RuntimeError(f"signoff {' '.join(args)} failed: {out[-2000:]}")


# -- driving it ------------------------------------------------------------------------------
def bearer(sub: str, role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_token(JWT_SECRET, sub=sub, role=role)}"}


@dataclass
class Tally:
    done: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    approve_races: Counter[str] = field(default_factory=Counter)
    latency_s: list[float] = field(default_factory=list)
    latency_by_kind: dict[str, list[float]] = field(default_factory=dict)

    def fail(self, item: Item, why: str) -> None:
        self.failed[item.kind] += 1
        if len(self.errors) < 20:
            self.errors.append(f"{item.kind} {item.order}: {why}"[:300])


class Driver:
    def __init__(self, session: aiohttp.ClientSession, replicas: list[Proc], slack: FakeSlackApi, tag: int) -> None:
        self.session, self.replicas, self.slack, self.tag = session, replicas, slack, tag
        self.tally = Tally()
        self._slack_seq = 0

    async def post(self, replica: Proc, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        async with self.session.post(f"{replica.url}{path}", json=body, headers=headers) as r:
            return r.status, await r.json(content_type=None)

    def pick(self, i: int, shift: int = 0) -> Proc:
        return self.replicas[(i + shift) % len(self.replicas)]

    async def run(self, i: int, item: Item) -> None:
        start = time.perf_counter()
        try:
            why = await getattr(self, f"_{item.kind}")(i, item)
        except Exception as exc:  # a figure, not a crash: counted and shown
            why = f"{type(exc).__name__}: {exc}"
        if why:
            self.tally.fail(item, why)
        else:
            self.tally.done[item.kind] += 1
            took = time.perf_counter() - start
            self.tally.latency_s.append(took)
            self.tally.latency_by_kind.setdefault(item.kind, []).append(took)

    async def _query(self, i: int, item: Item) -> str | None:
        body = {"conversationId": None, "message": f"Hi, where is my order {item.order}?"}
        status, chat = await self.post(self.pick(i), "/api/chat", body, bearer(item.customer, "customer"))
        return None if status == 200 and chat.get("reply") else f"chat {status} {chat}"

    async def _confirmed(self, i: int, item: Item, message: str) -> tuple[dict[str, Any] | None, str | None]:
        who = bearer(item.customer, "customer")
        status, chat = await self.post(self.pick(i), "/api/chat", {"conversationId": None, "message": message}, who)
        pending = [p for p in chat.get("pending", []) if p["kind"] == "confirmation"] if status == 200 else []
        if not pending:
            return None, f"chat {status} {chat}"
        status, confirmed = await self.post(self.pick(i, 1), f"/api/confirmations/{pending[0]['id']}/confirm", {}, who)
        return (confirmed, None) if status == 200 else (None, f"confirm {status} {confirmed}")

    async def _cancel(self, i: int, item: Item) -> str | None:
        confirmed, why = await self._confirmed(i, item, f"Please cancel order {item.order}, I ordered it by mistake.")
        if confirmed is None:
            return why
        result = confirmed.get("result") or {}
        return None if result.get("status") == "CANCELLED" else f"cancel result {result}"

    async def _refund(self, i: int, item: Item) -> str | None:
        message = f"My parcel arrived damaged: please refund order {item.order}, {item.amount} {item.currency}."
        confirmed, why = await self._confirmed(i, item, message)
        if confirmed is None:
            return why
        approval = confirmed.get("approval")
        if not approval:
            return f"no approval: {confirmed.get('result')}"
        path, body = f"/api/approvals/{approval['id']}/approve", {"version": approval["version"], "comment": "ok"}
        # Two supervisors click at once, one through each replica: exactly one may win.
        a, b = await asyncio.gather(
            self.post(self.pick(i), path, body, bearer("S-3", "supervisor")),
            self.post(self.pick(i, 1), path, body, bearer("S-4", "supervisor")),
        )
        statuses = sorted((a[0], b[0]))
        self.tally.approve_races[f"{statuses[0]}+{statuses[1]}"] += 1
        won = [r for s, r in (a, b) if s == 200]
        if len(won) != 1:
            return f"approve answered {statuses}"
        result = won[0].get("result") or {}
        return None if result.get("status") == "REFUNDED" else f"refund result {result}"

    async def _slack(self, i: int, item: Item) -> str | None:
        self._slack_seq += 1
        n = self._slack_seq
        channel = f"D{self.tag:02d}{i:05d}{n:03d}"
        ev = {
            "type": "message",
            "channel_type": "im",
            "channel": channel,
            "user": item.slack_user,
            "text": f"where is my order {item.order}?",
            "ts": f"{1_800_000_000 + self.tag * 100_000 + i}.{n:06d}",
            "team": "T0SIGNOFF",
        }
        body = event_body(ev, event_id=f"EvScale{self.tag:02d}{i:05d}{n:03d}")
        headers = {"Content-Type": "application/json", **signed_headers(body)}
        async with self.session.post(f"{self.pick(i).url}/slack/events", data=body.encode(), headers=headers) as r:
            await r.read()
            if r.status != 200:
                return f"slack ack {r.status}"
        await self.slack.until(lambda: _replies(self.slack).get(channel, 0) >= 1, within_s=120)
        return None


def _replies(slack: FakeSlackApi) -> Counter[str]:
    per: Counter[str] = Counter()
    for call in slack.calls():
        if call.method in ("chat.postMessage", "chat.startStream") and call.response.get("ok"):
            per[str(call.args.get("channel"))] += 1
    return per


async def drive(driver: Driver, load: list[Item], clients: int) -> None:
    queue: asyncio.Queue[tuple[int, Item]] = asyncio.Queue()
    for i, item in enumerate(load):
        queue.put_nowait((i, item))

    async def client() -> None:
        while not queue.empty():
            i, item = queue.get_nowait()
            await driver.run(i, item)

    await asyncio.gather(*(client() for _ in range(clients)))


async def drained(admin: AsyncEngine, within_s: float = 300) -> bool:
    """Wait until no job is running or due (the workers finished every follow-up; a job queued
    for later is a safety net, e.g. a confirmation's carry-out check ten seconds on)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        async with admin.connect() as conn:
            left = (
                await conn.execute(
                    text(
                        "SELECT count(*) FROM jobs WHERE status = 'running'"
                        " OR (status = 'queued' AND run_after <= now())"
                    )
                )
            ).scalar()
        if not left:
            return True
        await asyncio.sleep(0.1)
    return False


# -- the conversation lease across replicas ---------------------------------------------------
async def lease_pairs(driver: Driver, admin: AsyncEngine, pairs: int) -> dict[str, Any]:
    """Per conversation: one opening message, then two messages at once, one through each replica.
    Each turn is its own run; from the stored messages' times, no two runs of one conversation
    may overlap, and their messages may not interleave."""
    a, b = driver.replicas[0], driver.replicas[-1]
    statuses: Counter[int] = Counter()
    convs: list[str] = []

    async def pair(k: int) -> None:
        who = bearer(f"C-{k + 1}", "customer")
        status, opened = await driver.post(a, "/api/chat", {"conversationId": None, "message": "hello"}, who)
        if status != 200:
            statuses[status] += 1
            return
        conv = opened["conversationId"]
        convs.append(conv)
        sent = await asyncio.gather(
            driver.post(a, "/api/chat", {"conversationId": conv, "message": "first of two at once"}, who),
            driver.post(b, "/api/chat", {"conversationId": conv, "message": "second of two at once"}, who),
        )
        statuses.update(s for s, _ in sent)

    await asyncio.gather(*(pair(k) for k in range(pairs)))
    turns: list[list[tuple[float, float]]] = []
    async with admin.connect() as conn:
        for conv in convs:
            rows = (
                await conn.execute(
                    text("SELECT seq, role, content, created_at FROM messages WHERE conversation_id = :c ORDER BY seq"),
                    {"c": conv},
                )
            ).all()
            turns.append(_turns(rows))
    checked = [pair for conv in turns for pair in zip(conv, conv[1:], strict=False)]
    gaps = [(nxt[0] - prev[1]) * 1000 for prev, nxt in checked]
    return {
        "pairs": pairs,
        "conversations": len(convs),
        "turns_checked": sum(len(t) for t in turns),
        "answers": dict(statuses),
        "overlapping_turns": sum(1 for g in gaps if g < 0),
        "gap_between_turns_ms": summary(gaps),
    }


def _turns(rows: list[Any]) -> list[tuple[float, float]]:
    """Each turn's (start, end) in seconds: from the person's message to the first final answer
    (an assistant message calling no tool) stored after it. Turns that ran at once overlap."""
    out: list[tuple[float, float]] = []
    for i, (_seq, role, content, at) in enumerate(rows):
        if role != "user" or not any(
            b.get("type") == "text" and "signoff_event" not in b.get("text", "") for b in content
        ):
            continue
        end = next(
            (r[3] for r in rows[i + 1 :] if r[1] == "assistant" and not any(b.get("type") == "tool_use" for b in r[2])),
            None,
        )
        if end is not None:
            out.append((at.timestamp(), end.timestamp()))
    return out


# -- duplicates ---------------------------------------------------------------------------------
DUPLICATE_CHECKS = {
    "ledger_keys_twice": "SELECT key FROM tool_executions GROUP BY key HAVING count(*) > 1",
    "ledger_proposals_executed_twice": (
        "SELECT proposal_id FROM tool_executions WHERE status = 'succeeded' AND proposal_id IS NOT NULL"
        " GROUP BY proposal_id HAVING count(*) > 1"
    ),
    "ledger_orders_acted_on_twice": (
        "SELECT tool, arguments->>'order_id' FROM tool_executions WHERE status = 'succeeded'"
        " AND tool IN ('issue_refund', 'cancel_order') GROUP BY 1, 2 HAVING count(*) > 1"
    ),
    "audit_keys_executed_twice": (
        "SELECT idempotency_key FROM audit_events WHERE kind = 'execution.succeeded'"
        " AND idempotency_key IS NOT NULL GROUP BY 1 HAVING count(*) > 1"
    ),
    "store_orders_refunded_twice": (
        "SELECT order_id FROM store_refunds WHERE created_at >= :t0 AND kind = 'refund'"
        " GROUP BY order_id HAVING count(*) > 1"
    ),
    "store_orders_cancelled_twice": (
        "SELECT order_id FROM store_refunds WHERE created_at >= :t0 AND kind = 'cancellation'"
        " GROUP BY order_id HAVING count(*) > 1"
    ),
}
COUNTS = {
    "ledger_succeeded": "SELECT count(*) FROM tool_executions WHERE status = 'succeeded'",
    "ledger_not_succeeded": "SELECT count(*) FROM tool_executions WHERE status <> 'succeeded'",
    "store_refunds_new": "SELECT count(*) FROM store_refunds WHERE created_at >= :t0 AND kind = 'refund'",
    "store_cancellation_refunds_new": (
        "SELECT count(*) FROM store_refunds WHERE created_at >= :t0 AND kind = 'cancellation'"
    ),
    "jobs_failed": "SELECT count(*) FROM jobs WHERE status = 'failed'",
}


async def duplicates(admin: AsyncEngine, t0: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with admin.connect() as conn:
        for name, sql in DUPLICATE_CHECKS.items():
            out[name] = len((await conn.execute(text(sql), {"t0": t0})).all())
        for name, sql in COUNTS.items():
            out[name] = (await conn.execute(text(sql), {"t0": t0})).scalar()
    return out


# -- one configuration ---------------------------------------------------------------------------
@dataclass
class DbSamples:
    """What the database's sessions were doing, sampled every 250 ms (where the time goes)."""

    connections: list[int] = field(default_factory=list)
    holding_money_lock: list[int] = field(default_factory=list)
    waiting_on_a_lock: list[int] = field(default_factory=list)
    waiting_on_audit_head: list[int] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        return {
            "pg_connections_peak": max(self.connections, default=0),
            "money_locks_held": summary([float(x) for x in self.holding_money_lock]),
            "sessions_waiting_on_a_lock": summary([float(x) for x in self.waiting_on_a_lock]),
            "of_which_on_the_audit_head": summary([float(x) for x in self.waiting_on_audit_head]),
        }


SAMPLE_SQL = text(
    "SELECT count(*),"
    " count(*) FILTER (WHERE state = 'idle in transaction' AND query LIKE '%pg_advisory_xact_lock%'),"
    " count(*) FILTER (WHERE wait_event_type = 'Lock'),"
    " count(*) FILTER (WHERE wait_event_type = 'Lock' AND query LIKE '%audit_head%')"
    " FROM pg_stat_activity WHERE datname = current_database()"
)


async def sample_database(admin: AsyncEngine, stop: asyncio.Event, seen: DbSamples) -> None:
    while not stop.is_set():
        async with admin.connect() as conn:
            total, money, waiting, head = (await conn.execute(SAMPLE_SQL)).one()
        seen.connections.append(int(total))
        seen.holding_money_lock.append(int(money))
        seen.waiting_on_a_lock.append(int(waiting))
        seen.waiting_on_audit_head.append(int(head))
        try:
            await asyncio.wait_for(stop.wait(), 0.25)
        except TimeoutError:
            pass


async def configuration(
    n: int, load: list[Item], args: argparse.Namespace, env: dict[str, str], fakes: tuple[Any, FakeSlackApi], tmp: Path
) -> dict[str, Any]:
    """``n`` replicas and ``n`` workers on a fresh database, driven with ``load``."""
    admin = create_async_engine(args.pg_url, pool_size=2, max_overflow=0)
    _model, slack = fakes
    await reset_database(admin, env)
    replicas = [serve(env, tmp / f"serve{n}-{k}.log") for k in range(n)]
    workers = [Proc(["worker"], env, tmp / f"worker{n}-{k}.log") for k in range(n)]
    procs = replicas + workers
    try:
        await asyncio.gather(*(p.start() for p in procs))
        async with admin.connect() as conn:
            t0 = (await conn.execute(text("SELECT now()"))).scalar()
        samples = DbSamples()
        stop = asyncio.Event()
        watcher = asyncio.create_task(sample_database(admin, stop, samples))
        calls0 = args.model_calls[0]
        cpu0 = [p.cpu_s() for p in procs]
        self0 = resource.getrusage(resource.RUSAGE_SELF)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=300)) as session:
            driver = Driver(session, replicas, slack, args.tag)
            args.tag += 1
            start = time.perf_counter()
            await drive(driver, load, args.clients)
            empty = await drained(admin)
            wall = time.perf_counter() - start
            calls = args.model_calls[0] - calls0
            stop.set()
            cpu = [p.cpu_s() - c for p, c in zip(procs, cpu0, strict=True)]
            self1 = resource.getrusage(resource.RUSAGE_SELF)
            lease = await lease_pairs(driver, admin, args.pairs) if n > 1 else None
        await watcher
        dup = await duplicates(admin, t0)
    finally:
        await asyncio.gather(*(p.stop() for p in procs))
        await admin.dispose()
    t = driver.tally
    done = sum(t.done.values())
    return {
        "replicas": n,
        "workers": n,
        "conversations": len(load),
        "completed": dict(t.done),
        "failed": dict(t.failed),
        "errors": t.errors,
        "wall_s": wall,
        "queue_drained": empty,
        "throughput_per_s": done / wall,
        "conversation_latency_s": summary(t.latency_s),
        "conversation_latency_by_kind_s": {k: summary(v) for k, v in sorted(t.latency_by_kind.items())},
        "approve_races": dict(t.approve_races),
        "cpu_s": {
            **{f"serve{k}": round(c, 2) for k, c in enumerate(cpu[:n])},
            **{f"worker{k}": round(c, 2) for k, c in enumerate(cpu[n:])},
            "driver_and_fakes": round(self1.ru_utime + self1.ru_stime - self0.ru_utime - self0.ru_stime, 2),
        },
        **samples.figures(),
        "model_calls": calls,
        # The floor: the same load if nothing but the model's latency counted (every client
        # always waiting on a model call): conversations / (calls x latency / clients).
        "model_bound_per_s": len(load) / (calls * args.model_ms / 1000 / args.clients) if calls else None,
        "duplicates": dup,
        "lease_across_replicas": lease,
    }


# -- the run ---------------------------------------------------------------------------------------
async def run(args: argparse.Namespace) -> dict[str, Any]:
    if not args.pg_url:
        raise SystemExit(f"{PG_URL_ENV} is not set (a PostgreSQL database of the benchmark's own)")
    load = build_load(args.queries, args.cancels, args.slack, args.refunds)

    args.model_calls = [0]

    async def model_call(body: dict[str, Any]) -> dict[str, Any]:
        args.model_calls[0] += 1
        await asyncio.sleep(args.model_ms / 1000)
        return planner(body)

    tmp = Path(tempfile.mkdtemp(prefix="signoff-scaleout-"))
    rounds: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    args.tag = 0
    try:
        async with FakeAnthropicAPI(model_call) as model, FakeSlackApi() as slack:
            env = env_for(tmp / "unused.db", anthropic=model.base_url, slack=slack.base_url)
            env.update(
                SIGNOFF_DATABASE_URL=args.pg_url,
                SIGNOFF_JWT_SECRET=JWT_SECRET,
                SIGNOFF_POLICY_FILE=str(bench_policy(tmp / "policy.yaml")),
            )
            for r in range(args.rounds):
                for n in (1, 2) if r % 2 == 0 else (2, 1):
                    figures = await configuration(n, load, args, env, (model, slack), tmp)
                    rounds[n].append(figures)
                    print(f"  round {r + 1}: {n} replica(s): {figures['throughput_per_s']:.2f} conversations/s")
    finally:
        if args.keep_logs:
            print(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return summarize(args, load, rounds)


def summarize(args: argparse.Namespace, load: list[Item], rounds: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    one = [f["throughput_per_s"] for f in rounds[1]]
    two = [f["throughput_per_s"] for f in rounds[2]]
    dup_total: Counter[str] = Counter()
    for f in rounds[1] + rounds[2]:
        dup_total.update({k: v for k, v in f["duplicates"].items() if k in DUPLICATE_CHECKS})
    leases = [f["lease_across_replicas"] for f in rounds[2]]
    return {
        "model_ms": args.model_ms,
        "clients": args.clients,
        "load": dict(Counter(i.kind for i in load)),
        "throughput_one_replica_per_s": over_rounds(one),
        "throughput_two_replicas_per_s": over_rounds(two),
        "ratio_two_over_one": over_rounds([b / a for a, b in zip(one, two, strict=True)]),
        "model_bound_per_s": over_rounds([f["model_bound_per_s"] for f in rounds[1] + rounds[2]]),
        "failed": sum(sum(f["failed"].values()) for f in rounds[1] + rounds[2]),
        "duplicates_total": dict(dup_total),
        "lease_overlapping_turns": sum(x["overlapping_turns"] for x in leases),
        "lease_turns_checked": sum(x["turns_checked"] for x in leases),
        "rounds": rounds,
        "cpus": os.cpu_count(),
    }


def report(f: dict[str, Any]) -> None:
    one, two, ratio = f["throughput_one_replica_per_s"], f["throughput_two_replicas_per_s"], f["ratio_two_over_one"]
    print(f"scale-out on PostgreSQL: load {f['load']}, {f['clients']} clients, model {f['model_ms']} ms per call")
    print(f"  1 replica + 1 worker   {one['median']:.2f} conversations/s (min {one['min']:.2f}, max {one['max']:.2f})")
    print(f"  2 replicas + 2 workers {two['median']:.2f} conversations/s (min {two['min']:.2f}, max {two['max']:.2f})")
    print(f"  ratio                  {ratio['median']:.2f}x (min {ratio['min']:.2f}, max {ratio['max']:.2f})")
    bound = f["model_bound_per_s"]
    print(
        f"  floor: model-bound     {bound['median']:.2f} conversations/s"
        " (the same load if only the model's latency counted)"
    )
    for n in (1, 2):
        for k, r in enumerate(f["rounds"][n]):
            print(
                f"  [{n}x{n} round {k + 1}] wall {r['wall_s']:.1f} s, cpu {r['cpu_s']},"
                f" latency p50 {r['conversation_latency_s'].get('median', 0):.2f} s,"
                f" approve races {r['approve_races']}, failed {r['failed']}, pg conns peak {r['pg_connections_peak']},"
                f" money locks held p50 {r['money_locks_held'].get('median', 0):.0f}"
                f" (max {r['money_locks_held'].get('max', 0):.0f}),"
                f" sessions waiting on a lock mean {r['sessions_waiting_on_a_lock'].get('mean', 0):.1f}"
                f" (on the audit head {r['of_which_on_the_audit_head'].get('mean', 0):.1f})"
            )
            for e in r["errors"][:5]:
                print(f"      error: {e}")
    print(f"  failed conversations {f['failed']}; duplicates {f['duplicates_total']}")
    answers = [x["lease_across_replicas"]["answers"] for x in f["rounds"][2]]
    print(
        f"  lease across replicas: {f['lease_turns_checked']} turns checked,"
        f" {f['lease_overlapping_turns']} overlapping (HTTP answers per round {answers})"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--clients", type=int, default=48)
    p.add_argument("--model-ms", type=float, default=250.0)
    p.add_argument("--queries", type=int, default=60)
    p.add_argument("--refunds", type=int, default=16)
    p.add_argument("--cancels", type=int, default=24)
    p.add_argument("--slack", type=int, default=32)
    p.add_argument("--pairs", type=int, default=12, help="conversations for the cross-replica lease check")
    p.add_argument("--keep-logs", action="store_true")
    args = p.parse_args()
    # The benchmark's own database, never a setting of the product (bench/common.py names it).
    args.pg_url = os.environ.get(PG_URL_ENV)  # noqa: TID251
    figures = asyncio.run(run(args))
    figures["environment"] = environment()
    report(figures)
    print(f"written {write_result('scaleout', figures)}")


if __name__ == "__main__":
    main()
