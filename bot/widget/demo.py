"""``signoff demo --widget``: a demo storefront with the widget, over the sandbox and the offline
planner, on a temporary SQLite store. Prints the page's URL and serves until Ctrl-C."""

from __future__ import annotations

import tempfile
from importlib import resources
from pathlib import Path

from aiohttp import web

from bot.widget.routes import ASSET_CSP

#: The demo page's own policy: its script, its stylesheet and its API, nothing else.
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def _asset(name: str) -> bytes:
    return resources.files("bot.widget").joinpath(f"static/{name}").read_bytes()


async def page(request: web.Request) -> web.Response:
    headers = {"Content-Security-Policy": PAGE_CSP, "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
    return web.Response(body=_asset("demo.html"), content_type="text/html", charset="utf-8", headers=headers)


async def stylesheet(request: web.Request) -> web.Response:
    headers = {"Content-Security-Policy": ASSET_CSP, "X-Content-Type-Options": "nosniff"}
    return web.Response(body=_asset("demo.css"), content_type="text/css", charset="utf-8", headers=headers)


def demo_routes() -> list[web.RouteDef]:
    return [web.get("/widget/demo", page), web.get("/widget/demo.css", stylesheet)]


def demo_env(database_url: str) -> dict[str, str]:
    return {
        "SIGNOFF_ENV": "development",
        "SIGNOFF_DATABASE_URL": database_url,
        "SIGNOFF_LLM_PROVIDER": "scripted",
        "SIGNOFF_WIDGET": "true",
    }


async def run_widget_demo(host: str = "127.0.0.1", port: int = 8765) -> int:
    from bot.app import create_app
    from bot.cli.slack_demo import demo_database
    from bot.server import serve
    from bot.settings import load_settings

    with tempfile.TemporaryDirectory(prefix="signoff-widget-demo-") as tmp:
        url = await demo_database(Path(tmp) / "demo.db")
        app = await create_app(load_settings(demo_env(url)), seed=False)
        sample = await app.backend.get_customer("C-7")
        print("signoff demo --widget — the sandbox shop and the offline planner")
        print(f"open http://{host}:{port}/widget/demo")
        if sample is not None:
            print(f"to verify as a guest: order O-1042 and the email {sample.email}")
        print("Ctrl-C stops it")
        try:
            await serve(app, host=host, port=port, worker=True, extra_routes=demo_routes())
        finally:
            await app.close()
    return 0


__all__ = ["PAGE_CSP", "demo_routes", "run_widget_demo"]
