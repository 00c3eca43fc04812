"""A widget customer handed to a person, end to end against a real ``signoff serve``.

The customer presses "Talk to a person" in the widget: the escalation post in Slack carries
Take over and the widget's stream says ``handoff`` waiting. A rep takes over (the stream says
taken, with the rep's name); the rep's thread reply reaches the widget exactly once, also when
the server is SIGKILLed right after Slack's ack and Slack delivers the event again; the
customer's answer appears in the thread and the agent says nothing meanwhile.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.slack_api import FakeSlackApi
from tests.slack_kit import PRIYA, SIGNOFF, Serve, event_body, message, signed_headers
from tests.test_email_serve import Sink
from tests.test_handoff_serve import ESCALATIONS, _escalation, _thread_says, world  # noqa: F401 (the fixture)

pytestmark = pytest.mark.skipif(not SIGNOFF.exists(), reason="the signoff console script is not installed")

ORIGIN = "https://shop.example"
REPLY = "Your parcel left our warehouse today."
World = tuple[dict[str, str], FakeSlackApi, FakeAnthropicAPI, Path, Sink]


async def _post(server: Serve, path: str, body: dict[str, Any], who: dict[str, str]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.post(server.url + path, json=body, headers=who) as r:
        return r.status, await r.json()


async def _frames(server: Serve, who: dict[str, str], until: Any) -> list[dict[str, Any]]:
    """The widget stream from the start, as (event, data) dicts, until ``until(frames)`` holds."""
    frames: list[dict[str, Any]] = []
    name = ""
    async with (
        asyncio.timeout(60),
        aiohttp.ClientSession() as s,
        s.get(f"{server.url}/widget/api/stream", headers=who) as r,
    ):
        async for line in r.content:
            if line.startswith(b"event: "):
                name = line[7:].decode().strip()
            elif line.startswith(b"data: "):
                frames.append({"event": name, **json.loads(line[6:])})
                if until(frames):
                    return frames
    return frames


def _from_person(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in frames if f["event"] == "message" and f["from"] == "person"]


async def test_a_widget_customer_gets_the_reps_reply_once_across_a_kill(world: World) -> None:  # noqa: F811
    env, slack, _model, _db, _sink = world
    env = {**env, "SIGNOFF_WIDGET": "true", "SIGNOFF_WIDGET_ORIGINS": ORIGIN}
    server = Serve(env)
    await server.start()
    try:
        status, opened = await _post(server, "/widget/api/session", {}, {"Origin": ORIGIN})
        assert status == 200 and opened["customer"] is None, opened
        who = {"Origin": ORIGIN, "X-Signoff-Session": opened["session"]}
        ask = {"clientId": "tp-1", "text": "I'd like to talk to a person, please.", "person": True}
        assert (await _post(server, "/widget/api/messages", ask, who))[0] == 202
        esc_ts, value = await _escalation(slack)
        waiting = await _frames(server, who, lambda fs: any(f["event"] == "handoff" for f in fs))
        assert [f["state"] for f in waiting if f["event"] == "handoff"] == ["waiting"]

        assert await server.click(PRIYA, "signoff.takeover", value, channel=ESCALATIONS, message_ts=esc_ts) == 200
        await slack.until(lambda: _thread_says(slack, esc_ts, "took this over"), within_s=60)
        reply = message(PRIYA, REPLY, channel=ESCALATIONS, thread_ts=esc_ts)
        body = event_body(reply, event_id="EvWIDGET0001")
        assert await server.post(body, signed_headers(body)) == 200
        await server.kill()  # right after Slack's ack
    finally:
        await server.stop()
    server = Serve(env)
    await server.start()
    try:
        assert await server.post(body, signed_headers(body)) == 200  # Slack delivers it again
        frames = await _frames(server, who, lambda fs: bool(_from_person(fs)))
        assert [(f["text"], f["name"]) for f in _from_person(frames)] == [(REPLY, "Priya Raman")]
        assert {"event": "handoff", "state": "taken", "name": "Priya Raman"} in frames

        # The customer's answer goes into the thread; the agent says nothing meanwhile.
        answer = {"clientId": "tp-2", "text": "Great, thanks!"}
        assert (await _post(server, "/widget/api/messages", answer, who))[0] == 202
        await slack.until(lambda: _thread_says(slack, esc_ts, "Great, thanks!"), within_s=60)
        frames = await _frames(server, who, lambda fs: any(f.get("id") == "tp-2" for f in fs))
        after = frames[next(i for i, f in enumerate(frames) if f["event"] == "handoff" and f["state"] == "taken") :]
        assert not [f for f in after if f["event"] == "message" and f["from"] == "agent"], frames
        assert len(_from_person(frames)) == 1  # still once, after the redelivery
    finally:
        await server.stop()
