"""The widget under test: the composition root's own app (demo data, a migrated SQLite file) on a
loopback port in a thread of its own, and a fake Shopify storefront that proxies
``/apps/signoff/*`` to it as Shopify's app proxy does (signed query, cookies stripped)."""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from agent.llm.base import ModelClient
from bot.app import App, create_app
from bot.cli.slack_demo import demo_database
from bot.server import make_web_app
from bot.settings import load_settings
from bot.widget.demo import demo_env, demo_routes
from bot.widget.proxy import signed_query

PROXY_SECRET = "test-app-client-secret"
JWT_SECRET = "widget-test-jwt-secret-of-at-least-32-bytes"
SHOP = "northwind.myshopify.com"
STOREFRONT = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Storefront</title></head>
<body><main><h1>Northwind storefront</h1></main>
<script src="/apps/signoff/signoff.js" async></script></body></html>"""
_HOP = {"host", "cookie", "content-length", "transfer-encoding", "connection"}


@dataclass
class Storefront:
    """``/`` is a storefront page; ``/apps/signoff/<path>`` goes to ``<upstream>/shopify/proxy/<path>``
    signed for ``customer`` (None: a guest), with the Cookie and Set-Cookie headers removed."""

    upstream: str
    customer: str | None = None
    signed: list[str] = field(default_factory=list)

    async def page(self, request: web.Request) -> web.Response:
        return web.Response(text=STOREFRONT, content_type="text/html")

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        params = {
            "shop": SHOP,
            "logged_in_customer_id": self.customer or "",
            "path_prefix": "/apps/signoff",
            "timestamp": str(int(time.time())),
        }
        url = f"{self.upstream}/shopify/proxy/{request.match_info['tail']}"
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        body = await request.read()
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as s,
            s.request(request.method, url, params=signed_query(params, PROXY_SECRET), headers=headers, data=body) as r,
        ):
            out = web.StreamResponse(status=r.status)
            for k, v in r.headers.items():
                if k.lower() not in _HOP | {"set-cookie", "content-encoding"}:
                    out.headers[k] = v
            await out.prepare(request)
            async for chunk in r.content.iter_any():
                await out.write(chunk)
            return out

    def app(self) -> web.Application:
        a = web.Application()
        a.router.add_get("/", self.page)
        a.router.add_route("*", "/apps/signoff/{tail:.*}", self.proxy)
        return a


@dataclass
class WidgetServer:
    app: App
    url: str
    storefront: Storefront
    storefront_url: str
    loop: asyncio.AbstractEventLoop

    def run(self, coro: Any, timeout: float = 60.0) -> Any:
        """Run ``coro`` on the server's loop (its database, its runtime)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


async def _start(tmp: Path, model: ModelClient | None, env: dict[str, str], worker: bool) -> tuple[Any, ...]:
    url = await demo_database(tmp / "widget.db")
    settings = load_settings(
        {**demo_env(url), "SIGNOFF_SHOPIFY_CLIENT_SECRET": PROXY_SECRET, "SIGNOFF_JWT_SECRET": JWT_SECRET, **env}
    )
    app = await create_app(settings, model=model, seed=False)
    runner = web.AppRunner(make_web_app(app, extra_routes=demo_routes()), access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    front = Storefront(upstream=base)
    front_runner = web.AppRunner(front.app(), access_log=None, shutdown_timeout=2.0)
    await front_runner.setup()
    await web.TCPSite(front_runner, "127.0.0.1", 0).start()
    stop = asyncio.Event()
    jobs = asyncio.create_task(app.worker().run_forever(stop)) if worker else None
    return app, base, front, f"http://127.0.0.1:{front_runner.addresses[0][1]}", (runner, front_runner, stop, jobs)


async def _stop(app: App, parts: tuple[Any, ...]) -> None:
    runner, front_runner, stop, jobs = parts
    stop.set()
    if jobs is not None:
        await jobs
    await front_runner.cleanup()
    await runner.shutdown()
    await runner.cleanup()
    await app.close()


@contextmanager
def widget_server(model: ModelClient | None = None, /, *, worker: bool = True, **env: str) -> Iterator[WidgetServer]:
    """The server on a loop in its own thread, for a synchronous browser driver; ``worker=False``:
    no worker in it (one runs elsewhere: ``signoff worker`` on the same database)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    with tempfile.TemporaryDirectory(prefix="signoff-widget-test-") as tmp:
        started = asyncio.run_coroutine_threadsafe(_start(Path(tmp), model, env, worker), loop).result(120)
        app, base, front, front_url, parts = started
        try:
            yield WidgetServer(app=app, url=base, storefront=front, storefront_url=front_url, loop=loop)
        finally:
            asyncio.run_coroutine_threadsafe(_stop(app, parts), loop).result(60)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
