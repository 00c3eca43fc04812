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
from collections.abc import Callable
from typing import Any

from aiohttp import web

from sandbox.slack_web.methods import SlackMethods
from sandbox.slack_web.records import (
    MAY_BE_EMPTY,
    REQUIRED,
    Fault,
    SeenMessage,
    SlackCall,
    SlackError,
    T,
    _Message,
    _read_args,
    _ts_key,
)
from sandbox.slack_web.server import RecordedRequest


class FakeSlackApi(SlackMethods):
    """The fake Web API. Configure users, channels and user groups; queue faults with :meth:`fail`;
    expire streams with :meth:`expire_stream` (or ``stream_ttl_s`` against ``clock``)."""

    def url_prefix(self) -> str:
        """Where the SDK's ``base_url`` points: ``…/api/``."""
        return "/api/"

    def routes(self) -> list[web.RouteDef]:
        """``/api/{method}``, every HTTP method (the SDK sends GET and POST)."""
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
