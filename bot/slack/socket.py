"""``signoff socket``: the Slack app over Socket Mode (no public URL), with the worker.

Slack opens a WebSocket to us (``SLACK_APP_TOKEN``, ``xapp-…``); each envelope goes
through the same Bolt app as ``POST /slack/events``, so it is deduplicated and stored
with its job before it is acknowledged, and the worker in this process answers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from bot.app import App
from bot.slack.bolt import build_bolt, socket_handler

log = logging.getLogger(__name__)


async def run_socket(app: App, *, stop: asyncio.Event | None = None) -> None:
    """Connect, run the worker alongside, and stop cleanly on SIGINT/SIGTERM (or ``stop``)."""
    face = app.slack
    assert face is not None and face.config.app_token, "Socket Mode needs SLACK_BOT_TOKEN and SLACK_APP_TOKEN"
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    handler = socket_handler(build_bolt(face), face.config.app_token)
    worker = asyncio.create_task(app.worker().run_forever(stop), name="signoff-worker")
    try:
        await handler.connect_async()
        log.info("connected to Slack over Socket Mode")
        await stop.wait()
    finally:
        stop.set()
        await handler.close_async()
        await asyncio.wait_for(worker, timeout=10)
