"""An approval in the widget, without a browser: a customer's refund above the ceiling shows
in the session's stream as an ``approval`` event, ``pending`` ("Waiting for a teammate…" in
the widget's strings), and a stream that is open when a supervisor decides receives the
decision live (``approved`` or ``rejected``, first thing) and then the agent's answer."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from agent.llm.testing import FunctionModel
from bot.api.auth import make_token
from bot.widget.routes import script
from tests.test_teams_face import plan
from tests.widget_kit import JWT_SECRET, WidgetServer, widget_server
from tools.context import Principal

ORIGIN = "https://shop.example"
ASK = "Refund 60.00 on O-1042, it arrived damaged."


async def _events(
    url: str, headers: dict[str, str], until: Any, *, opened: asyncio.Event | None = None
) -> list[dict[str, Any]]:
    """The stream's frames (decoded) until ``until(frames)`` holds; ``opened`` is set once the
    server has begun the stream (its ``retry:`` line, written once it listens for new events)."""
    seen: list[dict[str, Any]] = []
    frame: dict[str, Any] = {}
    async with aiohttp.ClientSession() as s, s.get(url, headers=headers) as r:
        async for line in r.content:
            if line.startswith(b"retry:") and opened is not None:
                opened.set()
            if line.startswith(b"id: "):
                frame = {"_id": line[4:].decode().strip()}
            elif line.startswith(b"event: "):
                frame["_event"] = line[7:].decode().strip()
            elif line.startswith(b"data: "):
                seen.append({**json.loads(line[6:]), **frame})
                if until(seen):
                    return seen
    return seen


def _approvals(frames: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(f["id"], f["state"]) for f in frames if f["_event"] == "approval"]


async def _flow(server: WidgetServer, decision: str, status_after: str) -> None:
    token = make_token(JWT_SECRET, sub="C-7", role="customer", ttl_s=300)
    async with aiohttp.ClientSession() as s:
        async with s.post(
            f"{server.url}/widget/api/session", json={}, headers={"Origin": ORIGIN, "Authorization": f"Bearer {token}"}
        ) as r:
            assert r.status == 200, await r.text()
            who = {"Origin": ORIGIN, "X-Signoff-Session": (await r.json())["session"]}
        async with s.post(f"{server.url}/widget/api/messages", json={"clientId": "r-1", "text": ASK}, headers=who) as r:
            assert r.status == 202
        stream = f"{server.url}/widget/api/stream"
        frames = await asyncio.wait_for(
            _events(stream, who, lambda f: any(x["_event"] == "confirmation" for x in f)), 60
        )
        card = next(f for f in frames if f["_event"] == "confirmation")
        url = f"{server.url}/widget/api/confirmations/{card['id']}/confirm"
        async with s.post(url, json={"version": card["version"]}, headers=who) as r:
            assert r.status == 200, await r.text()
    frames = await asyncio.wait_for(_events(stream, who, _told_to_wait), 60)
    [(approval_id, status)] = _approvals(frames)
    assert status == "pending"
    assert 'pending: "Waiting for a teammate' in script().decode()  # how the widget shows it
    last = frames[-1]["_id"]

    # A stream open from after all that gets the supervisor's decision live, first thing.
    opened = asyncio.Event()
    resumed = {**who, "Last-Event-ID": last}
    async with asyncio.TaskGroup() as tasks:
        live = tasks.create_task(_events(stream, resumed, lambda f: bool(_approvals(f)), opened=opened))
        await asyncio.wait_for(opened.wait(), 30)
        assert not live.done()  # open, with nothing to send before the decision
        approval = await server.app.port.approval(approval_id)
        assert approval is not None and approval.status == "pending"
        await server.app.port.decide(
            approval_id,
            expected_version=approval.version,
            decision=decision,
            actor=Principal(kind="supervisor", id="S-3"),
            comment="Not covered: past the window." if decision == "reject" else None,
            via={"surface": "test"},
        )
        got = await asyncio.wait_for(live, 60)
    assert got[0]["_event"] == "approval" and _approvals(got) == [(approval_id, status_after)]
    answer = await asyncio.wait_for(_events(stream, {**who, "Last-Event-ID": got[-1]["_id"]}, _answered), 60)
    if decision == "approve":
        assert "The refund went through." in "".join(f["text"] for f in answer if _from_agent(f))


def _told_to_wait(frames: list[dict[str, Any]]) -> bool:
    """The pending approval, and the whole answer written after it."""
    at = next((i for i, f in enumerate(frames) if f["_event"] == "approval"), None)
    return at is not None and any(_from_agent(f) for f in frames[at:])


def _from_agent(frame: dict[str, Any]) -> bool:
    """A whole answer of the agent (its pieces come as ``delta`` frames first)."""
    return frame["_event"] == "message" and frame["from"] == "agent"


def _answered(frames: list[dict[str, Any]]) -> bool:
    return any(_from_agent(f) for f in frames)


@pytest.mark.parametrize(("decision", "status_after"), [("approve", "approved"), ("reject", "rejected")])
def test_a_supervisors_decision_reaches_an_open_widget_stream_live(decision: str, status_after: str) -> None:
    with widget_server(FunctionModel(plan), SIGNOFF_WIDGET_ORIGINS=ORIGIN, SIGNOFF_WIDGET_CHUNK_DELAY_S="0") as server:
        server.run(_flow(server, decision, status_after), timeout=180)
