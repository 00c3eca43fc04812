"""200 widget sessions streaming at once on one process: every message delivered exactly once,
and ``GET /healthz`` p99 while they stream (target < 100 ms).

The composition root's own app (sandbox, the offline planner) on a loopback port in a process of
its own (as ``signoff serve`` runs; not sharing this process's interpreter with the readers); the
200 guests each open a session, start their stream, send one message and read
until its answer is complete, then keeps its stream open (idle) until every guest has its answer
and ``--hold`` seconds more. ``/healthz`` is timed every 10 ms meanwhile; its figures are given
for the delivery (``healthz_*``) and for the idle hold with every stream open (``idle_healthz_*``:
what the streams cost when nothing happens), from this process's loop and from a process of its
own (``own_process_*``: the server alone, not the bench's 200 readers beside it). Usage:
``.venv/bin/python bench/widget_load.py [--sessions 200] [--hold 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from http.client import HTTPConnection
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import write_result  # noqa: E402
from bot.server import settle_heap  # noqa: E402
from bot.widget.demo import demo_env  # noqa: E402
from tests.widget_kit import JWT_SECRET, PROXY_SECRET, WidgetServer, widget_server  # noqa: E402

QUESTION = "What is your refund policy?"


class SlowPlanner:
    """The offline planner, answering after ``latency_s`` (a model's time to answer; 0: at once)."""

    def __init__(self, latency_s: float) -> None:
        from agent.planner import DemoPlanner

        self._planner = DemoPlanner()
        self._latency_s = latency_s

    @property
    def model_name(self) -> str:
        return self._planner.model_name

    async def complete(self, request: Any) -> Any:
        await asyncio.sleep(self._latency_s)
        return await self._planner.complete(request)


async def _frames(stream: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    frame: dict[str, Any] = {}
    async for line in stream.content:
        if line.startswith(b"id: "):
            frame = {"sse_id": line[4:].decode().strip()}
        elif line.startswith(b"event: "):
            frame["event"] = line[7:].decode().strip()
        elif line.startswith(b"data: "):
            yield {**frame, **json.loads(line[6:])}


async def _rest(frames: AsyncIterator[dict[str, Any]], seen: list[dict[str, Any]]) -> None:
    async for f in frames:
        seen.append(f)


async def one(session: aiohttp.ClientSession, url: str, n: int, got: Got, delay: float = 0.0) -> list[dict[str, Any]]:
    """A guest: open, stream, send one message (``delay`` seconds after opening), read until its
    answer is whole; every frame seen. Then its stream stays open (still read: anything more would
    be a duplicate) until the hold ends."""
    async with session.post(f"{url}/widget/api/session", json={}, headers={"Origin": "https://bench.example"}) as r:
        who = {"Origin": "https://bench.example", "X-Signoff-Session": (await r.json())["session"]}
    seen: list[dict[str, Any]] = []
    async with session.get(f"{url}/widget/api/stream", headers=who) as stream:
        await asyncio.sleep(delay)
        async with session.post(
            f"{url}/widget/api/messages", json={"clientId": f"b-{n}", "text": QUESTION}, headers=who
        ) as r:
            assert r.status == 202, r.status
        frames = _frames(stream)
        async for last in frames:
            seen.append(last)
            if last["event"] == "message" and last["from"] == "agent" or last["event"] == "notice":
                break
        else:
            return seen  # the stream ended first
        got.arrived()
        rest = asyncio.create_task(_rest(frames, seen))
        await got.held.wait()
        rest.cancel()
    return seen


@dataclass
class Got:
    """How many guests have their answer; ``all_in`` once all do, ``held`` when the hold is over."""

    sessions: int
    n: int = 0
    all_in: asyncio.Event = field(default_factory=asyncio.Event)
    held: asyncio.Event = field(default_factory=asyncio.Event)

    def arrived(self) -> None:
        self.n += 1
        if self.n == self.sessions:
            self.all_in.set()


def _percentiles(prefix: str, latencies: list[float]) -> dict[str, Any]:
    latencies = sorted(latencies)
    return {
        f"{prefix}healthz_samples": len(latencies),
        f"{prefix}healthz_p50_ms": round(statistics.median(latencies), 1),
        f"{prefix}healthz_p99_ms": round(latencies[max(int(len(latencies) * 0.99) - 1, 0)], 1),
    }


async def load(url: str, sessions: int, hold: float, spread: float = 0.0) -> dict[str, Any]:
    latencies: list[float] = []
    idle: list[float] = []
    done = asyncio.Event()
    got = Got(sessions)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as http:

        async def probe() -> None:
            while not done.is_set():
                t0 = time.perf_counter()
                async with http.get(f"{url}/healthz") as r:
                    await r.read()
                (idle if got.all_in.is_set() else latencies).append((time.perf_counter() - t0) * 1000)
                await asyncio.sleep(0.01)

        outside = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--probe", url, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        assert outside.stdout is not None
        assert await outside.stdout.readline() == b"ready\n"
        prober = asyncio.create_task(probe())
        t0, started = time.perf_counter(), time.time()
        guests = [asyncio.create_task(one(http, url, n, got, spread * n / sessions)) for n in range(sessions)]
        everyone = asyncio.create_task(got.all_in.wait())
        await asyncio.wait([everyone, *guests], return_when=asyncio.FIRST_COMPLETED)  # a guest done: it failed
        elapsed = time.perf_counter() - t0
        got.all_in.set()
        idle_from = time.time()
        await asyncio.sleep(hold)  # every stream open, nothing to send
        got.held.set()
        results = await asyncio.gather(*guests)
        done.set()
        await prober
        assert outside.stdin is not None
        outside.stdin.close()
        samples = json.loads((await outside.communicate())[0])
    ok = refused = 0
    for frames in results:
        users = [f for f in frames if f["event"] == "message" and f["from"] == "customer"]
        ids = [f["sse_id"] for f in frames]
        answers = [f for f in frames if f["event"] == "message" and f["from"] == "agent"]
        ok += len(users) == 1 and len(ids) == len(set(ids)) and len(answers) == 1
        refused += any(f["event"] == "notice" for f in frames)
    return {
        "sessions": sessions,
        "messages_sent_over_s": spread,
        "exactly_once": ok,
        "refused_by_a_limit": refused,
        "seconds": round(elapsed, 2),
        **_percentiles("", latencies),
        "streams_held_idle_s": hold,
        **_percentiles("idle_", idle),
        **_percentiles("own_process_", [ms for t, ms in samples if t < idle_from]),
        # the five slowest while answering, each with when it started (s from the first guest)
        "own_process_slowest": [
            [round(t - started, 2), round(ms, 1)] for t, ms in sorted(samples, key=lambda x: -x[1])[:5] if t < idle_from
        ],
        **_percentiles("own_process_idle_", [ms for t, ms in samples if t >= idle_from]),
    }


def _worker_process(server: WidgetServer, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``signoff worker`` on the server's database: the answers reach the streams through the
    server's poller, as from any other process."""
    assert server.app.settings is not None
    settings_env = {
        **os.environ,  # noqa: TID251  (the child process inherits the bench's PATH and the like)
        **demo_env(server.app.settings.signoff_database_url),
        "SIGNOFF_SHOPIFY_CLIENT_SECRET": PROXY_SECRET,
        "SIGNOFF_JWT_SECRET": JWT_SECRET,
        **env,
        "PYTHONPATH": str(ROOT),
    }
    cmd = [sys.executable, "-c", "import sys; from bot.cli import main; sys.exit(main())", "worker"]
    return subprocess.Popen(cmd, env=settings_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def probe_from_own_process(url: str) -> None:
    """``/healthz`` every 10 ms from a process of its own (not slowed by the bench's loop or its
    GIL) until stdin closes; prints [[wall time, ms], …]."""
    stop = threading.Event()

    def until_stdin_closes() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=until_stdin_closes, daemon=True).start()
    parts = urlsplit(url)
    conn = HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
    out: list[tuple[float, float]] = []
    print("ready", flush=True)
    while not stop.is_set():
        t0, p0 = time.time(), time.perf_counter()
        conn.request("GET", "/healthz")
        conn.getresponse().read()
        out.append((t0, (time.perf_counter() - p0) * 1000))
        time.sleep(0.01)
    print(json.dumps(out))


def serve(sessions: int, worker_process: bool, model_s: float) -> None:
    """The server (and, with ``worker_process``, a ``signoff worker`` beside it) in this process,
    which is not the bench's: prints its URL, serves until stdin closes."""
    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp) / "policy.yaml"
        text = (ROOT / "agent" / "data" / "policy.yaml").read_text()
        # The shop's guest budget (policy ``strangers``) would refuse most of 200 guests at once.
        for name, value in (
            ("max_new_conversations_per_hour_per_group: 60", "100000"),
            ("max_model_tokens_per_day_per_group: 1000000", "1000000000"),
        ):
            text = text.replace(name, f"{name.split(':')[0]}: {value}")
        policy.write_text(text)
        env = {
            "SIGNOFF_WIDGET_ORIGINS": "https://bench.example",
            "SIGNOFF_WIDGET_SESSIONS_PER_IP_HOUR": str(sessions * 2),
            "SIGNOFF_POLICY_FILE": str(policy),
        }
        with widget_server(SlowPlanner(model_s), worker=not worker_process, **env) as server:
            settle_heap()  # as `signoff serve` does once it listens
            worker = _worker_process(server, env) if worker_process else None
            try:
                print(server.url, flush=True)
                sys.stdin.read()
            finally:
                if worker is not None:
                    worker.terminate()
                    worker.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--hold", type=float, default=10.0, help="seconds every stream stays open, idle, after")
    parser.add_argument(
        "--worker-process",
        action="store_true",
        help="the turns in a `signoff worker` of their own",
    )
    parser.add_argument(
        "--spread", type=float, default=0.0, help="seconds over which the guests send (0: every guest at once)"
    )
    parser.add_argument("--model-ms", type=float, default=0.0, help="the offline planner's time to answer a call")
    parser.add_argument("--probe", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        probe_from_own_process(args.probe)
        return 0
    if args.serve:
        serve(args.sessions, args.worker_process, args.model_ms / 1000)
        return 0
    cmd = [sys.executable, __file__, "--serve", "--sessions", str(args.sessions), "--model-ms", str(args.model_ms)]
    server = subprocess.Popen(
        cmd + (["--worker-process"] if args.worker_process else []), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        url = server.stdout.readline().decode().strip()
        if not url.startswith("http"):
            raise SystemExit("the server did not start")
        figures = asyncio.run(load(url, args.sessions, args.hold, args.spread))
    finally:
        server.stdin.close()
        server.wait(60)
    figures["worker"] = "own process" if args.worker_process else "in the server's process"
    figures["model_ms"] = args.model_ms
    for k, v in figures.items():
        print(f"{k}: {v}")
    name = "widget_load" + ("_worker_process" if args.worker_process else "") + ("_paced" if args.spread else "")
    write_result(name, figures)
    return 0 if figures["exactly_once"] == args.sessions else 1


if __name__ == "__main__":
    raise SystemExit(main())
