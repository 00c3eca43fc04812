"""Memory: idle RSS of a real ``signoff serve`` with every face loaded, and RSS over 10,000 conversations.

1. Idle: ``signoff serve`` (SQLite, the demo store) with the HTTP API, the Slack app (bot
   token + signing secret), email (inbound secret + SMTP) and the worker configured, the
   model the real Anthropic client (pointed at the local fake, never called). RSS read from
   ``/proc/<pid>/status`` once ``/healthz`` answers and the process has settled. The floor,
   in the same run: a bare ``python -c "import aiohttp"`` process (the interpreter and the
   web server library alone), and one that imports only the libraries the contract names
   (the official anthropic SDK alone is about 75 MB of it). Target: idle RSS at most 100 MB.
2. Growth: ``--conversations`` conversations (one customer message, one model step each)
   driven in-process through :class:`agent.runtime.Runtime` on SQLite with a zero-latency
   model, RSS sampled every ``--every``. What grows with data (the database file, SQLite's
   page cache) is not a leak; a line that keeps rising after the first samples would be.

    .venv/bin/python bench/memory.py [--conversations 10000] [--every 1000] [--skip-growth]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import environment, write_result  # noqa: E402


def rss_mb(pid: int | str = "self", field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


async def idle(tmp: Path, settle_s: float) -> dict[str, Any]:
    from sandbox.slack_web import FakeSlackApi
    from tests.fakes.anthropic_api import FakeAnthropicAPI
    from tests.slack_kit import DEMO, Serve, env_for, run_cli

    async with FakeAnthropicAPI() as model, FakeSlackApi() as slack:
        env = env_for(tmp / "idle.db", anthropic=model.base_url, slack=slack.base_url)
        env.update(
            SIGNOFF_JWT_SECRET="memory-bench-jwt-secret-long-enough-for-hs256",
            SIGNOFF_EMAIL_SECRET="memory-bench-email-secret",
            SIGNOFF_SMTP_URL="smtp://127.0.0.1:2525",
            SIGNOFF_EMAIL_FROM="support@shop.example",
        )
        for cmd in (("db", "upgrade"), ("store", "load", str(DEMO), "--rebase-to-now")):
            code, out = await run_cli(env, *cmd)
            assert code == 0, out
        server = Serve(env)
        await server.start()
        assert server.proc is not None
        try:
            await asyncio.sleep(settle_s)
            figures = {
                "serve_idle_rss_mb": rss_mb(server.proc.pid),
                "serve_idle_peak_rss_mb": rss_mb(server.proc.pid, "VmHWM"),
                "faces": ["api", "slack", "email", "worker"],
            }
            log = server.log_path.read_text(errors="replace")
            figures["slack_loaded"] = "/slack/events" in log or await _route_exists(server.url, "/slack/events")
        finally:
            await server.stop()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import aiohttp, time; time.sleep(3)", stdout=asyncio.subprocess.DEVNULL
    )
    await asyncio.sleep(2)
    figures["floor_python_aiohttp_rss_mb"] = rss_mb(proc.pid)
    await proc.wait()
    # The second floor: the libraries the contract names (the official anthropic SDK, Bolt and
    # the Slack SDK, async SQLAlchemy with both drivers, aiohttp), imported and nothing else.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", f"{LIBRARIES}; import time; time.sleep(4)", stdout=asyncio.subprocess.DEVNULL
    )
    await asyncio.sleep(3)
    figures["floor_libraries_rss_mb"] = rss_mb(proc.pid)
    await proc.wait()
    return figures


LIBRARIES = (
    "import anthropic, aiohttp, slack_bolt.async_app, slack_sdk.web.async_client,"
    " sqlalchemy.ext.asyncio, aiosqlite, asyncpg"
)


async def _route_exists(url: str, path: str) -> bool:
    import aiohttp

    async with aiohttp.ClientSession() as s, s.post(f"{url}{path}", data=b"{}") as r:
        return r.status != 404


async def growth(tmp: Path, n: int, every: int) -> dict[str, Any]:
    from agent.llm.base import ModelRequest, ModelResponse
    from agent.llm.testing import make_response, text_block
    from agent.runtime import Runtime
    from bot.app import sandbox_services
    from storage.db import create_database
    from tests.slack_kit import DEMO, env_for, run_cli
    from tools.context import Principal

    class Instant:
        """A zero-latency model: one short answer to anything."""

        model_name = "instant"

        async def complete(self, request: ModelRequest) -> ModelResponse:
            return make_response([text_block("Thanks, I have noted that.")], model="instant", request=request)

    env = env_for(tmp / "growth.db", anthropic="http://127.0.0.1:9", slack="http://127.0.0.1:9")
    for cmd in (("db", "upgrade"), ("store", "load", str(DEMO), "--rebase-to-now")):
        code, out = await run_cli(env, *cmd)
        assert code == 0, out
    db = create_database(f"sqlite+aiosqlite:///{tmp / 'growth.db'}")
    rt = Runtime(sandbox_services(db=db, model=Instant()))
    samples = [{"conversations": 0, "rss_mb": rss_mb(), "seconds": 0.0}]
    t0 = time.perf_counter()
    for i in range(1, n + 1):
        # Staff working on an account are not held to the customer's new-conversation limit.
        who = Principal(kind="rep", id="S-1", customer_id=f"C-{i % 60 + 1}")
        await rt.chat(principal=who, channel="api", message=f"note {i}: the customer called", conversation_id=None)
        if i % every == 0:
            gc.collect()
            samples.append(
                {
                    "conversations": i,
                    "rss_mb": rss_mb(),
                    "seconds": time.perf_counter() - t0,
                    "db_mb": (tmp / "growth.db").stat().st_size / 2**20,
                }
            )
            print(f"  {i:6} conversations  RSS {samples[-1]['rss_mb']:.1f} MB  db {samples[-1]['db_mb']:.1f} MB")
    await db.dispose()
    later = [s["rss_mb"] for s in samples[len(samples) // 2 :]]
    return {
        "conversations": n,
        "samples": samples,
        "rss_first_sample_mb": samples[1]["rss_mb"] if len(samples) > 1 else None,
        "rss_last_mb": samples[-1]["rss_mb"],
        "rss_growth_second_half_mb": max(later) - min(later),
        "peak_rss_mb": rss_mb("self", "VmHWM"),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="signoff-mem-"))
    try:
        figures: dict[str, Any] = {"idle": await idle(tmp, args.settle)}
        i = figures["idle"]
        print(
            f"idle signoff serve (api, slack, email, worker): RSS {i['serve_idle_rss_mb']:.1f} MB"
            f" (target <= 100 MB); floor python+aiohttp {i['floor_python_aiohttp_rss_mb']:.1f} MB;"
            f" the required libraries alone {i['floor_libraries_rss_mb']:.1f} MB"
        )
        if not args.skip_growth:
            figures["growth"] = await growth(tmp, args.conversations, args.every)
            g = figures["growth"]
            print(
                f"after {g['conversations']} conversations: RSS {g['rss_last_mb']:.1f} MB"
                f" (first sample {g['rss_first_sample_mb']:.1f} MB; spread over the second half"
                f" {g['rss_growth_second_half_mb']:.1f} MB)"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--conversations", type=int, default=10_000)
    p.add_argument("--every", type=int, default=1000)
    p.add_argument("--settle", type=float, default=3.0)
    p.add_argument("--skip-growth", action="store_true")
    p.add_argument("--name", default="memory")
    args = p.parse_args()
    figures = asyncio.run(run(args))
    figures["environment"] = environment()
    write_result(args.name, figures)


if __name__ == "__main__":
    main()
