"""A local, recording, strict Slack Web API: ``signoff demo --slack`` talks to it, and so do the tests.

``async with FakeSlackApi() as slack:`` then ``AsyncWebClient(token=slack.token,
base_url=slack.base_url)``. It reads query strings, form bodies and JSON bodies
the way the SDK sends them, checks the bearer token, records every call, and
answers like Slack for the methods the Slack face uses — with Slack's error
codes for what Slack would refuse (unknown method, missing arguments, malformed
or oversized blocks, text too long, a stream in a channel without recipients,
appending to a stream that expired). Faults can be queued per method.

:meth:`FakeSlackApi.messages_in` rebuilds what a person would see in a channel
or thread after posts, updates, streams and deletes; scenario tests and the
printed demo assert on that rather than on raw calls.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Self, TypeVar

from aiohttp import web


@dataclass(frozen=True, kw_only=True)
class RecordedRequest:
    """One request as the server received it, and what it answered."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int


class LocalServer:
    """An aiohttp app on 127.0.0.1, port 0, used as an async context manager; it records every
    request and wakes :meth:`wait_for_requests` (the tests' fakes are built on it too)."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.base_url = ""
        self._runner: web.AppRunner | None = None
        self._arrived = asyncio.Event()

    def routes(self) -> list[web.RouteDef]:
        """The server's routes (each subclass gives its own)."""
        raise NotImplementedError

    def url_prefix(self) -> str:
        return ""

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.add_routes(self.routes())
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}{self.url_prefix()}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def record(self, request: RecordedRequest) -> None:
        self.requests.append(request)
        self._arrived.set()

    async def wait_for_requests(self, count: int, within_s: float = 5.0) -> list[RecordedRequest]:
        async with asyncio.timeout(within_s):
            while len(self.requests) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.requests


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


# -- Block Kit: validation and what a reader sees -------------------------------------------
BLOCK_TYPES = {
    "section",
    "divider",
    "header",
    "context",
    "actions",
    "markdown",
    "image",
    "input",
    "rich_text",
    "context_actions",
    "table",
    "plan",
    "task_card",
    "alert",
    "card",
    "carousel",
    "container",
    "file",
    "video",
}
VIEW_ONLY = {"input"}
ELEMENT_LIMITS = {"actions": 25, "context": 10, "context_actions": 5}


def block_problems(blocks: Any, *, limit: int = 50, surface: str = "message") -> list[str]:
    """What Slack would object to in ``blocks`` (empty when they are fine).

    Checks the limits our code can plausibly hit: block count, known types, section
    text 3,000 / fields 10 x 2,000, header 150, markdown 12,000, element counts,
    button text 75 / value 2,000 / action_id 255, unique block ids and action ids.
    """
    if not isinstance(blocks, list):
        return ["blocks must be an array"]
    problems = [f"no more than {limit} items allowed"] if len(blocks) > limit else []
    block_ids: set[str] = set()
    for i, block in enumerate(blocks):
        where = f"[{i}]"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            problems.append(f"{where} missing type")
            continue
        kind = block["type"]
        if kind not in BLOCK_TYPES or (kind in VIEW_ONLY and surface == "message"):
            problems.append(f"{where} unsupported type {kind}")
            continue
        bid = block.get("block_id")
        if bid is not None:
            if not isinstance(bid, str) or len(bid) > 255 or bid in block_ids:
                problems.append(f"{where} block_id invalid or duplicate")
            block_ids.add(str(bid))
        problems += [f"{where} {p}" for p in _block_problems(kind, block)]
    return problems


def _block_problems(kind: str, block: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    if kind == "section":
        if block.get("text") is None and not block.get("fields"):
            problems.append("section needs text or fields")
        if block.get("text") is not None:
            problems += _text_problems(block["text"], 3000)
        fields = block.get("fields") or []
        if len(fields) > 10:
            problems.append("more than 10 fields")
        for f in fields:
            problems += _text_problems(f, 2000)
        if block.get("accessory") is not None:
            problems += _element_problems(block["accessory"])
    elif kind == "header":
        problems += _text_problems(block.get("text"), 150, plain_only=True)
    elif kind == "markdown":
        text = block.get("text")
        if not isinstance(text, str) or not text or len(text) > 12_000:
            problems.append("markdown text must be 1-12000 chars")
    elif kind in ELEMENT_LIMITS:
        elements = block.get("elements")
        if not isinstance(elements, list) or not 1 <= len(elements) <= ELEMENT_LIMITS[kind]:
            problems.append(f"{kind} needs 1-{ELEMENT_LIMITS[kind]} elements")
            return problems
        action_ids = [e.get("action_id") for e in elements if isinstance(e, dict) and e.get("action_id")]
        if len(action_ids) != len(set(action_ids)):
            problems.append("duplicate action_id in block")
        for e in elements:
            if kind == "context" and isinstance(e, dict) and e.get("type") in ("mrkdwn", "plain_text"):
                problems += _text_problems(e, 3000)
            else:
                problems += _element_problems(e)
    elif kind == "input":
        problems += _text_problems(block.get("label"), 2000, plain_only=True)
        problems += _element_problems(block.get("element"))
    return problems


def _text_problems(obj: Any, limit: int, *, plain_only: bool = False) -> list[str]:
    kinds = ("plain_text",) if plain_only else ("plain_text", "mrkdwn")
    if not isinstance(obj, dict) or obj.get("type") not in kinds:
        return ["bad text object"]
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        return ["text must be a non-empty string"]
    return [f"text longer than {limit}"] if len(text) > limit else []


def _element_problems(e: Any) -> list[str]:
    if not isinstance(e, dict) or not isinstance(e.get("type"), str):
        return ["element missing type"]
    problems = []
    action_id = e.get("action_id")
    if action_id is not None and (not isinstance(action_id, str) or len(action_id) > 255):
        problems.append("action_id longer than 255")
    if e["type"] == "button":
        problems += _text_problems(e.get("text"), 75, plain_only=True)
        value = e.get("value")
        if value is not None and (not isinstance(value, str) or len(value) > 2000):
            problems.append("button value longer than 2000")
        if e.get("style") not in (None, "primary", "danger"):
            problems.append("bad button style")
    elif e["type"] == "feedback_buttons":
        for side in ("positive_button", "negative_button"):
            button = e.get(side)
            if not isinstance(button, dict) or not isinstance(button.get("value"), str) or len(button["value"]) > 2000:
                problems.append(f"{side} invalid")
            else:
                problems += _text_problems(button.get("text"), 75, plain_only=True)
    return problems


def text_size(blocks: Any) -> int:
    """All text strings in ``blocks`` — what the (undocumented, ~12k) cumulative cap counts."""
    if isinstance(blocks, dict):
        return sum(len(v) if k == "text" and isinstance(v, str) else text_size(v) for k, v in blocks.items())
    if isinstance(blocks, list):
        return sum(text_size(b) for b in blocks)
    return 0


def render_blocks(blocks: Iterable[dict[str, Any]]) -> str:
    """Blocks as a reader sees them, roughly: one line group per block, buttons as ``[Label]``."""
    lines = []
    for block in blocks:
        kind = block.get("type")
        if kind in ("header", "section", "markdown"):
            text = block.get("text")
            lines += [text if isinstance(text, str) else (text or {}).get("text", "")]
            lines += [f.get("text", "") for f in block.get("fields") or []]
        elif kind == "context":
            lines.append(" ".join(e.get("text", "") for e in block.get("elements", []) if isinstance(e, dict)))
        elif kind == "actions":
            lines.append(" ".join(f"[{e.get('text', {}).get('text', '')}]" for e in block.get("elements", [])))
        elif kind == "context_actions":
            lines.append(
                " ".join(
                    f"[{e[side]['text']['text']}]"
                    for e in block.get("elements", [])
                    for side in ("positive_button", "negative_button")
                    if side in e
                )
            )
        elif kind == "divider":
            lines.append("---")
    return "\n".join(line for line in lines if line)


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


class FakeSlackApi(LocalServer):
    """The fake Web API. Configure users, channels and user groups; queue faults with :meth:`fail`;
    expire streams with :meth:`expire_stream` (or ``stream_ttl_s`` against ``clock``)."""

    def __init__(
        self,
        *,
        token: str = "xoxb-test-token",
        team_id: str = TEAM_ID,
        bot_user_id: str = BOT_USER_ID,
        users: Iterable[dict[str, Any]] = (),
        channels: Iterable[dict[str, Any]] = (),
        usergroups: dict[str, list[str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        stream_ttl_s: float | None = None,
        cumulative_text_cap: int = 12_000,
    ) -> None:
        super().__init__()
        self.token, self.team_id, self.bot_user_id = token, team_id, bot_user_id
        #: Workspaces installed through OAuth: their bot token → (team id, bot user id).
        self.installed: dict[str, tuple[str, str]] = {}
        #: OAuth codes Slack would hand out: code → (team id, bot token, bot user id).
        self.codes: dict[str, tuple[str, str, str]] = {}
        self._caller: str | None = None
        self.users = {u["id"]: u for u in users}
        self.channels = {c["id"]: c for c in channels}
        self.usergroups = dict(usergroups or {})
        self.clock = clock
        self.stream_ttl_s = stream_ttl_s
        self.cumulative_text_cap = cumulative_text_cap
        self.slack_calls: list[SlackCall] = []
        self.statuses: list[tuple[str, str, str]] = []  # (channel, thread_ts, status) in order
        self.views: dict[str, dict[str, Any]] = {}
        self.home: dict[str, dict[str, Any]] = {}
        self.ephemeral: list[dict[str, Any]] = []
        self._messages: dict[tuple[str, str], _Message] = {}
        self._faults: dict[str, list[Fault]] = {}
        self._seq = 0

    def url_prefix(self) -> str:
        return "/api/"

    def routes(self) -> list[web.RouteDef]:
        return [web.route("*", "/api/{method}", self._handle)]

    # -- test helpers -------------------------------------------------------------------
    def fail(self, method: str, *faults: Fault) -> None:
        """Queue ``faults`` for the next calls of ``method``, one per call, in order."""
        self._faults.setdefault(method, []).extend(faults)

    def calls(self, method: str | None = None) -> list[SlackCall]:
        """Every call of ``method`` (all calls when None), in arrival order."""
        return [c for c in self.slack_calls if method is None or c.method == method]

    async def wait_for(self, method: str, count: int = 1, within_s: float = 5.0) -> list[SlackCall]:
        """Wait (on events, never sleeping) until ``count`` calls of ``method`` arrived."""
        async with asyncio.timeout(within_s):
            while len(self.calls(method)) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.calls(method)

    async def until(self, check: Callable[[], T], within_s: float = 15.0) -> T:
        """Wait (on arrivals, never sleeping) until ``check()`` is truthy; return it."""
        async with asyncio.timeout(within_s):
            while True:
                self._arrived.clear()
                found = check()
                if found:
                    return found
                await self._arrived.wait()

    def add_user_message(
        self, channel: str, text: str, *, user: str = "U0CUSTOMER", thread_ts: str | None = None
    ) -> str:
        """A message a person wrote (e.g. the one a stream replies to); returns its ts."""
        msg = _Message(channel=channel, ts=self._next_ts(), thread_ts=thread_ts, user=user, text=text)
        self._messages[(channel, msg.ts)] = msg
        return msg.ts

    def expire_stream(self, channel: str, ts: str) -> None:
        """The stream at ``ts`` dies server-side: appends and stops now fail."""
        msg = self._messages[(channel, ts)]
        if msg.state == "streaming":
            msg.state = "expired"

    def messages_in(
        self, channel: str, thread_ts: str | None = None, *, include_parent: bool = False
    ) -> list[SeenMessage]:
        """What a person sees: the channel's top-level messages, or the replies in ``thread_ts``
        (with the parent first when ``include_parent``). Deleted and ephemeral messages are gone."""
        out = []
        for msg in sorted(self._messages.values(), key=lambda m: _ts_key(m.ts)):
            self._age(msg)
            if msg.channel != channel or msg.state == "deleted":
                continue
            if thread_ts is None:
                keep = msg.thread_ts in (None, msg.ts)
            else:
                keep = (msg.thread_ts == thread_ts and msg.ts != thread_ts) or (include_parent and msg.ts == thread_ts)
            if keep:
                out.append(
                    SeenMessage(
                        channel=msg.channel,
                        ts=msg.ts,
                        thread_ts=msg.thread_ts,
                        user=msg.user,
                        text=msg.text,
                        blocks=tuple(msg.blocks),
                        markdown=msg.markdown,
                        tasks=tuple(msg.tasks.values()),
                        state=msg.state,
                        edited=msg.edited,
                    )
                )
        return out

    def transcript(self, channel: str, thread_ts: str | None = None) -> str:
        """The thread (or channel) as plain text, message by message — for printed demos."""
        seen = self.messages_in(channel, thread_ts, include_parent=thread_ts is not None)
        return "\n\n".join(f"[{m.user}] {m.visible}" for m in seen)

    # -- the server -------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        headers = {k.lower(): v for k, v in request.headers.items()}
        status, extra_headers = 200, {}
        args: dict[str, Any] = {}
        try:
            args = await _read_args(request)
            if method != "oauth.v2.access":  # the code exchange authenticates with the client secret
                self._check_token(headers, args)
            fault = self._next_fault(method)
            if fault is not None and fault.delay_s:
                await asyncio.sleep(fault.delay_s)
            if fault is not None and fault.error:
                status, extra_headers = fault.status, fault.headers
                raise SlackError(fault.error)
            body = {"ok": True, **self._dispatch(method, args)}
        except SlackError as exc:
            body = {"ok": False, "error": exc.code, **exc.extra}
        self.slack_calls.append(
            SlackCall(
                method=method,
                http_method=request.method,
                headers=headers,
                args=args,
                status=status,
                response=body,
                at=self.clock(),
            )
        )
        self.record(
            RecordedRequest(method=request.method, path=request.path, headers=headers, body=args, status=status)
        )
        return web.json_response(body, status=status, headers=extra_headers)

    def _check_token(self, headers: dict[str, str], args: dict[str, Any]) -> None:
        auth = headers.get("authorization", "")
        token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else args.pop("token", None)
        if not token:
            raise SlackError("not_authed")
        if token != self.token and token not in self.installed:
            raise SlackError("invalid_auth")
        self._caller = token

    def _next_fault(self, method: str) -> Fault | None:
        queue = self._faults.get(method)
        return queue.pop(0) if queue else None

    def _dispatch(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        if method not in REQUIRED:
            raise SlackError("unknown_method")
        missing = [
            name
            for name in REQUIRED[method]
            if args.get(name) is None or (args[name] == "" and name not in MAY_BE_EMPTY)
        ]
        if missing:
            raise SlackError("invalid_arguments", response_metadata={"messages": [f"missing: {', '.join(missing)}"]})
        handler: Callable[[dict[str, Any]], dict[str, Any]] = getattr(self, "_" + method.replace(".", "_"))
        return handler(args)

    # -- methods --------------------------------------------------------------------------
    def grant(self, code: str, *, team_id: str, token: str, bot_user_id: str = "U0SIGNOFF2") -> None:
        """An install of the app into ``team_id`` that Slack would finish with ``code``."""
        self.codes[code] = (team_id, token, bot_user_id)

    def _oauth_v2_access(self, args: dict[str, Any]) -> dict[str, Any]:
        grant = self.codes.pop(str(args["code"]), None)
        if grant is None:
            raise SlackError("invalid_code")
        team_id, token, bot_user = grant
        self.installed[token] = (team_id, bot_user)
        return {
            "access_token": token,
            "token_type": "bot",
            "scope": "chat:write,commands,app_mentions:read",
            "bot_user_id": bot_user,
            "app_id": "A0SIGNOFF",
            "team": {"id": team_id, "name": f"workspace {team_id}"},
            "enterprise": None,
            "is_enterprise_install": False,
            "authed_user": {"id": "U0INSTALLER"},
        }

    def _auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        if self._caller in self.installed:
            team_id, bot_user = self.installed[self._caller]
            return {
                "url": "https://other.slack.com/",
                "team": "other",
                "user": "signoff",
                "team_id": team_id,
                "user_id": bot_user,
                "bot_id": "B0SIGNOFF2",
                "is_enterprise_install": False,
            }
        return {
            "url": "https://signoff-test.slack.com/",
            "team": "signoff test",
            "user": "signoff",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def _chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args["channel"])
        text, blocks, markdown = self._content(args)
        thread_ts = args.get("thread_ts") or None
        msg = _Message(
            channel=channel,
            ts=self._next_ts(),
            thread_ts=thread_ts,
            user=self.bot_user_id,
            text=text,
            blocks=blocks,
            markdown=markdown,
        )
        self._messages[(channel, msg.ts)] = msg
        return {"channel": channel, "ts": msg.ts, "message": self._message_json(msg)}

    def _chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        msg = self._own_message(args["channel"], args["ts"])
        text, blocks, markdown = self._content(args, require=False)
        if msg.state in ("streaming", "expired", "stopped"):
            # The update replaces what was streamed; the message is an ordinary one from now on.
            msg.markdown, msg.tasks, msg.blocks, msg.state = None, {}, [], "posted"
        if "text" in args:
            msg.text = text
        if "blocks" in args:
            msg.blocks = blocks
        if markdown is not None:
            msg.markdown, msg.blocks = markdown, []
        msg.edited = True
        return {"channel": msg.channel, "ts": msg.ts, "text": msg.text, "message": self._message_json(msg)}

    def _chat_postEphemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args["channel"])
        text, blocks, markdown = self._content(args)
        ts = self._next_ts()
        self.ephemeral.append(
            {
                "channel": channel,
                "user": args["user"],
                "ts": ts,
                "text": text,
                "blocks": blocks,
                "markdown": markdown,
                "thread_ts": args.get("thread_ts"),
            }
        )
        return {"message_ts": ts}

    def _chat_delete(self, args: dict[str, Any]) -> dict[str, Any]:
        msg = self._own_message(args["channel"], args["ts"])
        msg.state = "deleted"
        return {"channel": msg.channel, "ts": msg.ts}

    def _chat_startStream(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args["channel"])
        recipient = (args.get("recipient_user_id"), args.get("recipient_team_id"))
        if not self._is_dm(channel) and not all(recipient):
            raise SlackError(
                "invalid_arguments",
                response_metadata={"messages": ["recipient_user_id and recipient_team_id are required outside DMs"]},
            )
        mode = args.get("task_display_mode")
        if mode is not None and mode not in ("timeline", "plan"):
            raise SlackError("invalid_arguments")
        msg = _Message(
            channel=channel,
            ts=self._next_ts(),
            thread_ts=args["thread_ts"],
            user=self.bot_user_id,
            markdown="",
            state="streaming",
            started_at=self.clock(),
            recipient=recipient,
        )
        self._stream_content(msg, args)
        self._messages[(channel, msg.ts)] = msg
        return {"channel": channel, "ts": msg.ts}

    def _chat_appendStream(self, args: dict[str, Any]) -> dict[str, Any]:
        msg = self._streaming(args)
        if args.get("markdown_text") is None and args.get("chunks") is None:
            raise SlackError("invalid_arguments")
        self._stream_content(msg, args)
        return {"channel": msg.channel, "ts": msg.ts}

    def _chat_stopStream(self, args: dict[str, Any]) -> dict[str, Any]:
        msg = self._streaming(args)
        blocks = self._blocks(args.get("blocks"), limit=MAX_STOP_BLOCKS)
        self._stream_content(msg, args)
        msg.blocks, msg.state = blocks, "stopped"
        return {"channel": msg.channel, "ts": msg.ts, "message": self._message_json(msg)}

    def _assistant_threads_setStatus(self, args: dict[str, Any]) -> dict[str, Any]:
        loading = args.get("loading_messages")
        if loading is not None and (
            not isinstance(loading, list) or len(loading) > 10 or not all(isinstance(x, str) for x in loading)
        ):
            raise SlackError("invalid_arguments")
        status = args["status"] if isinstance(args["status"], str) else ""
        self.statuses.append((args["channel_id"], args["thread_ts"], status))
        return {}

    def _assistant_threads_setSuggestedPrompts(self, args: dict[str, Any]) -> dict[str, Any]:
        prompts = args["prompts"]
        if (
            not isinstance(prompts, list)
            or not 1 <= len(prompts) <= 4
            or not all(isinstance(p, dict) and p.get("title") and p.get("message") for p in prompts)
        ):
            raise SlackError("invalid_arguments")
        return {}

    def _assistant_threads_setTitle(self, args: dict[str, Any]) -> dict[str, Any]:
        return {}

    def _views_open(self, args: dict[str, Any]) -> dict[str, Any]:
        view = self._view(args["view"], "modal")
        return {"view": view}

    def _views_publish(self, args: dict[str, Any]) -> dict[str, Any]:
        view = self._view(args["view"], "home")
        self.home[args["user_id"]] = view
        return {"view": view}

    def _views_update(self, args: dict[str, Any]) -> dict[str, Any]:
        view_id = args.get("view_id") or next(
            (v["id"] for v in self.views.values() if v.get("external_id") == args.get("external_id")), None
        )
        if view_id not in self.views:
            raise SlackError("not_found")
        kind = self.views[view_id]["type"]
        return {"view": self._view(args["view"], kind, view_id=view_id)}

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = self.users.get(args["user"])
        if user is None:
            raise SlackError("user_not_found")
        return {"user": user}

    def _conversations_info(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self.channels.get(args["channel"])
        if channel is None:
            raise SlackError("channel_not_found")
        return {"channel": channel}

    def _usergroups_users_list(self, args: dict[str, Any]) -> dict[str, Any]:
        if args["usergroup"] not in self.usergroups:
            raise SlackError("no_such_subteam")
        return {"users": list(self.usergroups[args["usergroup"]])}

    def _reactions_add(self, args: dict[str, Any]) -> dict[str, Any]:
        msg = self._messages.get((args["channel"], args["timestamp"]))
        if msg is None or msg.state == "deleted":
            raise SlackError("message_not_found")
        if args["name"] in msg.reactions:
            raise SlackError("already_reacted")
        msg.reactions.append(args["name"])
        return {}

    # -- shared checks --------------------------------------------------------------------------
    def _next_ts(self) -> str:
        self._seq += 1
        return f"{1_700_000_000 + self._seq}.{self._seq:06d}"

    def _channel(self, channel: Any) -> str:
        if not isinstance(channel, str) or channel[:1] not in ("C", "D", "G") or not channel[1:].isalnum():
            raise SlackError("channel_not_found")
        if self.channels and channel not in self.channels and not channel.startswith("D"):
            raise SlackError("channel_not_found")
        return channel

    def _is_dm(self, channel: str) -> bool:
        known = self.channels.get(channel)
        return bool(known["is_im"]) if known else channel.startswith("D")

    def _own_message(self, channel: str, ts: str) -> _Message:
        msg = self._messages.get((channel, ts))
        if msg is None or msg.state == "deleted":
            raise SlackError("message_not_found")
        if msg.user != self.bot_user_id:
            raise SlackError("cant_update_message")
        return msg

    def _content(self, args: dict[str, Any], *, require: bool = True) -> tuple[str, list[dict[str, Any]], str | None]:
        text, markdown = args.get("text"), args.get("markdown_text")
        blocks = self._blocks(args.get("blocks")) if args.get("blocks") is not None else []
        if markdown is not None:
            if text or blocks:
                raise SlackError(
                    "invalid_arguments",
                    response_metadata={"messages": ["markdown_text cannot be used with text or blocks"]},
                )
            if not isinstance(markdown, str) or len(markdown) > MAX_MARKDOWN:
                raise SlackError("invalid_arguments")
        if require and not text and not blocks and not markdown:
            raise SlackError("no_text")
        if isinstance(text, str) and len(text) > MAX_TEXT:
            raise SlackError("msg_too_long")
        return (text if isinstance(text, str) else ""), blocks, markdown

    def _blocks(self, blocks: Any, *, limit: int = 50, surface: str = "message") -> list[dict[str, Any]]:
        if blocks is None:
            return []
        problems = block_problems(blocks, limit=limit, surface=surface)
        if problems:
            raise SlackError("invalid_blocks", errors=problems)
        if surface == "message" and text_size(blocks) > self.cumulative_text_cap:
            raise SlackError("msg_blocks_too_long")
        return list(blocks)

    def _streaming(self, args: dict[str, Any]) -> _Message:
        msg = self._messages.get((args["channel"], args["ts"]))
        if msg is None or msg.state == "deleted":
            raise SlackError("message_not_found")
        self._age(msg)
        if msg.state != "streaming":
            raise SlackError("message_not_in_streaming_state")
        return msg

    def _age(self, msg: _Message) -> None:
        if (
            msg.state == "streaming"
            and self.stream_ttl_s is not None
            and self.clock() - msg.started_at >= self.stream_ttl_s
        ):
            msg.state = "expired"

    def _stream_content(self, msg: _Message, args: dict[str, Any]) -> None:
        """Apply ``markdown_text`` and ``chunks`` to a streaming message (all-or-nothing)."""
        markdown = args.get("markdown_text")
        chunks = args.get("chunks") or []
        if markdown is not None and not isinstance(markdown, str):
            raise SlackError("invalid_arguments")
        if not isinstance(chunks, list) or len(chunks) > MAX_CHUNKS:
            raise SlackError("invalid_arguments")
        added = markdown or ""
        tasks: list[dict[str, Any]] = []
        plan = None
        for chunk in chunks:
            kind = chunk.get("type") if isinstance(chunk, dict) else None
            if kind == "markdown_text" and isinstance(chunk.get("text"), str):
                added += chunk["text"]
            elif (
                kind == "task_update"
                and chunk.get("id")
                and chunk.get("title")
                and (chunk.get("status") in TASK_STATUSES)
            ):
                tasks.append(chunk)
            elif kind == "plan_update" and isinstance(chunk.get("title"), str):
                plan = chunk["title"]
            elif kind == "blocks":
                self._blocks(chunk.get("blocks"))
            else:
                raise SlackError("invalid_chunks", errors=[f"bad chunk: {str(chunk)[:80]}"])
        if len(added) > MAX_MARKDOWN:
            raise SlackError("invalid_arguments", response_metadata={"messages": ["markdown_text too long"]})
        msg.markdown = (msg.markdown or "") + added
        for task in tasks:
            msg.tasks[task["id"]] = {k: v for k, v in task.items() if k != "type"}
        msg.plan_title = plan or msg.plan_title

    def _view(self, view: Any, kind: str, *, view_id: str | None = None) -> dict[str, Any]:
        if not isinstance(view, dict) or view.get("type") != kind:
            raise SlackError("invalid_arguments", response_metadata={"messages": [f"view.type must be {kind}"]})
        if kind == "modal":
            title = (view.get("title") or {}).get("text", "")
            if not title or len(title) > 24:
                raise SlackError("invalid_arguments", response_metadata={"messages": ["view.title 1-24 chars"]})
        if len(view.get("private_metadata") or "") > 3000 or len(view.get("callback_id") or "") > 255:
            raise SlackError("invalid_arguments")
        self._blocks(view.get("blocks"), limit=100, surface=kind)
        self._seq += 1
        stored = {**view, "id": view_id or f"V{self._seq:08d}", "team_id": self.team_id}
        self.views[stored["id"]] = stored
        return stored

    def _message_json(self, msg: _Message) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "message", "user": msg.user, "ts": msg.ts, "text": msg.text}
        if msg.blocks:
            out["blocks"] = msg.blocks
        if msg.thread_ts:
            out["thread_ts"] = msg.thread_ts
        return out


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


class FakeClock:
    """A monotonic clock tests move by hand, with a matching ``sleep`` that never sleeps.

    ``auto=True``: ``sleep(d)`` just moves the clock on by ``d``. ``auto=False``: a
    sleeper waits until :meth:`advance` passes its deadline, so a test can hold a
    channel's pacing and watch another channel go ahead.
    """

    def __init__(self, start: float = 1_000.0, *, auto: bool = True) -> None:
        self.now = start
        self.auto = auto
        self.slept: list[float] = []
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []
        self._changed = asyncio.Event()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        """Record the wait; move on (auto) or wait for :meth:`advance`."""
        self.slept.append(seconds)
        if self.auto or seconds <= 0:
            self.now += max(seconds, 0.0)
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, future))
        self._changed.set()
        await future

    def advance(self, seconds: float) -> None:
        """Move the clock on and wake every sleeper whose deadline has passed."""
        self.now += seconds
        due = [(t, f) for t, f in self._sleepers if t <= self.now]
        self._sleepers = [(t, f) for t, f in self._sleepers if t > self.now]
        for _, future in due:
            if not future.done():
                future.set_result(None)

    async def wait_for_sleepers(self, count: int = 1, within_s: float = 5.0) -> None:
        """Wait (on events) until ``count`` sleepers are waiting."""
        async with asyncio.timeout(within_s):
            while len(self._sleepers) < count:
                self._changed.clear()
                await self._changed.wait()
