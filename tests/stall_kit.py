"""40,000-character DMs from a stranger to a real ``signoff serve``, with ``/healthz`` timed meanwhile.

Each DM is shaped to make a backtracking parser try every split (``link`` and a run of
``a@.``, unclosed mentions, ``<`` and spaces, the runtime's own event tag…). One event loop
serves the HTTP routes and runs the worker's turns, so a parser that stalls on one of these
stalls ``/healthz`` too. Used by ``tests/test_linear_text.py`` and ``bench/stall.py``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp

from sandbox.slack_web import FakeSlackApi
from tests.fakes.anthropic_api import FakeAnthropicAPI, text_turn
from tests.slack_kit import DEMO, Serve, env_for, event_body, run_cli, signed_headers

STRANGER = "U0STRANGER"
SLACK_MAX = 40_000


def _fill(prefix: str, unit: str, tail: str = "") -> str:
    room = SLACK_MAX - len(prefix) - len(tail)
    return prefix + (unit * (room // len(unit) + 1))[:room] + tail


#: The adversarial DMs, each exactly 40,000 characters (Slack's limit).
DMS = (
    _fill("link ", "a@.", " !"),
    _fill("link ", "@", " x"),
    _fill("", "<@U1|"),
    _fill("<", " ", "x"),
    _fill("", "< /"),
    _fill("", "<signoff "),
    _fill("", "<at>"),
    _fill("assist ", "a", " !"),
    _fill("", " "),
    _fill("", "["),
    _fill("to 1", " ", "x"),
    _fill("", "a@"),
)


async def prepared(tmp: Path, model_url: str, slack_url: str) -> dict[str, str]:
    """A migrated database with the demo store, and the environment to serve it."""
    env = env_for(tmp / "stall.db", anthropic=model_url, slack=slack_url)
    assert (await run_cli(env, "db", "upgrade"))[0] == 0
    assert (await run_cli(env, "store", "load", str(DEMO), "--rebase-to-now"))[0] == 0
    return env


def answered(slack: FakeSlackApi, n: int) -> bool:
    """Every DM got its reply (posted, or streamed, in its channel)."""
    done = {c.args.get("channel") for c in slack.calls() if c.method in ("chat.postMessage", "chat.startStream")}
    return all(f"D0STALL{i:03d}" in done for i in range(n))


def _ts(i: int) -> str:
    return f"{1_800_000_000 + i}.000200"


async def healthz_during(
    tmp: Path, *, rounds: int = 1, every_s: float = 0.01, dms: tuple[str, ...] = DMS
) -> dict[str, Any]:
    """Send every DM (``rounds`` times) to a fresh ``signoff serve`` and time ``GET /healthz``
    every ``every_s`` from the first DM until the last is answered. Latencies in ms."""

    async def model(_body: dict[str, Any]) -> dict[str, Any]:
        return text_turn("Hello! I can help once you link your account.")

    async with FakeAnthropicAPI(model) as api, FakeSlackApi() as slack:
        server = Serve(await prepared(tmp, api.base_url, slack.base_url))
        await server.start()
        latencies: list[float] = []
        statuses: list[int] = []
        done = asyncio.Event()
        try:
            async with aiohttp.ClientSession() as session:

                async def probe() -> None:
                    while not done.is_set():
                        t0 = time.perf_counter()
                        async with session.get(f"{server.url}/healthz") as r:
                            await r.read()
                        latencies.append((time.perf_counter() - t0) * 1000)
                        await asyncio.sleep(every_s)

                prober = asyncio.create_task(probe())
                n = 0
                for _ in range(rounds):
                    for text in dms:
                        statuses.append(await _dm(session, server.url, n, text))
                        n += 1
                try:
                    await slack.until(lambda: answered(slack, n), within_s=120)
                finally:
                    done.set()
                    await prober
        finally:
            await server.stop()
    ordered = sorted(latencies)
    return {
        "dms": n,
        "dm_chars": SLACK_MAX,
        "non_200": sum(1 for s in statuses if s != 200),
        "healthz_n": len(ordered),
        "healthz_p50_ms": ordered[len(ordered) // 2],
        "healthz_p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "healthz_max_ms": ordered[-1],
    }


async def _dm(session: aiohttp.ClientSession, url: str, i: int, text: str) -> int:
    ts = _ts(i)
    ev = {
        "type": "message",
        "channel_type": "im",
        "channel": f"D0STALL{i:03d}",
        "user": STRANGER,
        "text": text,
        "ts": ts,
        "team": "T0SIGNOFF",
    }
    body = event_body(ev, event_id=f"EvStall{i:05d}")
    headers = {"Content-Type": "application/json", **signed_headers(body)}
    async with session.post(f"{url}/slack/events", data=body.encode(), headers=headers) as r:
        await r.read()
        return r.status
