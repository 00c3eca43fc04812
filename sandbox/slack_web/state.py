"""The simulated workspace's state and the checks its methods share."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from sandbox.slack_web.blocks import block_problems, text_size
from sandbox.slack_web.records import (
    BOT_USER_ID,
    MAX_CHUNKS,
    MAX_MARKDOWN,
    MAX_TEXT,
    TASK_STATUSES,
    TEAM_ID,
    Fault,
    SlackCall,
    SlackError,
    _Message,
)
from sandbox.slack_web.server import LocalServer


class SlackState(LocalServer):
    """What the simulated workspace holds, and the checks every method shares."""

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
