"""Helpers for the Slack face's tests: signed Slack requests, a model script, a `signoff serve`.

Requests are signed as Slack signs them (``v0:{timestamp}:{body}``, HMAC-SHA256 with the
signing secret); payloads have the shapes Slack sends (Events API callbacks, interactivity
as ``payload=`` form bodies).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp
from slack_sdk.signature import SignatureVerifier

from tests.fakes.anthropic_api import refund_script, text_turn, tool_turn, tool_uses
from tests.fakes.slack_api import BOT_USER_ID, TEAM_ID
from tests.support import scrubbed_env
from tests.test_api_serve import free_port

SIGNOFF = Path(sys.executable).with_name("signoff")
DEMO = Path(__file__).resolve().parents[1] / "sandbox" / "data" / "demo.json"
POLICY = Path(__file__).resolve().parents[1] / "agent" / "data" / "policy.yaml"
SIGNING_SECRET = "slack-signing-secret-for-tests"
BOT_TOKEN = "xoxb-test-token"
SUPPORT = "C0SUPPORT"
APPROVALS = "C0APPROVALS"
PRIYA, TOMAS, GRACE = "U01PRIYA", "U02TOMAS", "U03GRACE"  # rep, rep, supervisor (demo staff)
MAYA = "U07MAYA"  # customer C-7
REFUND = {
    "order_id": "O-1042",
    "amount_minor": 18900,
    "currency": "USD",
    "reason_code": "damaged",
    "evidence": ["refund-policy@7#window"],
}
SCRIPT = refund_script(REFUND)


def signed_headers(body: str, *, secret: str = SIGNING_SECRET, at: int | None = None, **extra: str) -> dict[str, str]:
    ts = str(int(time.time()) if at is None else at)
    signature = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": signature, **extra}


_seq = [0]


def next_ts() -> str:
    _seq[0] += 1
    return f"{1_760_000_000 + _seq[0]}.{_seq[0]:06d}"


def event_body(event: dict[str, Any], *, event_id: str | None = None, ext_shared: bool = False) -> str:
    _seq[0] += 1
    return json.dumps(
        {
            "token": "legacy",
            "team_id": TEAM_ID,
            "api_app_id": "A0SIGNOFF",
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{_seq[0]:08d}",
            "event_time": int(time.time()),
            "authorizations": [{"team_id": TEAM_ID, "user_id": BOT_USER_ID, "is_bot": True}],
            "is_ext_shared_channel": ext_shared,
        }
    )


def mention(
    user: str,
    text: str,
    *,
    channel: str = SUPPORT,
    ts: str | None = None,
    thread_ts: str | None = None,
    team: str = TEAM_ID,
) -> dict[str, Any]:
    ev = {
        "type": "app_mention",
        "user": user,
        "text": f"<@{BOT_USER_ID}> {text}",
        "channel": channel,
        "ts": ts or next_ts(),
        "team": team,
        "user_team": team,
    }
    if thread_ts:
        ev["thread_ts"] = thread_ts
    return ev


def message(
    user: str,
    text: str,
    *,
    channel: str = SUPPORT,
    ts: str | None = None,
    thread_ts: str | None = None,
    team: str = TEAM_ID,
    channel_type: str = "channel",
) -> dict[str, Any]:
    ev = {
        "type": "message",
        "user": user,
        "text": text,
        "channel": channel,
        "ts": ts or next_ts(),
        "team": team,
        "user_team": team,
        "channel_type": channel_type,
    }
    if thread_ts:
        ev["thread_ts"] = thread_ts
    return ev


def click_body(
    user: str,
    action_id: str,
    value: str,
    *,
    channel: str,
    message_ts: str,
    thread_ts: str | None = None,
    team: str = TEAM_ID,
    action_ts: str | None = None,
) -> str:
    payload = {
        "type": "block_actions",
        "team": {"id": TEAM_ID},
        "user": {"id": user, "team_id": team},
        "api_app_id": "A0SIGNOFF",
        "trigger_id": f"trig.{next_ts()}",
        "channel": {"id": channel},
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel},
        "message": {"ts": message_ts, "thread_ts": thread_ts},
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "value": value,
                "block_id": "b",
                "action_ts": action_ts or next_ts(),
            }
        ],
        "is_ext_shared_channel": team != TEAM_ID,
    }
    return urllib.parse.urlencode({"payload": json.dumps(payload)})


def button_value(blocks: Any, action_id: str) -> str | None:
    """The value of the first button ``action_id`` in ``blocks``."""
    for b in blocks or ():
        for e in b.get("elements") or ():
            if isinstance(e, dict) and e.get("action_id") == action_id and "value" in e:
                return str(e["value"])
    return None


def planner(body: dict[str, Any]) -> dict[str, Any]:
    """Stateless: the next call of the refund script, then text that says where things stand."""
    uses = tool_uses(body["messages"])
    last = json.dumps(body["messages"][-1])
    if "refund" in json.dumps(body["messages"]).lower() and uses < len(SCRIPT):
        return tool_turn(*SCRIPT[uses])
    if "approved" in last:
        return text_turn("The refund of 189.00 USD on O-1042 is issued.")
    if "confirmed" in last:
        return text_turn("Thanks — a supervisor has to approve this refund first.")
    if uses:
        return text_turn("This refund needs your confirmation.")
    return text_turn("Hello! How can I help?")


def env_for(db: Path, *, anthropic: str, slack: str, policy: Path | None = None, **extra: str) -> dict[str, str]:
    base = scrubbed_env()
    return {
        **base,
        "SIGNOFF_ENV": "development",  # the demo staff and shared-secret staff tokens (the benches too)
        "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{db}",
        "SIGNOFF_LLM_PROVIDER": "anthropic",
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": anthropic,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SIGNOFF_SLACK_API_URL": slack,
        "SIGNOFF_APPROVALS_CHANNEL": APPROVALS,
        **({"SIGNOFF_POLICY_FILE": str(policy)} if policy else {}),
        **extra,
    }


def low_rep_ceiling(path: Path) -> Path:
    """The bundled policy with the rep's USD ceiling at 100.00 (so 189.00 needs approval)."""
    text = POLICY.read_text().replace("rep: {USD: 20000,", "rep: {USD: 10000,")
    assert "rep: {USD: 10000," in text
    path.write_text(text)
    return path


async def run_cli(env: dict[str, str], *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        str(SIGNOFF), *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    return proc.returncode or 0, out.decode()


async def until_healthy(url: str, *, tries: int = 1200) -> bool:
    """Poll ``url``/healthz every 50 ms until it answers 200 (an external process gives no other signal)."""
    async with aiohttp.ClientSession() as session:
        for _ in range(tries):
            try:
                async with session.get(f"{url}/healthz") as r:
                    if r.status == 200:
                        return True
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.05)
    return False


class Serve:
    """One ``signoff serve`` subprocess on its own port."""

    def __init__(
        self, env: dict[str, str], *, args: tuple[str, ...] = (), command: tuple[str, ...] = (str(SIGNOFF),)
    ) -> None:
        """``command`` runs ``signoff`` (a wrapper such as a profiler may stand in front of it)."""
        self.env, self.port, self.args, self.command = env, free_port(), args, command
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """The server's output (kept beside the database for a failing test to show)."""
        return Path("/" + self.env["SIGNOFF_DATABASE_URL"].partition(":///")[2].lstrip("/")).with_suffix(".log")

    def _open_log(self) -> BinaryIO:
        return self.log_path.open("ab")

    async def start(self) -> None:
        log = self._open_log()
        self.proc = await asyncio.create_subprocess_exec(
            *self.command, "serve", "--port", str(self.port), *self.args, env=self.env, stdout=log, stderr=log
        )
        log.close()  # the child holds its own copy
        if not await until_healthy(self.url):
            await self.kill()  # never leave a server running behind a failed test
            raise AssertionError("signoff serve did not come up")

    async def post(self, body: str, headers: dict[str, str], *, form: bool = False) -> int:
        kind = "application/x-www-form-urlencoded" if form else "application/json"
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{self.url}/slack/events", data=body.encode(), headers={"Content-Type": kind, **headers}
            ) as r,
        ):
            await r.read()
            return r.status

    async def event(self, event: dict[str, Any], **kw: Any) -> int:
        body = event_body(event, **{k: v for k, v in kw.items() if k in ("event_id", "ext_shared")})
        return await self.post(body, signed_headers(body, **kw.get("headers", {})))

    async def click(self, *args: Any, **kw: Any) -> int:
        body = click_body(*args, **kw)
        return await self.post(body, signed_headers(body), form=True)

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(self.proc.wait(), timeout=20)
