"""``signoff demo --slack``: the rep-assist and approval scenario through the real Slack app.

A temporary SQLite store (migrated, seeded with the demo data), the composition root's
own app with the Slack face, its aiohttp server on a local port, and a local recording
Slack Web API (``sandbox/slack_web/``) that the real ``AsyncWebClient`` talks to.
Every request reaches ``POST /slack/events`` signed as Slack signs it; the worker
answers as it does in production. What each person would see is printed from what the
recording API holds: the thread, the confirmation card, the approval card before and
after the click, the refusal a rep gets, and the follow-up.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from bot.app import create_app, demo_dataset_path
from bot.server import make_web_app
from bot.settings import load_settings
from sandbox.dataset import load_dataset_file
from sandbox.io import load_dataset
from sandbox.schema import upgrade
from sandbox.slack_web import BOT_USER_ID, TEAM_ID, FakeSlackApi, SeenMessage
from storage.db import create_database

SECRET = "demo-signing-secret"
SUPPORT, APPROVALS = "C0SUPPORT", "C0APPROVALS"
PRIYA, TOMAS, GRACE = "U01PRIYA", "U02TOMAS", "U03GRACE"
T = TypeVar("T")


class Slack:
    """Signed requests to our server, as Slack sends them."""

    def __init__(self, url: str, api: FakeSlackApi) -> None:
        self.url, self.api, self._n = url, api, 0

    def ts(self) -> str:
        self._n += 1
        return f"{int(time.time())}.{self._n:06d}"

    async def post(self, body: str, content_type: str) -> int:
        stamp = str(int(time.time()))
        mac = hmac.new(SECRET.encode(), f"v0:{stamp}:{body}".encode(), hashlib.sha256).hexdigest()
        headers = {"Content-Type": content_type, "X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={mac}"}
        async with aiohttp.ClientSession() as s, s.post(self.url, data=body.encode(), headers=headers) as r:
            return r.status

    async def event(self, event: dict[str, Any]) -> int:
        self._n += 1
        body = {
            "type": "event_callback",
            "team_id": TEAM_ID,
            "event_id": f"Ev{self._n:06d}",
            "event": event,
            "authorizations": [{"team_id": TEAM_ID, "user_id": BOT_USER_ID, "is_bot": True}],
        }
        return await self.post(json.dumps(body), "application/json")

    async def click(self, user: str, action_id: str, value: str, channel: str, message_ts: str) -> int:
        payload = {
            "type": "block_actions",
            "team": {"id": TEAM_ID},
            "user": {"id": user, "team_id": TEAM_ID},
            "trigger_id": f"trigger.{self.ts()}",
            "channel": {"id": channel},
            "container": {"type": "message", "message_ts": message_ts, "channel_id": channel},
            "message": {"ts": message_ts},
            "actions": [{"type": "button", "action_id": action_id, "value": value, "action_ts": self.ts()}],
        }
        return await self.post(
            urllib.parse.urlencode({"payload": json.dumps(payload)}), "application/x-www-form-urlencoded"
        )

    async def until(self, check: Callable[[], T | None], within_s: float = 30.0) -> T:
        found = await self.api.until(lambda: check(), within_s=within_s)
        assert found is not None
        return found


def _button(m: SeenMessage, action_id: str) -> str | None:
    for b in m.blocks:
        for e in b.get("elements") or ():
            if isinstance(e, dict) and e.get("action_id") == action_id:
                return str(e["value"])
    return None


def _show(who: str, text: str) -> None:
    print(f"\n--- {who} ---")
    print(text)


async def demo_database(path: Path) -> str:
    """A migrated SQLite file at ``path`` holding the demo dataset, rebased to now; its URL."""
    url = f"sqlite+aiosqlite:///{path}"
    await upgrade(url)
    db = create_database(url)
    await load_dataset(db, load_dataset_file(demo_dataset_path()), rebase_to=datetime.now(UTC).replace(microsecond=0))
    await db.dispose()
    return url


async def run_slack_demo() -> int:
    """Run the scenario; 0 when it went as it should and the audit chain verifies."""
    print("signoff demo --slack — the real Bolt app, a local recording Slack API, the scripted planner")
    with tempfile.TemporaryDirectory(prefix="signoff-slack-demo-") as tmp:
        url = await demo_database(Path(tmp) / "demo.db")
        async with FakeSlackApi() as api:
            settings = load_settings(
                {
                    "SIGNOFF_ENV": "development",  # the demo's staff and shared-secret tokens
                    "SIGNOFF_DATABASE_URL": url,
                    "SIGNOFF_LLM_PROVIDER": "scripted",
                    "SLACK_BOT_TOKEN": api.token,
                    "SLACK_SIGNING_SECRET": SECRET,
                    "SIGNOFF_SLACK_API_URL": api.base_url,
                    "SIGNOFF_APPROVALS_CHANNEL": APPROVALS,
                    "SIGNOFF_SLACK_STREAMING": "false",
                }
            )
            app = await create_app(settings, seed=False)
            runner = web.AppRunner(make_web_app(app), access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            port = runner.addresses[0][1]
            stop = asyncio.Event()
            worker = asyncio.create_task(app.worker().run_forever(stop))
            try:
                try:
                    ok = await _scenario(Slack(f"http://127.0.0.1:{port}/slack/events", api))
                except TimeoutError:
                    print("\nthe scenario did not go as it should; what Slack holds:")
                    for call in api.calls():
                        print(f"{call.method} {call.args.get('channel') or ''}: {call.response.get('error') or 'ok'}")
                    print(api.transcript(APPROVALS))
                    print(api.transcript(SUPPORT, api.calls("chat.postMessage")[0].args.get("thread_ts")))
                    ok = False
                verdict = await app.services.audit.verify()
            finally:
                stop.set()
                await worker
                await runner.cleanup()
                await app.close()
    print("")
    print(f"audit chain {'verified' if verdict.ok else 'BROKEN'}: {verdict.count} events")
    return 0 if ok and verdict.ok else 1


async def _scenario(slack: Slack) -> bool:
    api = slack.api

    def bot_in(channel: str, thread: str | None = None) -> list[SeenMessage]:
        return [m for m in api.messages_in(channel, thread) if m.user == BOT_USER_ID and m.state != "streaming"]

    root = slack.ts()
    print(f"\n#support: Priya (rep) writes '@signoff assist C-17' (thread {root})")
    await slack.event(
        {
            "type": "app_mention",
            "user": PRIYA,
            "channel": SUPPORT,
            "ts": root,
            "text": f"<@{BOT_USER_ID}> assist C-17",
            "team": TEAM_ID,
        }
    )
    await slack.until(lambda: bot_in(SUPPORT, root) or None)
    print("Priya (rep) writes in the thread: 'Please refund O-1040, it arrived damaged.'")
    await slack.event(
        {
            "type": "message",
            "user": PRIYA,
            "channel": SUPPORT,
            "ts": slack.ts(),
            "thread_ts": root,
            "text": "Please refund O-1040, it arrived damaged.",
            "channel_type": "channel",
            "team": TEAM_ID,
        }
    )
    card = await slack.until(lambda: next((m for m in bot_in(SUPPORT, root) if _button(m, "signoff.confirm")), None))
    _show("what Priya sees in the thread", api.transcript(SUPPORT, root))

    print("\nPriya clicks Confirm.")
    await slack.click(PRIYA, "signoff.confirm", str(_button(card, "signoff.confirm")), SUPPORT, card.ts)
    approval = await slack.until(lambda: next((m for m in bot_in(APPROVALS) if _button(m, "signoff.approve")), None))
    _show("#approvals: the card a supervisor sees", approval.visible)

    print("\nTomás (a rep) clicks Approve.")
    value = str(_button(approval, "signoff.approve"))
    await slack.click(TOMAS, "signoff.approve", value, APPROVALS, approval.ts)
    refusal = await slack.until(lambda: next((e for e in api.ephemeral if e["user"] == TOMAS), None))
    _show("what only Tomás sees", refusal["text"])

    print("\nGrace (a supervisor) clicks Approve.")
    await slack.click(GRACE, "signoff.approve", value, APPROVALS, approval.ts)
    after = await slack.until(lambda: next((m for m in bot_in(APPROVALS) if m.ts == approval.ts and m.edited), None))
    _show("#approvals: the same card, updated in place", after.visible)
    before = len(bot_in(SUPPORT, root))
    await slack.until(lambda: len(bot_in(SUPPORT, root)) > before or None)
    _show("what Priya sees in the thread now", api.transcript(SUPPORT, root))
    return _button(after, "signoff.approve") is None
