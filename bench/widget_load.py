"""200 widget sessions streaming at once on one process: every message delivered exactly once,
and ``GET /healthz`` p99 while they stream (target < 100 ms).

The composition root's own app (sandbox, the offline planner) on a loopback port in a thread of
this process; the 200 guests each open a session, start their stream, send one message and read
until its answer is complete. ``/healthz`` is timed every 10 ms meanwhile. Usage:
``.venv/bin/python bench/widget_load.py [--sessions 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import write_result  # noqa: E402
from tests.widget_kit import widget_server  # noqa: E402

QUESTION = "What is your refund policy?"


async def one(session: aiohttp.ClientSession, url: str, n: int) -> list[dict[str, Any]]:
    """A guest: open, stream, send one message, read until its answer is whole; every frame seen."""
    async with session.post(f"{url}/widget/api/session", json={}, headers={"Origin": "https://bench.example"}) as r:
        who = {"Origin": "https://bench.example", "X-Signoff-Session": (await r.json())["session"]}
    seen: list[dict[str, Any]] = []
    async with session.get(f"{url}/widget/api/stream", headers=who) as stream:
        async with session.post(
            f"{url}/widget/api/messages", json={"clientId": f"b-{n}", "text": QUESTION}, headers=who
        ) as r:
            assert r.status == 202, r.status
        frame: dict[str, Any] = {}
        async for line in stream.content:
            if line.startswith(b"id: "):
                frame = {"sse_id": line[4:].decode().strip()}
            elif line.startswith(b"event: "):
                frame["event"] = line[7:].decode().strip()
            elif line.startswith(b"data: "):
                seen.append({**frame, **json.loads(line[6:])})
                last = seen[-1]
                if last["event"] == "message" and last["from"] == "agent" or last["event"] == "notice":
                    return seen
    return seen


async def load(url: str, sessions: int) -> dict[str, Any]:
    latencies: list[float] = []
    done = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as http:

        async def probe() -> None:
            while not done.is_set():
                t0 = time.perf_counter()
                async with http.get(f"{url}/healthz") as r:
                    await r.read()
                latencies.append((time.perf_counter() - t0) * 1000)
                await asyncio.sleep(0.01)

        prober = asyncio.create_task(probe())
        t0 = time.perf_counter()
        results = await asyncio.gather(*(one(http, url, n) for n in range(sessions)))
        elapsed = time.perf_counter() - t0
        done.set()
        await prober
    ok = refused = 0
    for frames in results:
        users = [f for f in frames if f["event"] == "message" and f["from"] == "customer"]
        ids = [f["sse_id"] for f in frames]
        answers = [f for f in frames if f["event"] == "message" and f["from"] == "agent"]
        ok += len(users) == 1 and len(ids) == len(set(ids)) and len(answers) == 1
        refused += any(f["event"] == "notice" for f in frames)
    latencies.sort()
    return {
        "sessions": sessions,
        "exactly_once": ok,
        "refused_by_a_limit": refused,
        "seconds": round(elapsed, 2),
        "healthz_samples": len(latencies),
        "healthz_p50_ms": round(statistics.median(latencies), 1),
        "healthz_p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    args = parser.parse_args()
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
            "SIGNOFF_WIDGET_SESSIONS_PER_IP_HOUR": str(args.sessions * 2),
            "SIGNOFF_POLICY_FILE": str(policy),
        }
        with widget_server(**env) as server:
            figures = asyncio.run(load(server.url, args.sessions))
    for k, v in figures.items():
        print(f"{k}: {v}")
    write_result("widget_load", figures)
    return 0 if figures["exactly_once"] == args.sessions else 1


if __name__ == "__main__":
    raise SystemExit(main())
