"""``serve``: a real TCP site plus the in-process worker, stopped cleanly by SIGTERM."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import socket
from datetime import timedelta

import aiohttp

from agent.llm.testing import ScriptedModel, tool_use_block
from agent.notify import RecordingNotifier
from agent.outcomes import TurnResult
from agent.runtime import Runtime
from bot.api.auth import make_token
from bot.server import serve
from storage.db import Database
from storage.records import Conversation
from tests.api_kit import JWT_SECRET, app_of
from tests.support import C7, SUP_A, seeded

REFUND = {
    "order_id": "O-1042",
    "amount_minor": 18900,
    "currency": "USD",
    "reason_code": "damaged",
    "evidence": ["refund-policy@7#window"],
}


class SignallingNotifier(RecordingNotifier):
    """Sets an event on the first follow-up, so the test waits on a signal, not a sleep."""

    def __init__(self) -> None:
        super().__init__()
        self.followed_up = asyncio.Event()

    async def follow_up(self, conversation: Conversation, result: TurnResult) -> None:
        await super().follow_up(conversation, result)
        self.followed_up.set()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_serve_runs_site_and_worker_and_stops_on_sigterm(db: Database) -> None:
    model = ScriptedModel(
        [
            [tool_use_block("get_order", {"order_id": "O-1042"})],
            [tool_use_block("search_knowledge", {"query": "refund window"})],
            [tool_use_block("issue_refund", REFUND)],
            "Shall I refund $189.00?",
            "It is pending approval.",
            "Your refund was approved and issued.",
        ]
    )
    h = await seeded(db, model)
    notifier = SignallingNotifier()
    h = dataclasses.replace(h, runtime=Runtime(dataclasses.replace(h.services, notifier=notifier)))
    first = await h.runtime.chat(principal=C7, channel="api", message="Refund O-1042")
    confirmed = await h.runtime.confirm(first.pending[0].id, actor=C7, accept=True)
    assert confirmed.approval is not None
    await h.runtime.decide(
        confirmed.approval.id, expected_version=confirmed.approval.version, decision="approve", actor=SUP_A
    )
    h.clock.now += timedelta(seconds=10)  # the resume job is due

    port, ready = free_port(), asyncio.Event()
    server = asyncio.create_task(
        serve(app_of(h), host="127.0.0.1", port=port, worker=True, metrics_render=lambda: b"up 1\n", ready=ready)
    )
    try:
        await asyncio.wait_for(ready.wait(), timeout=10)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/healthz") as r:
                assert (r.status, await r.json()) == (200, {"status": "ok"})
            token = make_token(JWT_SECRET, sub="S-3", role="supervisor")
            async with session.get(
                f"http://127.0.0.1:{port}/api/approvals?status=approved", headers={"Authorization": f"Bearer {token}"}
            ) as r:
                assert r.status == 200 and len((await r.json())["approvals"]) == 1
            async with session.get(f"http://127.0.0.1:{port}/metrics") as r:
                assert await r.text() == "up 1\n"
        await asyncio.wait_for(notifier.followed_up.wait(), timeout=10)  # the worker resumed the run
        assert notifier.of("follow_up")[0][1] == "Your refund was approved and issued."
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)  # serve's handler is in place
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(server, timeout=15)
    finally:
        if not server.done():
            server.cancel()
    async with aiohttp.ClientSession() as session:
        try:
            async with session.get(f"http://127.0.0.1:{port}/healthz"):
                raise AssertionError("still serving after SIGTERM")
        except aiohttp.ClientConnectionError:
            pass
