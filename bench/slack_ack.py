"""Slack's acknowledgement: signed events at 50/s to a real ``signoff serve`` while the model takes 5 s.

Slack wants the 200 within 3 s and retries otherwise. Each event is a customer's DM
(its own thread, so its own conversation), signed as Slack signs it, sent on a fixed
schedule (50 a second, open loop: a slow ack does not slow the sender). The model (the
strict local Anthropic fake, through the real SDK) answers after ``--model-s`` seconds.
Reported: ack latency p50/p99/max, and once the worker is done, replies lost (an event
with no reply) and duplicated (more than one). The floor, in the same run: ``GET
/healthz`` on the same server at the same rate (an aiohttp round trip with one read).

    .venv/bin/python bench/slack_ack.py [--rate 50] [--seconds 10] [--model-s 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import environment, summary, write_result  # noqa: E402
from sandbox.slack_web import FakeSlackApi  # noqa: E402
from tests.fakes.anthropic_api import FakeAnthropicAPI, text_turn  # noqa: E402
from tests.slack_kit import DEMO, SIGNOFF, Serve, env_for, event_body, run_cli, signed_headers  # noqa: E402

MAYA = "U07MAYA"


async def _paced(n: int, rate: float, send: Any) -> list[float]:
    """Start ``send(i)`` at ``i / rate`` seconds, whatever the earlier ones are doing; their latencies (ms)."""
    t0 = time.perf_counter()

    async def one(i: int) -> float:
        await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
        start = time.perf_counter()
        await send(i)
        return (time.perf_counter() - start) * 1000

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async def slow(_body: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(args.model_s)
        return text_turn("Thanks — here is what I found.")

    tmp = Path(tempfile.mkdtemp(prefix="signoff-ack-"))
    try:
        async with FakeAnthropicAPI(slow) as model, FakeSlackApi() as slack:
            env = env_for(tmp / "ack.db", anthropic=model.base_url, slack=slack.base_url)
            assert (await run_cli(env, "db", "upgrade"))[0] == 0
            assert (await run_cli(env, "store", "load", str(DEMO), "--rebase-to-now"))[0] == 0
            server = Serve(env, args=("--no-worker",) if args.worker == "process" else ())
            await server.start()
            worker = None
            if args.worker == "process":
                worker = await asyncio.create_subprocess_exec(
                    str(SIGNOFF),
                    "worker",
                    env=env,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.DEVNULL,
                )
            n = int(args.rate * args.seconds)
            statuses: list[int] = []
            try:
                async with aiohttp.ClientSession() as session:

                    async def healthz(_i: int) -> None:
                        async with session.get(f"{server.url}/healthz") as r:
                            await r.read()

                    async def event(i: int) -> None:
                        ts = f"{1_800_000_000 + i}.000100"
                        ev = {
                            "type": "message",
                            "channel_type": "im",
                            "channel": f"D{i:08d}",
                            "user": MAYA,
                            "text": f"hello {i}",
                            "ts": ts,
                            "team": "T0SIGNOFF",
                        }
                        body = event_body(ev, event_id=f"EvAck{i:06d}")
                        async with session.post(
                            f"{server.url}/slack/events",
                            data=body.encode(),
                            headers={"Content-Type": "application/json", **signed_headers(body)},
                        ) as r:
                            await r.read()
                            statuses.append(r.status)

                    floor = await _paced(n, args.rate, healthz)
                    acks = await _paced(n, args.rate, event)
                    deadline = time.monotonic() + args.model_s * (n / 32 + 2) + 60
                    try:
                        await slack.until(
                            lambda: _replied(slack, n)[0] >= n, within_s=max(1.0, deadline - time.monotonic())
                        )
                    except TimeoutError:
                        pass  # counted as lost below
                    await asyncio.sleep(2)  # anything late would be a duplicate
            finally:
                await server.stop()
                if worker is not None:
                    worker.terminate()
                    await worker.wait()
            replied, duplicated = _replied(slack, n)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "worker": args.worker,
        "rate_per_s": args.rate,
        "events": n,
        "model_s": args.model_s,
        "ack_ms": summary(acks),
        "ack_p99_ms": sorted(acks)[min(n - 1, int(n * 0.99))],
        # The slowest ack of each second of sending: a warm-up shows in the first, a stall anywhere.
        "ack_max_ms_by_second": [
            round(max(acks[int(s * args.rate) : int((s + 1) * args.rate)] or [0.0]), 1)
            for s in range(int(args.seconds))
        ],
        "floor_healthz_ms": summary(floor),
        "non_200": sum(1 for s in statuses if s != 200),
        "lost": n - replied,
        "duplicated": duplicated,
    }


def _replied(slack: FakeSlackApi, n: int) -> tuple[int, int]:
    """(events with a reply, extra replies) by DM channel."""
    per: dict[str, int] = {}
    for call in slack.calls():
        if call.method in ("chat.postMessage", "chat.startStream") and call.response.get("ok"):
            channel = str(call.args.get("channel"))
            if channel.startswith("D"):
                per[channel] = per.get(channel, 0) + 1
    return len(per), sum(c - 1 for c in per.values() if c > 1)


def report(f: dict[str, Any]) -> None:
    a, h = f["ack_ms"], f["floor_healthz_ms"]
    print(
        f"slack ack: {f['events']} signed events at {f['rate_per_s']}/s, model {f['model_s']} s, worker {f['worker']}"
    )
    print(
        f"  ack      p50 {a['median']:.1f} ms  p95 {a['p95']:.1f} ms"
        f"  p99 {f['ack_p99_ms']:.1f} ms  max {a['max']:.1f} ms"
    )
    print(f"  slowest ack in each second of sending (ms): {f['ack_max_ms_by_second']}")
    print(f"  floor    /healthz p50 {h['median']:.1f} ms  p95 {h['p95']:.1f} ms  max {h['max']:.1f} ms")
    print(f"  ratio    ack p50 / floor p50 = {a['median'] / max(h['median'], 1e-9):.1f}x")
    print(f"  non-200 {f['non_200']}, replies lost {f['lost']}, duplicated {f['duplicated']}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--model-s", type=float, default=5.0)
    p.add_argument(
        "--worker",
        choices=("in-process", "process"),
        default="in-process",
        help="the worker inside signoff serve (the default) or as its own `signoff worker` process",
    )
    args = p.parse_args()
    figures = asyncio.run(run(args))
    figures["environment"] = environment()
    report(figures)
    print(f"written {write_result('slack_ack', figures)}")
    print(json.dumps({k: figures[k] for k in ("lost", "duplicated", "non_200")}))


if __name__ == "__main__":
    main()
