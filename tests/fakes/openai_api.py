"""A strict fake of an OpenAI-compatible chat-completions server
(``POST /v1/chat/completions``; :attr:`base_url` already ends in ``/v1``).

Validates what vLLM/llama.cpp templates choke on — above all that every
assistant ``tool_call`` is answered by a ``tool`` message with its id before the
next non-tool message — and answers through a pluggable responder.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from aiohttp import web

from tests.fakes import FakeServer, RecordedRequest, Reply, Responder, call_responder

ROLES = {"system", "user", "assistant", "tool"}


class Invalid(Exception):
    """A request the server would answer with 400."""


def chat_text(text: str) -> dict[str, Any]:
    """A responder reply: the assistant answers ``text`` (finish_reason ``stop``)."""
    return {"content": text}


def chat_tool_call(
    name: str,
    arguments: dict[str, Any] | str,
    *,
    id: str | None = None,
) -> dict[str, Any]:
    """A responder reply: one tool call; a str ``arguments`` is sent verbatim (may be broken)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call = {
        "id": id or f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": raw},
    }
    return {"content": None, "tool_calls": [call]}


def chat_error(status: int, message: str = "boom", *, retry_after: str | None = None) -> Reply:
    """A responder reply: an HTTP error with an OpenAI-style body."""
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    return status, headers, {"error": {"message": message, "type": "server_error", "code": None}}


def validate(body: Any) -> None:
    """Raise :class:`Invalid` for a malformed chat-completions request."""
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise Invalid("model is required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Invalid("messages must be a non-empty list")
    for i, tool in enumerate(body.get("tools", [])):
        function = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(function, dict):
            raise Invalid(f"tools[{i}]: expected a function tool")
        if not isinstance(function.get("name"), str) or not isinstance(function.get("parameters"), dict):
            raise Invalid(f"tools[{i}].function: name and parameters are required")
    _validate_messages(messages)


def _validate_messages(messages: list[Any]) -> None:
    pending: list[str] = []  # tool_call ids still owed a tool message
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ROLES:
            raise Invalid(f"messages[{i}].role: invalid role {role!r}")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                raise Invalid(f"messages[{i}]: tool message answers no pending tool_call: {call_id}")
            if not isinstance(message.get("content"), str):
                raise Invalid(f"messages[{i}].content: a tool message needs string content")
            pending.remove(call_id)
            continue
        if pending:
            raise Invalid(f"messages[{i}]: tool_calls without tool messages: {', '.join(pending)}")
        if role == "assistant":
            pending = _tool_call_ids(message.get("tool_calls") or [], i)
        elif not isinstance(message.get("content"), str):
            raise Invalid(f"messages[{i}].content: expected a string")
    if pending:
        raise Invalid(f"tool_calls without tool messages: {', '.join(pending)}")


def _tool_call_ids(calls: list[Any], i: int) -> list[str]:
    ids = []
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call.get("id"), str) or not isinstance(function, dict):
            raise Invalid(f"messages[{i}].tool_calls[{j}]: id and function are required")
        if not isinstance(function.get("arguments"), str):
            raise Invalid(f"messages[{i}].tool_calls[{j}].function.arguments: expected a string")
        ids.append(call["id"])
    return ids


class FakeOpenAIAPI(FakeServer):
    """``async with FakeOpenAIAPI(responder) as api:``; point ``OpenAIConfig.base_url`` at it.

    ``responder(body)`` returns ``{"content", "tool_calls"?, "finish_reason"?, "usage"?}``
    (the fake builds the completion around it) or ``(status, headers, body)``.
    """

    def __init__(self, responder: Responder | None = None) -> None:
        super().__init__()
        self.responder: Responder = responder or (lambda body: chat_text("ok"))

    def url_prefix(self) -> str:
        return "/v1"

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/chat/completions", self._completions)]

    async def _completions(self, request: web.Request) -> web.Response:
        body: Any = None
        headers: dict[str, str] = {}
        try:
            body = await request.json()
            validate(body)
        except (ValueError, Invalid) as exc:
            status, payload = 400, {"error": {"message": str(exc), "type": "invalid_request_error"}}
        else:
            reply = await call_responder(self.responder, body)
            if isinstance(reply, tuple):
                status, headers, payload = reply
            else:
                status, payload = 200, _completion(body, reply)
        self.record(
            RecordedRequest(
                method=request.method,
                path=request.path,
                headers={k.lower(): v for k, v in request.headers.items()},
                body=body,
                status=status,
            )
        )
        headers = {"x-request-id": f"req-{uuid.uuid4().hex[:16]}", **headers}
        return web.json_response(payload, status=status, headers=headers)


def _completion(body: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    calls = reply.get("tool_calls")
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if calls:
        message["tool_calls"] = calls
    prompt = len(json.dumps(body["messages"])) // 4
    completion = max(len(json.dumps(message)) // 4, 1)
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    usage["total_tokens"] = prompt + completion
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": reply.get("finish_reason", "tool_calls" if calls else "stop"),
            }
        ],
        "usage": {**usage, **reply.get("usage", {})},
    }
