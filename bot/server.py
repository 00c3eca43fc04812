"""The aiohttp server: ``/healthz``, ``/metrics``, the faces' own routes (each face's
``routes()``, from its registry line: ``/api/*``, ``/email/inbound``; ``/slack/events`` and
``/teams/messages`` when configured; …) and any extra routes.

Every error is JSON ``{"error", "message"}``; a client mistake is never a 5xx.
``serve`` runs the site and, unless told not to, the resume/expiry worker as an
owned background task, and shuts both down cleanly on SIGINT/SIGTERM.

``/metrics`` is not open by default. On the main port it answers loopback peers only (a
request relayed by a proxy, with ``Forwarded``/``X-Forwarded-For``, is not one); with
``SIGNOFF_METRICS_TOKEN`` it answers whoever brings ``Authorization: Bearer <token>``; with a
listener of its own (``SIGNOFF_METRICS_PORT``, ``SIGNOFF_METRICS_ADDR``, ``serve
--metrics-port``) it is served only there, to whoever reaches that port (the operator's
network decides). ``/healthz`` stays open.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hmac
import logging
import signal
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from aiohttp import web

from agent import queries, rollout_metrics
from agent.reconcile import stuck_claims
from agent.worker import WorkerConfig
from bot.api import wording as say
from bot.app import App
from bot.settings import reveal
from bot.teams.config import is_loopback_host
from bot.web import FAULTS, error_response, errors

log = logging.getLogger(__name__)

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: aiohttp's bound on a body a handler reads whole; each route bounds its own below it (the
#: email webhook's, 64 MiB, is the largest).
MAX_REQUEST_BODY = 64 * 1024 * 1024


def make_web_app(
    app: App,
    *,
    metrics_render: Callable[[], bytes] | None = None,
    extra_routes: Iterable[web.AbstractRouteDef] = (),
    metrics_token: str | None = None,
) -> web.Application:
    """The whole HTTP surface over one :class:`App`; settings come from ``app.settings`` unless given.

    ``metrics_token`` (default ``SIGNOFF_METRICS_TOKEN``) guards ``/metrics`` with a bearer token.
    """
    if metrics_token is None and app.settings is not None:
        metrics_token = reveal(app.settings.signoff_metrics_token)
    web_app = web.Application(middlewares=[errors], client_max_size=MAX_REQUEST_BODY)
    web_app[FAULTS] = app.db.fault
    web_app[APP] = app
    web_app[_METRICS] = _Metrics(metrics_render, metrics_token, loopback_only=True)
    web_app.router.add_get("/healthz", healthz)
    web_app.router.add_get("/metrics", metrics)
    # The faces' own endpoints, each from its line of the registry (the HTTP API's /api/*, the
    # email webhook; Slack's Bolt routes and Teams' POST /teams/messages, when configured).
    web_app.router.add_routes([*app.http_routes, *extra_routes])
    return web_app


@dataclass(frozen=True)
class _Metrics:
    render: Callable[[], bytes] | None
    token: str | None = None
    #: Without a token, answer only peers on this machine (the main port's default).
    loopback_only: bool = False


_METRICS: web.AppKey[_Metrics] = web.AppKey("signoff_metrics", _Metrics)
#: The app the server runs (``/healthz`` and ``/metrics`` read it; tests find it there).
APP: web.AppKey[App] = web.AppKey("signoff_app", App)


async def healthz(request: web.Request) -> web.Response:
    if await queries.database_ok(request.app[APP].runtime):
        return web.json_response({"status": "ok"})
    return error_response("unavailable", say.DATABASE_DOWN)


async def metrics(request: web.Request) -> web.Response:
    state = request.app[_METRICS]
    if state.render is None:
        return error_response("not_found", say.METRICS_OFF)
    if state.token is None and state.loopback_only and not _local_peer(request):
        return error_response("forbidden", say.METRICS_LOOPBACK)
    if state.token is not None:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), state.token.encode()):
            response = error_response("unauthorized", say.METRICS_TOKEN)
            response.headers["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
    await _read_gauges(request.app[APP])
    return web.Response(body=state.render(), headers={"Content-Type": METRICS_CONTENT_TYPE})


def _local_peer(request: web.Request) -> bool:
    """A loopback peer that relays nobody else's request."""
    relayed = "Forwarded" in request.headers or "X-Forwarded-For" in request.headers
    return not relayed and request.remote is not None and is_loopback_host(request.remote)


async def _read_gauges(app: App) -> None:
    """The gauges read from the database at scrape time: the audit head's seq, the ledger's stuck
    claims (the same in every replica, whichever process runs the reconciliation pass) and the
    rollout's figures. A failed read leaves the last value: the scrape goes on."""
    if app.metrics is None:
        return
    try:
        app.metrics.audit_head_seq.set(await app.services.audit.head_seq())
    except Exception:
        log.warning("audit head not read for /metrics", exc_info=True)
    bound = app.settings.signoff_reconcile_after_s if app.settings is not None else WorkerConfig.orphan_after_s
    try:
        app.metrics.ledger_stuck.set(len(await stuck_claims(app.services, older_than_s=bound)))
    except Exception:
        log.warning("stuck ledger claims not read for /metrics", exc_info=True)
    try:
        await rollout_metrics.refresh(app.metrics, app.services)
    except Exception:
        log.warning("rollout figures not read for /metrics", exc_info=True)


def make_metrics_app(
    app: App, *, metrics_render: Callable[[], bytes] | None, metrics_token: str | None = None
) -> web.Application:
    """The separate metrics listener: ``/metrics`` (token-guarded when configured) and ``/healthz``."""
    web_app = web.Application(middlewares=[errors])
    web_app[APP] = app
    web_app[_METRICS] = _Metrics(metrics_render, metrics_token)
    web_app.router.add_get("/healthz", healthz)
    web_app.router.add_get("/metrics", metrics)
    return web_app


# -- errors -------------------------------------------------------------------------------

# -- serving ------------------------------------------------------------------------------


async def serve(
    app: App,
    *,
    host: str,
    port: int,
    worker: bool,
    metrics_render: Callable[[], bytes] | None = None,
    extra_routes: Sequence[web.AbstractRouteDef] = (),
    stop: asyncio.Event | None = None,
    ready: asyncio.Event | None = None,
    metrics_listen: tuple[str, int] | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM (or ``stop`` is set); with ``worker``, run the worker alongside.

    With ``metrics_listen`` (host, port), ``/metrics`` is served there and not on the main site.
    ``ready`` is set once the site is listening (tests, supervisors).
    """
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    main_metrics = None if metrics_listen is not None else metrics_render
    runner = web.AppRunner(make_web_app(app, metrics_render=main_metrics, extra_routes=extra_routes), access_log=None)
    await runner.setup()
    settle_heap()
    runners = [runner]
    task: asyncio.Task[None] | None = None
    try:
        await web.TCPSite(runner, host, port).start()
        if metrics_listen is not None:
            runners.append(await start_metrics(app, metrics_render, metrics_listen))
        log.info("serving on http://%s:%s (worker %s)", host, port, "on" if worker else "off")
        if ready is not None:
            ready.set()
        if worker:
            task = asyncio.create_task(app.worker().run_forever(stop), name="signoff-worker")
            task.add_done_callback(_log_failure)
        await stop.wait()
    finally:
        stop.set()
        for sig in installed:
            loop.remove_signal_handler(sig)
        if task is not None:
            try:
                await asyncio.wait_for(task, timeout=10)
            except Exception:
                log.exception("the worker did not stop cleanly")
        for r in reversed(runners):
            await r.cleanup()
        log.info("stopped")


async def start_metrics(app: App, metrics_render: Callable[[], bytes] | None, listen: tuple[str, int]) -> web.AppRunner:
    """The separate metrics listener on ``listen`` (``serve``'s, or ``signoff worker``'s own):
    started; the caller cleans the runner up."""
    token = reveal(app.settings.signoff_metrics_token) if app.settings is not None else None
    runner = web.AppRunner(make_metrics_app(app, metrics_render=metrics_render, metrics_token=token), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, *listen).start()
    except BaseException:
        await runner.cleanup()
        raise
    log.info("metrics on http://%s:%s/metrics", *listen)
    return runner


def settle_heap() -> None:
    """Move everything loaded at start-up out of the garbage collector's sight (``gc.freeze``).

    The libraries' import-time objects (the SDKs' hundreds of thousands of type objects and
    schemas) never die, yet every full collection walked them: a quarter-second pause of the
    event loop a few seconds into serving, which Slack's acknowledgements waited behind.
    """
    gc.collect()
    gc.freeze()


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the worker stopped with an error", exc_info=task.exception())


__all__ = [
    "METRICS_CONTENT_TYPE",
    "errors",
    "make_metrics_app",
    "make_web_app",
    "serve",
    "settle_heap",
    "start_metrics",
]
