"""The Slack Web API simulator's vocabulary: limits, required arguments, errors, faults, what it remembers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from aiohttp import web

from sandbox.slack_web.blocks import render_blocks

T = TypeVar("T")
TEAM_ID = "T0SIGNOFF"
BOT_USER_ID = "U0SIGNOFF"
BOT_ID = "B0SIGNOFF"
MAX_TEXT = 40_000
MAX_MARKDOWN = 12_000
MAX_STOP_BLOCKS = 50
MAX_CHUNKS = 50
TASK_STATUSES = {"pending", "in_progress", "complete", "error"}
JSON_ARGS = {"blocks", "chunks", "view", "prompts", "loading_messages", "metadata", "attachments"}

#: Required arguments per method; a method not listed here is ``unknown_method``.
REQUIRED: dict[str, tuple[str, ...]] = {
    "auth.test": (),
    "oauth.v2.access": ("code",),
    "chat.postMessage": ("channel",),
    "chat.update": ("channel", "ts"),
    "chat.postEphemeral": ("channel", "user"),
    "chat.delete": ("channel", "ts"),
    "chat.startStream": ("channel", "thread_ts"),
    "chat.appendStream": ("channel", "ts"),
    "chat.stopStream": ("channel", "ts"),
    "assistant.threads.setStatus": ("channel_id", "thread_ts", "status"),
    "assistant.threads.setSuggestedPrompts": ("channel_id", "prompts"),
    "assistant.threads.setTitle": ("channel_id", "thread_ts", "title"),
    "views.open": ("trigger_id", "view"),
    "views.publish": ("user_id", "view"),
    "views.update": ("view",),
    "users.info": ("user",),
    "conversations.info": ("channel",),
    "usergroups.users.list": ("usergroup",),
    "reactions.add": ("channel", "timestamp", "name"),
}


#: Required arguments that may be empty strings (``setStatus(status="")`` clears the status).
MAY_BE_EMPTY = {"status"}


class SlackError(Exception):
    """What the fake answers instead of a success: ``{"ok": false, "error": code, ...}``."""

    def __init__(self, code: str, **extra: Any) -> None:
        super().__init__(code)
        self.code = code
        self.extra = extra


# -- configuration helpers ------------------------------------------------------------
def slack_user(
    user_id: str,
    *,
    team_id: str = TEAM_ID,
    name: str | None = None,
    is_bot: bool = False,
    is_stranger: bool = False,
    enterprise_id: str | None = None,
    email: str | None = None,
) -> dict[str, Any]:
    """A ``users.info`` user object (``enterprise_user`` present when ``enterprise_id`` is)."""
    user: dict[str, Any] = {
        "id": user_id,
        "team_id": team_id,
        "name": name or user_id.lower(),
        "real_name": name or user_id,
        "is_bot": is_bot,
        "deleted": False,
        "profile": {
            "display_name": name or user_id,
            "real_name": name or user_id,
            **({"email": email} if email else {}),
        },
    }
    if is_stranger:
        user["is_stranger"] = True
    if enterprise_id:
        user["enterprise_user"] = {"id": user_id, "enterprise_id": enterprise_id, "teams": [team_id]}
    return user


def slack_channel(
    channel_id: str,
    *,
    name: str | None = None,
    is_im: bool = False,
    is_ext_shared: bool = False,
    is_private: bool = False,
    user: str | None = None,
) -> dict[str, Any]:
    """A ``conversations.info`` channel object."""
    return {
        "id": channel_id,
        "name": name or channel_id.lower(),
        "is_im": is_im,
        "is_channel": not is_im,
        "is_private": is_private or is_im,
        "is_ext_shared": is_ext_shared,
        "is_pending_ext_shared": False,
        "is_org_shared": False,
        "is_shared": is_ext_shared,
        **({"user": user} if user else {}),
    }


# -- faults ---------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Fault:
    """One queued misbehaviour for one call of a method."""

    status: int = 200
    error: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0

    @classmethod
    def rate_limited(cls, retry_after: int = 1) -> Fault:
        """HTTP 429 with ``Retry-After`` (what Slack sends when a method's tier is exceeded)."""
        return cls(status=429, error="ratelimited", headers={"Retry-After": str(retry_after)})

    @classmethod
    def server_error(cls, status: int = 500) -> Fault:
        """An HTTP 5xx."""
        return cls(status=status, error="internal_error")

    @classmethod
    def slack_error(cls, code: str) -> Fault:
        """HTTP 200 ``{"ok": false, "error": code}`` (e.g. ``channel_not_found``)."""
        return cls(error=code)

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        """Answer normally, but only after ``seconds`` (timeouts)."""
        return cls(delay_s=seconds)


# -- what the fake remembers ---------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class SlackCall:
    """One Web API call as received, and what was answered."""

    method: str
    http_method: str
    headers: dict[str, str]
    args: dict[str, Any]
    status: int
    response: dict[str, Any]
    at: float

    @property
    def ok(self) -> bool:
        """Slack said ``ok`` with a 200."""
        return self.status == 200 and bool(self.response.get("ok"))


MessageState = Literal["posted", "streaming", "stopped", "expired", "deleted"]


@dataclass
class _Message:
    channel: str
    ts: str
    thread_ts: str | None
    user: str
    text: str = ""
    blocks: list[dict[str, Any]] = field(default_factory=list)
    markdown: str | None = None
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    plan_title: str | None = None
    state: MessageState = "posted"
    started_at: float = 0.0
    edited: bool = False
    reactions: list[str] = field(default_factory=list)
    recipient: tuple[str | None, str | None] = (None, None)


@dataclass(frozen=True, kw_only=True)
class SeenMessage:
    """A message as a person sees it now: final text, blocks, tasks and state."""

    channel: str
    ts: str
    thread_ts: str | None
    user: str
    text: str
    blocks: tuple[dict[str, Any], ...]
    markdown: str | None
    tasks: tuple[dict[str, Any], ...]
    state: MessageState
    edited: bool

    @property
    def visible(self) -> str:
        """What a reader sees: streamed/Markdown text, task lines, then the blocks (else the text)."""
        parts: list[str] = []
        if self.markdown is not None:
            parts.append(self.markdown)
        parts += [f"[{t.get('status')}] {t.get('title')}" for t in self.tasks]
        if self.blocks:
            parts.append(render_blocks(self.blocks))
        elif self.markdown is None:
            parts.append(self.text)
        return "\n".join(p for p in parts if p)


async def _read_args(request: web.Request) -> dict[str, Any]:
    """Arguments from the query string, a form body or a JSON body, JSON-valued ones parsed."""
    args: dict[str, Any] = dict(request.query)
    if request.method == "POST" and request.can_read_body:
        if request.content_type == "application/json":
            try:
                body = await request.json()
            except ValueError:
                raise SlackError("invalid_json") from None
            if not isinstance(body, dict):
                raise SlackError("invalid_json")
            args.update(body)
        else:
            args.update({k: v for k, v in (await request.post()).items() if isinstance(v, str)})
    for key in JSON_ARGS & args.keys():
        if isinstance(args[key], str):
            try:
                args[key] = json.loads(args[key])
            except ValueError:
                raise SlackError("invalid_blocks_format" if key == "blocks" else "invalid_arguments") from None
    return args


def _ts_key(ts: str) -> tuple[int, int]:
    whole, _, frac = ts.partition(".")
    return int(whole), int(frac or 0)
