"""200 concurrent conversations through a real ``signoff serve`` while the model takes 300 ms.

The model is the strict local Anthropic fake (``tests/fakes/anthropic_api.py``) in its own
process, reached by the server's real ``anthropic`` SDK client; the load driver is this
process. Each of ``--concurrency`` clients (a rep, bound to one of the demo's customers) runs
one conversation after another over ``POST /api/chat``: ``--chats`` messages each, every
message two model steps (``search_knowledge``, then the answer). Measured over
``--seconds`` after a warm-up:

- throughput: model calls per second against the ideal ``concurrency / latency``;
- added latency per step: a chat's time divided by its steps, minus the model's latency;
- peak RSS of the server (``VmHWM``).

The floor, in the same run: the same clients calling the fake model directly through the
SDK (no signoff): what the machine, the fake and the driver can do at this concurrency.
SQLite, and PostgreSQL when ``SIGNOFF_BENCH_PG_URL`` is set (its ``public`` schema is
dropped and rebuilt: use the benchmarks' own database).

    .venv/bin/python bench/concurrency.py [--concurrency 200] [--latency-ms 300] [--seconds 20]
        [--profile]   # also: cProfile of the server under the load, top functions printed
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import PG_URL_ENV, environment, summary, write_result  # noqa: E402

JWT_SECRET = "bench-jwt-secret-that-is-long-enough-for-hs256"
REPS = ("S-1", "S-2")


# -- the model, in its own process ------------------------------------------------------------


def model_process(latency_s: float) -> None:
    """``--model-server``: the fake on a free port; prints its URL, then serves until stdin closes."""
    from tests.fakes.anthropic_api import FakeAnthropicAPI, text_turn, tool_turn

    calls = [0]

    async def respond(body: dict[str, Any]) -> dict[str, Any]:
        calls[0] += 1
        await asyncio.sleep(latency_s)
        last = body["messages"][-1]["content"]
        answered = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
        if answered:
            return text_turn("Here is what the help centre says about that.")
        return tool_turn("search_knowledge", {"query": "shipping times"})

    async def main() -> None:
        api = FakeAnthropicAPI(respond)
        api.record = lambda _r: None  # type: ignore[method-assign]  # nothing kept: a long run stays flat

        async def stats(_req: Any) -> Any:
            from aiohttp import web

            return web.json_response({"calls": calls[0]})

        api.routes = (lambda orig: lambda: [*orig(), aiohttp.web.get("/stats", stats)])(api.routes)  # type: ignore[method-assign]
        async with api:
            print(api.base_url, flush=True)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, sys.stdin.read)

    asyncio.run(main())


class ModelProcess:
    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self.proc: asyncio.subprocess.Process | None = None
        self.url = ""

    async def __aenter__(self) -> ModelProcess:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--model-server",
            "--latency-ms",
            str(self.latency_s * 1000),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        self.url = (await asyncio.wait_for(self.proc.stdout.readline(), 60)).decode().strip()
        return self

    async def calls(self, session: aiohttp.ClientSession) -> int:
        async with session.get(f"{self.url}/stats") as r:
            return int((await r.json())["calls"])

    async def __aexit__(self, *exc: object) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.close()
        await asyncio.wait_for(self.proc.wait(), 20)


# -- the driver -------------------------------------------------------------------------------


class Window:
    """What the clients measured between ``start`` and ``stop``."""

    def __init__(self) -> None:
        self.open = False
        self.added_ms: list[float] = []
        self.chat_ms: list[float] = []
        self.steps = 0
        self.errors: dict[str, int] = {}

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


async def client_loop(
    i: int, session: aiohttp.ClientSession, url: str, w: Window, stop: asyncio.Event, args: argparse.Namespace
) -> None:
    from bot.api.auth import make_token

    token = make_token(JWT_SECRET, sub=REPS[i % 2], role="rep", ttl_s=3600)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    customer = f"C-{i % 60 + 1}"
    latency_ms = args.latency_ms
    while not stop.is_set():
        conversation: str | None = None
        for n in range(args.chats):
            if stop.is_set():
                return
            body: dict[str, Any] = {"conversationId": conversation, "message": f"how long does shipping take? ({n})"}
            if conversation is None:
                body["customerId"] = customer
            t0 = time.perf_counter()
            try:
                async with session.post(f"{url}/api/chat", data=json.dumps(body), headers=headers) as r:
                    data = await r.json()
                    status = r.status
            except (TimeoutError, aiohttp.ClientError) as exc:
                w.error(type(exc).__name__)
                await asyncio.sleep(0.1)
                break
            ms = (time.perf_counter() - t0) * 1000
            if status != 200:
                w.error(f"HTTP {status} {data.get('error')}")
                await asyncio.sleep(0.1)
                break
            conversation = data["conversationId"]
            steps = int(data["iterations"])
            if w.open and steps:
                w.chat_ms.append(ms)
                w.added_ms.append(ms / steps - latency_ms)
                w.steps += steps


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(
    url: str,
    model: ModelProcess,
    args: argparse.Namespace,
    loop_fn: Any = client_loop,
    server_pid: int | None = None,
    worker_pids: tuple[int, ...] = (),
    profiled_pid: int | None = None,
) -> dict[str, Any]:
    """Run the clients; the figures of the measured window (with the server's CPU time, and the
    worker processes' together, when given). With ``args.profile`` the profiled process (the
    server unless another is named) is told when the window starts and ends."""
    profiled_pid = profiled_pid or server_pid
    w, stop = Window(), asyncio.Event()
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        tasks = [asyncio.create_task(loop_fn(i, session, url, w, stop, args)) for i in range(args.concurrency)]
        await asyncio.sleep(args.warmup)
        w.open = True
        if profiled_pid and args.profile:
            os.kill(profiled_pid, signal.SIGUSR1)
        cpu0 = cpu_s(server_pid) if server_pid else 0.0
        wcpu0 = sum(cpu_s(p) for p in worker_pids)
        c0, t0 = await model.calls(session), time.perf_counter()
        await asyncio.sleep(args.seconds)
        c1, t1 = await model.calls(session), time.perf_counter()
        cpu1 = cpu_s(server_pid) if server_pid else 0.0
        wcpu1 = sum(cpu_s(p) for p in worker_pids)
        if profiled_pid and args.profile:
            os.kill(profiled_pid, signal.SIGUSR2)
        w.open = False
        stop.set()
        await asyncio.gather(*tasks)
    per_s = (c1 - c0) / (t1 - t0)
    ideal = args.concurrency / (args.latency_ms / 1000)
    return {
        "model_calls_per_s": per_s,
        "ideal_per_s": ideal,
        "of_ideal": per_s / ideal,
        "added_ms_per_step": summary(w.added_ms),
        "chat_ms": summary(w.chat_ms),
        "steps_measured": w.steps,
        "errors": w.errors,
        **(
            {
                "server_cpu_share": (cpu1 - cpu0) / (t1 - t0),
                "server_cpu_ms_per_model_call": (cpu1 - cpu0) * 1000 / max(1, c1 - c0),
            }
            if server_pid
            else {}
        ),
        **(
            {
                "workers_cpu_share": (wcpu1 - wcpu0) / (t1 - t0),
                "workers_cpu_ms_per_model_call": (wcpu1 - wcpu0) * 1000 / max(1, c1 - c0),
            }
            if worker_pids
            else {}
        ),
    }


async def floor_loop(
    i: int, session: aiohttp.ClientSession, url: str, w: Window, stop: asyncio.Event, args: argparse.Namespace
) -> None:
    """The floor's client: the same two-step exchange straight to the model through the SDK."""
    import anthropic  # noqa: TID251  (the bench's floor calls the fake directly)

    sdk = FLOOR_SDK[0]
    assert isinstance(sdk, anthropic.AsyncAnthropic)
    tools = [{"name": "search_knowledge", "description": "search", "input_schema": {"type": "object"}}]
    while not stop.is_set():
        messages: list[dict[str, Any]] = [{"role": "user", "content": "how long does shipping take?"}]
        t0 = time.perf_counter()
        try:
            first = await sdk.messages.create(model="m", max_tokens=256, messages=messages, tools=tools)  # type: ignore[arg-type]
            use = next(b for b in first.content if b.type == "tool_use")
            messages += [
                {"role": "assistant", "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "ok"}]},
            ]
            await sdk.messages.create(model="m", max_tokens=256, messages=messages, tools=tools)  # type: ignore[arg-type]
        except anthropic.AnthropicError as exc:
            w.error(type(exc).__name__)
            continue
        ms = (time.perf_counter() - t0) * 1000
        if w.open:
            w.chat_ms.append(ms)
            w.added_ms.append(ms / 2 - args.latency_ms)
            w.steps += 2


FLOOR_SDK: list[Any] = []


async def floor(model: ModelProcess, args: argparse.Namespace) -> dict[str, Any]:
    import anthropic  # noqa: TID251
    import httpx2 as httpx

    limits = httpx.Limits(max_connections=args.concurrency * 2, max_keepalive_connections=args.concurrency * 2)
    sdk = anthropic.AsyncAnthropic(
        api_key="bench", base_url=model.url, http_client=anthropic.DefaultAsyncHttpxClient(limits=limits)
    )
    FLOOR_SDK[:] = [sdk]
    try:
        return await measure(model.url, model, args, floor_loop)
    finally:
        await sdk.close()


# -- the server -------------------------------------------------------------------------------


def rss_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


async def reset_pg(url: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute("DROP SCHEMA IF EXISTS public CASCADE; CREATE SCHEMA public")
    finally:
        await conn.close()


async def backend(name: str, db_url: str, model: ModelProcess, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from tests.slack_kit import DEMO, Serve, env_for, run_cli

    env = env_for(tmp / f"{name}.db", anthropic=model.url, slack="http://127.0.0.1:9")
    for key in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SIGNOFF_SLACK_API_URL", "SIGNOFF_APPROVALS_CHANNEL"):
        env.pop(key, None)
    env.update(
        SIGNOFF_DATABASE_URL=db_url,
        SIGNOFF_JWT_SECRET=JWT_SECRET,
        SIGNOFF_LOG_LEVEL="WARNING",
    )
    if name == "postgresql":
        await reset_pg(db_url)
    for cmd in (("db", "upgrade"), ("store", "load", str(DEMO), "--rebase-to-now")):
        code, out = await run_cli(env, *cmd)
        assert code == 0, out
    if args.profile:
        env["SIGNOFF_BENCH_PROFILE"] = str(args.profile_dir / f"{name}.prof")

    class BenchServe(Serve):
        @property
        def log_path(self) -> Path:  # a PostgreSQL URL names no file to put it beside
            return tmp / f"{name}.log"

    # Under cProfile, bench/profile_serve.py wraps `signoff serve`.
    profiled = (sys.executable, str(ROOT / "bench" / "profile_serve.py"), env.get("SIGNOFF_BENCH_PROFILE", ""))
    server = BenchServe(env, command=profiled) if args.profile else BenchServe(env)
    await server.start()
    assert server.proc is not None
    try:
        figures = await measure(server.url, model, args, server_pid=server.proc.pid)
        figures["server_peak_rss_mb"] = rss_kb(server.proc.pid, "VmHWM") / 1024
        figures["server_rss_mb"] = rss_kb(server.proc.pid, "VmRSS") / 1024
    finally:
        await server.stop()
        if server.log_path.exists() and args.verbose:
            print(server.log_path.read_text()[-3000:])
    if args.profile:
        figures["profile_top"] = profile_top(args.profile_dir / f"{name}.prof")
    return figures


def profile_top(path: Path, n: int = 25) -> list[str]:
    import io
    import pstats

    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out)
    stats.sort_stats("tottime").print_stats(n)
    text = out.getvalue()
    print(text)
    return [line for line in text.splitlines() if line.strip()][-n:]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="signoff-conc-"))
    results: dict[str, Any] = {
        "concurrency": args.concurrency,
        "latency_ms": args.latency_ms,
        "seconds": args.seconds,
        "chats_per_conversation": args.chats,
        "steps_per_chat": 2,
    }
    try:
        async with ModelProcess(args.latency_ms / 1000) as model:
            results["floor_model_direct"] = await floor(model, args)
            report_one("floor (SDK -> fake, no signoff)", results["floor_model_direct"])
            for name, url in backends(args, tmp):
                results[name] = await backend(name, url, model, args, tmp)
                report_one(f"signoff serve, {name}", results[name])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def backends(args: argparse.Namespace, tmp: Path) -> list[tuple[str, str]]:
    """``(name, database URL)`` to measure: SQLite in ``tmp``, and PostgreSQL when
    ``SIGNOFF_BENCH_PG_URL`` names the benchmarks' own database; ``--only`` picks one."""
    found = [("sqlite", f"sqlite+aiosqlite:///{tmp / 'bench.db'}")]
    pg_url = os.environ.get(PG_URL_ENV)  # noqa: TID251  (the bench's own database)
    if pg_url:
        found.append(("postgresql", pg_url))
    return [b for b in found if args.only in (None, b[0])]


def report_one(title: str, f: dict[str, Any]) -> None:
    a = f["added_ms_per_step"]
    print(f"{title}:")
    print(
        f"  throughput {f['model_calls_per_s']:.0f} model calls/s of ideal {f['ideal_per_s']:.0f}"
        f" = {f['of_ideal'] * 100:.1f}%  (target >= 90%)"
    )
    if a.get("n"):
        print(
            f"  added per step p50 {a['median']:.1f} ms  p95 {a['p95']:.1f} ms  max {a['max']:.1f} ms"
            f"  (target p95 <= 20 ms; {f['steps_measured']} steps)"
        )
    if "server_cpu_share" in f:
        print(
            f"  server CPU {f['server_cpu_share'] * 100:.0f}% of a core,"
            f" {f['server_cpu_ms_per_model_call']:.1f} ms CPU per model call"
        )
    if "workers_cpu_share" in f:
        print(
            f"  workers' CPU {f['workers_cpu_share'] * 100:.0f}% of a core,"
            f" {f['workers_cpu_ms_per_model_call']:.1f} ms CPU per model call"
        )
    if "server_peak_rss_mb" in f:
        print(f"  server peak RSS {f['server_peak_rss_mb']:.0f} MB")
    if f["errors"]:
        print(f"  errors {f['errors']}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, default=200)
    p.add_argument("--latency-ms", type=float, default=300.0)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--chats", type=int, default=4, help="messages per conversation")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--profile-dir", type=Path, default=Path(tempfile.gettempdir()), help="where <backend>.prof goes")
    p.add_argument("--only", choices=["sqlite", "postgresql"], help="one backend (default: both)")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--model-server", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--name", default="concurrency", help="the results file's name")
    args = p.parse_args()
    if args.model_server:
        model_process(args.latency_ms / 1000)
        return
    figures = asyncio.run(run(args))
    figures["environment"] = environment()
    write_result(args.name, figures)


if __name__ == "__main__":
    main()
