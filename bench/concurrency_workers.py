"""Concurrent widget conversations answered by ``signoff worker`` processes: how turns scale with
workers, while the model takes 300 ms.

``bench/concurrency.py`` runs each turn inside the request (``POST /api/chat``), in the one
``signoff serve`` process. Here the turns are jobs, as on every durable face: each of
``--concurrency`` guests opens a widget session and its stream, then sends ``--chats``
messages one after another (``POST /widget/api/messages`` → 202, the answer read from the
stream; each a new session and conversation after that). A real ``signoff serve --no-worker``
takes the messages and streams the answers; the turns run in ``--workers`` real ``signoff
worker`` processes (every count given is one configuration, each on a fresh database). The
model is the same strict Anthropic fake in a process of its own (two calls a message:
``search_knowledge``, then the answer), reached through the real SDK client.

Figures per configuration, over the measured window: model calls per second against the ideal
``concurrency / latency``, the time from sending a message to its whole answer in the stream
(and per model step, less the model's latency), the CPU per model call of the server and of
the workers together. The live answer's pacing in the stream (``SIGNOFF_WIDGET_CHUNK_DELAY_S``)
is off: what is measured is the path to the model and back.

    .venv/bin/python bench/concurrency_workers.py [--workers 1 2] [--concurrency 200]
        [--latency-ms 300] [--seconds 20] [--worker-concurrency N] [--only sqlite|postgresql] [--profile]
    SIGNOFF_BENCH_PG_URL=postgresql+asyncpg://…/<the benchmarks' own database>  # adds PostgreSQL
"""

from __future__ import annotations

import argparse
import asyncio
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

from bench.common import environment, write_result  # noqa: E402
from bench.concurrency import ModelProcess, Window, backends, floor, measure, report_one, reset_pg  # noqa: E402
from bench.widget_load import _frames  # noqa: E402

ORIGIN = "https://bench.example"
QUESTION = "how long does shipping take?"


async def _answered(frames: Any) -> bool:
    """Read the stream until the agent's whole answer (or a notice) arrives; ``False`` if it ends."""
    async for f in frames:
        if f.get("event") == "message" and f.get("from") == "agent" or f.get("event") == "notice":
            return True
    return False


async def widget_loop(
    i: int, session: aiohttp.ClientSession, url: str, w: Window, stop: asyncio.Event, args: argparse.Namespace
) -> None:
    """A guest: a session and its stream, ``--chats`` messages each answered before the next; again."""
    k = 0
    while not stop.is_set():
        try:
            async with session.post(f"{url}/widget/api/session", json={}, headers={"Origin": ORIGIN}) as r:
                if r.status != 200:
                    w.error(f"session HTTP {r.status}")
                    await asyncio.sleep(0.1)
                    continue
                who = {"Origin": ORIGIN, "X-Signoff-Session": (await r.json())["session"]}
            async with session.get(f"{url}/widget/api/stream", headers=who) as stream:
                frames = _frames(stream)
                for _ in range(args.chats):
                    if stop.is_set():
                        return
                    k += 1
                    t0 = time.perf_counter()
                    body = {"clientId": f"g{i}-{k}", "text": f"{QUESTION} ({k})"}
                    async with session.post(f"{url}/widget/api/messages", json=body, headers=who) as r:
                        if r.status != 202:
                            w.error(f"message HTTP {r.status}")
                            break
                    if not await _answered(frames):
                        w.error("stream ended")
                        break
                    ms = (time.perf_counter() - t0) * 1000
                    if w.open:
                        w.chat_ms.append(ms)
                        w.added_ms.append(ms / 2 - args.latency_ms)
                        w.steps += 2
        except (TimeoutError, aiohttp.ClientError) as exc:
            w.error(type(exc).__name__)
            await asyncio.sleep(0.1)


def _policy(tmp: Path) -> Path:
    """The bundled policy with the guests' shared budgets lifted (hundreds of guests an hour)."""
    text = (ROOT / "agent" / "data" / "policy.yaml").read_text()
    for name in ("max_new_conversations_per_hour_per_group: 60", "max_model_tokens_per_day_per_group: 1000000"):
        assert name in text, name
        text = text.replace(name, f"{name.split(':')[0]}: 1000000000")
    path = tmp / "policy.yaml"
    path.write_text(text)
    return path


async def configuration(
    name: str, db_url: str, workers: int, model: ModelProcess, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    """One server and ``workers`` worker processes on a fresh database; the window's figures."""
    from tests.slack_kit import DEMO, SIGNOFF, Serve, env_for, run_cli

    env = env_for(tmp / f"{name}-{workers}.db", anthropic=model.url, slack="http://127.0.0.1:9", policy=_policy(tmp))
    for key in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SIGNOFF_SLACK_API_URL", "SIGNOFF_APPROVALS_CHANNEL"):
        env.pop(key, None)
    env.update(
        SIGNOFF_DATABASE_URL=db_url,
        SIGNOFF_LOG_LEVEL="WARNING",
        SIGNOFF_WIDGET="true",
        SIGNOFF_WIDGET_ORIGINS=ORIGIN,
        SIGNOFF_WIDGET_SESSIONS_PER_IP_HOUR="1000000",
        SIGNOFF_WIDGET_CHUNK_DELAY_S="0",
    )
    if args.worker_concurrency:
        env["SIGNOFF_WORKER_CONCURRENCY"] = str(args.worker_concurrency)
    if name == "postgresql":
        await reset_pg(db_url)
    for cmd in (("db", "upgrade"), ("store", "load", str(DEMO), "--rebase-to-now")):
        code, out = await run_cli(env, *cmd)
        assert code == 0, out
    log = (tmp / f"{name}-{workers}.log").open("ab")

    class BenchServe(Serve):
        @property
        def log_path(self) -> Path:  # a PostgreSQL URL names no file to put it beside
            return tmp / f"{name}-{workers}.log"

    server = BenchServe(env, args=("--no-worker",))
    await server.start()
    assert server.proc is not None
    prof = Path(tempfile.gettempdir()) / f"signoff-{name}-{workers}-worker.prof"
    first = (sys.executable, str(ROOT / "bench" / "profile_serve.py"), str(prof)) if args.profile else (str(SIGNOFF),)
    procs = [
        await asyncio.create_subprocess_exec(
            *(first if i == 0 else (str(SIGNOFF),)), "worker", env=env, stdout=log, stderr=log
        )
        for i in range(workers)
    ]
    try:
        pids = tuple(p.pid for p in procs)
        figures = await measure(
            server.url, model, args, widget_loop, server_pid=server.proc.pid, worker_pids=pids, profiled_pid=pids[0]
        )
        figures["workers"] = workers
    finally:
        for p in procs:
            if p.returncode is None:
                p.send_signal(signal.SIGTERM)
        await asyncio.gather(*(asyncio.wait_for(p.wait(), 30) for p in procs), return_exceptions=True)
        await server.stop()
        log.close()
    if args.profile:
        from bench.concurrency import profile_top

        figures["worker_profile_top"] = profile_top(prof, 40)
    return figures


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="signoff-conc-workers-"))
    results: dict[str, Any] = {
        "concurrency": args.concurrency,
        "latency_ms": args.latency_ms,
        "seconds": args.seconds,
        "chats_per_session": args.chats,
        "steps_per_chat": 2,
        "worker_concurrency": args.worker_concurrency or "default",
    }
    try:
        async with ModelProcess(args.latency_ms / 1000) as model:
            results["floor_model_direct"] = await floor(model, args)
            report_one("floor (SDK -> fake, no signoff)", results["floor_model_direct"])
            for name, url in backends(args, tmp):
                for workers in args.workers:
                    db_url = f"sqlite+aiosqlite:///{tmp / f'{name}-{workers}.sqlite'}" if name == "sqlite" else url
                    figures = await configuration(name, db_url, workers, model, args, tmp)
                    results[f"{name}_{workers}_workers"] = figures
                    report_one(f"signoff serve --no-worker + {workers} worker(s), {name}", figures)
    finally:
        if args.keep_logs:
            print(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--worker-concurrency", type=int, default=0, help="SIGNOFF_WORKER_CONCURRENCY (0: the default)")
    p.add_argument("--concurrency", type=int, default=200)
    p.add_argument("--latency-ms", type=float, default=300.0)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--chats", type=int, default=4, help="messages per session")
    p.add_argument("--only", choices=["sqlite", "postgresql"], help="one backend (default: both)")
    p.add_argument("--name", default="concurrency_workers", help="the results file's name")
    p.add_argument("--keep-logs", action="store_true", help="keep the processes' logs (and databases)")
    p.add_argument("--profile", action="store_true", help="the first worker under cProfile for the window")
    args = p.parse_args()
    figures = asyncio.run(run(args))
    figures["environment"] = environment()
    write_result(args.name, figures)


if __name__ == "__main__":
    main()
