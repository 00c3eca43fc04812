"""The fake Shopify Admin API in a process of its own: ``python -m tests.fakes.shopify_api
--port P`` (:func:`main`) and :func:`fake_process` for tests that start it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from aiohttp import web

from sandbox.dataset import DEMO_DATASET_PATH, load_dataset_file
from tests.fakes.shopify.seed import seed_shop
from tests.fakes.shopify_api import REFUSED_FILE_ENV, FakeShopifyAPI


async def serve(api: FakeShopifyAPI, port: int, ready: Callable[[str], None]) -> None:
    """Serve ``api`` on 127.0.0.1:``port`` (0: any free port) until SIGTERM or SIGINT."""
    app = web.Application()
    app.add_routes(api.routes())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", port).start()
        api.base_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        ready(api.base_url)
        await stop.wait()
    finally:
        await runner.cleanup()


@dataclass
class FakeProcess:
    """The fake served by another process (:func:`fake_process`); ``returncode`` once it stopped
    (1 when some operation failed schema validation: its stderr lists them)."""

    url: str
    process: asyncio.subprocess.Process
    returncode: int | None = None


@contextlib.asynccontextmanager
async def fake_process(*args: str, within_s: float = 60.0) -> AsyncIterator[FakeProcess]:
    """Start ``python -m tests.fakes.shopify_api --port 0 *args``, wait for its URL, and stop it
    (SIGTERM, then wait) on exit; for tests that point a ``signoff serve`` subprocess at it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.fakes.shopify_api", "--port", "0", *args, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), within_s)
        if not line.startswith(b"http://127.0.0.1:"):
            raise RuntimeError(f"the fake Shopify process did not start: {line!r}")
        running = FakeProcess(url=line.decode().strip(), process=proc)
        yield running
    finally:
        if proc.returncode is None:
            proc.terminate()
        code = await asyncio.wait_for(proc.wait(), within_s)
    running.returncode = code


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.fakes.shopify_api --port P``: the seeded demo shop; prints its URL."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.fakes.shopify_api",
        description="the fake Shopify Admin API, seeded from a sandbox dataset",
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--dataset", default=str(DEMO_DATASET_PATH), help="sandbox dataset to seed the shop from")
    parser.add_argument("--no-rebase", action="store_true", help="keep the dataset's times (default: shift to now)")
    parser.add_argument("--client-id", default="fake-client-id")
    parser.add_argument("--client-secret", default="fake-client-secret")
    parser.add_argument("--access-token", default=None, help="also accept this static admin token")
    args = parser.parse_args(argv)
    dataset = load_dataset_file(args.dataset)
    shop = seed_shop(dataset, rebase_to=None if args.no_rebase else datetime.now(UTC).replace(microsecond=0))
    api = FakeShopifyAPI(
        shop, client_id=args.client_id, client_secret=args.client_secret, access_token=args.access_token
    )
    asyncio.run(serve(api, args.port, lambda url: print(url, flush=True)))
    if api.invalid_operations:
        print(json.dumps({"invalid_operations": api.invalid_report()}), file=sys.stderr)
        if os.environ.get(REFUSED_FILE_ENV):
            with open(os.environ[REFUSED_FILE_ENV], "a", encoding="utf-8") as f:
                f.writelines(json.dumps(op) + "\n" for op in api.invalid_report())
        return 1
    return 0
