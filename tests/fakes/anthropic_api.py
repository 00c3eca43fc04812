"""A strict fake of the Anthropic Messages API (``POST /v1/messages``).

It rejects, with the real API's 400 ``invalid_request_error`` shape, anything
the real API would reject that our code could plausibly send — and a little
more (a ``tool_use`` for a tool not offered in this request). Model turns come
from a pluggable responder.

Prompt caching is accounted as the API does it (docs: "Prompt caching"): the prompt is
read in the order tools, system, messages; a ``cache_control`` breakpoint (at most 4)
makes the prefix up to and including its block cacheable — written to the cache when
it is at least the model's minimum cacheable length, and never when shorter. A request
reads the longest prefix already cached that ends at one of its breakpoints or at any of
the 20 block boundaries before each (the API's lookback), so a breakpoint that moves to
the end of a growing conversation still hits what the previous request wrote. The
marker itself is not part of the cached content (a block hashes the same with or without
``cache_control``). An entry lives 5 minutes from its last write or read. Usage is then
``cache_read_input_tokens`` (the prefix read), ``cache_creation_input_tokens`` (from there
to the last cacheable breakpoint) and ``input_tokens`` (the rest), over the fake's
tokenizer: four bytes of canonical JSON a token.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from tests.fakes import FakeServer, RecordedRequest, Reply, Responder, call_responder

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
MAX_CACHE_BREAKPOINTS = 4
#: How many block boundaries before a breakpoint the API checks for an earlier cache entry.
CACHE_LOOKBACK_BLOCKS = 20
#: An entry's life after its last write or read (the default ``ephemeral`` TTL).
CACHE_TTL_S = 300.0


def min_cacheable_tokens(model: str) -> int:
    """The API's minimum cacheable prompt length for ``model`` (docs' table): 4096 for the
    Opus 4.5 / Haiku 4.5 generation, 2048 for older Haiku, 1024 for the rest (Sonnet, Opus 4/4.1)."""
    m = model.lower()
    if "haiku-4-5" in m or "opus-4-5" in m:
        return 4096
    if "haiku" in m:
        return 2048
    return 1024


RESULT_BLOCK_TYPES = {"text", "image", "document"}
BLOCK_TYPES = RESULT_BLOCK_TYPES | {"tool_use", "tool_result", "thinking", "redacted_thinking"}


class Invalid(Exception):
    """A request the real API would refuse (400 invalid_request_error unless told otherwise)."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status = status
        self.kind = kind


# --- turn helpers for responders --------------------------------------------------


def text_turn(text: str) -> dict[str, Any]:
    """A responder reply: the model answers ``text`` (stop_reason end_turn)."""
    return {"content": [{"type": "text", "text": text}]}


def tool_turn(name: str, input: dict[str, Any], *, id: str | None = None, text: str | None = None) -> dict[str, Any]:
    """A responder reply: the model calls ``name`` (optionally after some text)."""
    block = {
        "type": "tool_use",
        "id": id or f"toolu_{uuid.uuid4().hex[:24]}",
        "name": name,
        "input": input,
    }
    content = ([{"type": "text", "text": text}] if text else []) + [block]
    return {"content": content}


def tool_uses(messages: list[dict[str, Any]]) -> int:
    """How many ``tool_use`` blocks a request's messages hold (a stateless planner's position)."""
    return sum(
        1
        for m in messages
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_use"
    )


def refund_script(refund: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The scenarios' refund plan: load billing, cite the refund policy, issue ``refund``."""
    return [
        ("load_tools", {"group": "billing"}),
        ("search_knowledge", {"query": "refund window damaged"}),
        ("issue_refund", refund),
    ]


def api_error(status: int, message: str = "boom", *, retry_after: str | None = None) -> Reply:
    """A responder reply: an API error (429 rate_limit, 529 overloaded, 5xx api_error, …)."""
    kinds = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        429: "rate_limit_error",
        529: "overloaded_error",
    }
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    body = {"type": "error", "error": {"type": kinds.get(status, "api_error"), "message": message}}
    return status, headers, body


# --- validation -------------------------------------------------------------------


def validate(body: Any) -> None:
    """Raise :class:`Invalid` with the API's wording for anything it would reject."""
    if not isinstance(body, dict):
        raise Invalid("request body must be a JSON object")
    for key in ("model", "max_tokens", "messages"):
        if key not in body:
            raise Invalid(f"{key}: Field required")
    if not isinstance(body["model"], str) or not body["model"]:
        raise Invalid("model: Input should be a non-empty string")
    if not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1:
        raise Invalid("max_tokens: Input should be a positive integer")
    offered = _validate_tools(body.get("tools", []))
    _validate_system(body.get("system", ""))
    _validate_messages(body["messages"], offered)
    found = sum(1 for _ in _cache_controls(body))
    if found > MAX_CACHE_BREAKPOINTS:
        raise Invalid(f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found {found}.")


def _validate_tools(tools: Any) -> set[str]:
    if not isinstance(tools, list):
        raise Invalid("tools: Input should be a valid list")
    names: set[str] = set()
    for i, tool in enumerate(tools):
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise Invalid(f"tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
        if name in names:
            raise Invalid("tools: Tool names must be unique.")
        names.add(name)
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise Invalid(f"tools.{i}.custom.input_schema.type: Input should be 'object'")
        if not isinstance(tool.get("description", ""), str):
            raise Invalid(f"tools.{i}.custom.description: Input should be a valid string")
    return names


def _validate_system(system: Any) -> None:
    if isinstance(system, str):
        return
    if not isinstance(system, list):
        raise Invalid("system: Input should be a valid string or list")
    for i, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise Invalid(f"system.{i}.type: Input should be 'text'")
        if not isinstance(block.get("text"), str) or not block["text"]:
            raise Invalid("system: text content blocks must be non-empty")


def _validate_messages(messages: Any, offered: set[str]) -> None:
    if not isinstance(messages, list) or not messages:
        raise Invalid("messages: at least one message is required")
    if not isinstance(messages[0], dict) or messages[0].get("role") != "user":
        raise Invalid('messages: first message must use the "user" role')
    seen_ids: set[str] = set()
    pending: list[str] = []  # tool_use ids of the previous assistant message
    previous_role = None
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            raise Invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if role == previous_role:
            raise Invalid(
                f'messages: roles must alternate between "user" and "assistant", '
                f'but found multiple "{role}" roles in a row'
            )
        previous_role = role
        blocks = _blocks(message.get("content"), i)
        for j, block in enumerate(blocks):
            _validate_block(block, f"messages.{i}.content.{j}")
        if role == "assistant":
            pending = _assistant_tool_uses(blocks, i, seen_ids, offered)
        else:
            _check_results(blocks, pending, i)
            pending = []
    if pending:
        raise Invalid(_missing_results(pending))


def _blocks(content: Any, i: int) -> list[Any]:
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        raise Invalid(
            f"messages.{i}: all messages must have non-empty content except for the optional final assistant message"
        )
    return content


def _validate_block(block: Any, where: str) -> None:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind not in BLOCK_TYPES:
        raise Invalid(f"{where}.type: unknown content block type {kind!r}")
    if kind == "text" and (not isinstance(block.get("text"), str) or not block["text"]):
        raise Invalid("messages: text content blocks must be non-empty")
    if kind == "tool_use":
        if not isinstance(block.get("id"), str) or not TOOL_USE_ID.match(block["id"]):
            raise Invalid(f"{where}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'")
        if not isinstance(block.get("name"), str) or not isinstance(block.get("input"), dict):
            raise Invalid(f"{where}.tool_use: name (string) and input (object) are required")
    if kind == "tool_result":
        if not isinstance(block.get("tool_use_id"), str):
            raise Invalid(f"{where}.tool_result.tool_use_id: Field required")
        content = block.get("content", "")
        if not isinstance(content, (str, list)):
            raise Invalid(f"{where}.tool_result.content: Input should be a valid string or list")
        for k, inner in enumerate(content if isinstance(content, list) else []):
            if not isinstance(inner, dict) or inner.get("type") not in RESULT_BLOCK_TYPES:
                raise Invalid(f"{where}.tool_result.content.{k}.type: unknown block type")


def _assistant_tool_uses(blocks: list[Any], i: int, seen: set[str], offered: set[str]) -> list[str]:
    ids = []
    for j, block in enumerate(blocks):
        if block["type"] == "tool_result":
            raise Invalid(f"messages.{i}.content.{j}: tool_result blocks are only allowed in user messages")
        if block["type"] != "tool_use":
            continue
        if block["id"] in seen:
            raise Invalid(f"messages.{i}.content.{j}: `tool_use` ids must be unique: {block['id']}")
        if block["name"] not in offered:
            raise Invalid(f"messages.{i}.content.{j}: tool_use names a tool not in `tools`: {block['name']}")
        seen.add(block["id"])
        ids.append(block["id"])
    return ids


def _check_results(blocks: list[Any], pending: list[str], i: int) -> None:
    answered: list[str] = []
    leading = True
    for j, block in enumerate(blocks):
        if block["type"] != "tool_result":
            leading = False
            continue
        if not leading:
            raise Invalid(f"messages.{i}.content.{j}: tool_result blocks must come before any other content")
        if block["tool_use_id"] not in pending or block["tool_use_id"] in answered:
            raise Invalid(
                f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                f"blocks: {block['tool_use_id']}. Each `tool_result` block must have a "
                "corresponding `tool_use` block in the previous message."
            )
        answered.append(block["tool_use_id"])
    missing = [tid for tid in pending if tid not in answered]
    if missing:
        raise Invalid(f"messages.{i}: " + _missing_results(missing))


def _missing_results(ids: list[str]) -> str:
    return (
        f"`tool_use` ids were found without `tool_result` blocks immediately after: "
        f"{', '.join(ids)}. Each `tool_use` block must have a corresponding `tool_result` "
        "block in the next message."
    )


def _cache_controls(body: dict[str, Any]) -> Iterator[int]:
    for index, item in enumerate(prompt_items(body)):
        if isinstance(item.get("block"), dict) and "cache_control" in item["block"]:
            yield index


# --- prompt cache -----------------------------------------------------------------


def prompt_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The prompt in cache order (tools, system, messages), one item per block."""
    items: list[dict[str, Any]] = [{"tool": None, "block": t} for t in body.get("tools", [])]
    system = body.get("system", "")
    if isinstance(system, str):
        items += [{"system": None, "block": {"type": "text", "text": system}}] if system else []
    else:
        items += [{"system": None, "block": b} for b in system]
    for i, message in enumerate(body["messages"]):
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        items += [{"message": i, "role": message["role"], "block": b} for b in blocks]
    return items


def canonical(value: Any) -> bytes:
    """The byte-exact canonical JSON the cache key is computed over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _unmarked(item: dict[str, Any]) -> dict[str, Any]:
    """``item`` with its block's ``cache_control`` removed: the marker is not content."""
    block = item.get("block")
    if isinstance(block, dict) and "cache_control" in block:
        return {**item, "block": {k: v for k, v in block.items() if k != "cache_control"}}
    return item


def tokens(data: bytes) -> int:
    """The fake's tokenizer: four bytes a token."""
    return len(data) // 4


# --- the server -------------------------------------------------------------------


class FakeAnthropicAPI(FakeServer):
    """``async with FakeAnthropicAPI(responder) as api:`` then point a client at ``api.base_url``.

    ``responder(body)`` returns ``{"content": [...], "stop_reason"?: ..., "usage"?: ...}``
    (the fake fills in id, model, stop_reason and usage) or ``(status, headers, body)``.
    ``min_cacheable_tokens`` is the shortest prefix the cache keeps: 0 (the default, so the
    tests' small prompts cache), a number, or ``None`` for the API's figure for the request's
    model (:func:`min_cacheable_tokens`).
    """

    def __init__(self, responder: Responder | None = None, *, min_cacheable_tokens: int | None = 0) -> None:
        super().__init__()
        self.responder: Responder = responder or (lambda body: text_turn("ok"))
        self.min_cacheable_tokens = min_cacheable_tokens
        self.cache: dict[str, tuple[int, float]] = {}  # prefix hash -> (prefix tokens, expires at)
        self.clock = time.monotonic
        self.last_prefix_hashes: tuple[str, ...] = ()

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/messages", self._messages)]

    async def _messages(self, request: web.Request) -> web.Response:
        body: Any = None
        prefix_hash: str | None = None
        headers: dict[str, str] = {}
        try:
            _check_headers(request)
            body = await request.json()
            validate(body)
        except Invalid as exc:
            status, payload = exc.status, _error(exc.kind, str(exc))
        except ValueError as exc:
            status, payload = 400, _error("invalid_request_error", f"invalid JSON body: {exc}")
        else:
            status, headers, payload, prefix_hash = await self._answer(body)
        self.record(
            RecordedRequest(
                method=request.method,
                path=request.path,
                status=status,
                prefix_hash=prefix_hash,
                prefix_hashes=self.last_prefix_hashes if prefix_hash else (),
                headers={k.lower(): v for k, v in request.headers.items()},
                body=body,
            )
        )
        headers = {"request-id": f"req_{uuid.uuid4().hex[:24]}", **headers}
        return web.json_response(payload, status=status, headers=headers)

    async def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, str], Any, str | None]:
        reply = await call_responder(self.responder, body)
        if isinstance(reply, tuple):
            status, headers, payload = reply
            return status, headers, payload, None
        prefix_hash, usage = self._usage(body, reply)
        return 200, {}, self._message(body, reply, usage), prefix_hash

    def _usage(self, body: dict[str, Any], reply: dict[str, Any]) -> tuple[str | None, dict[str, int]]:
        items = [_unmarked(i) for i in prompt_items(body)]
        now, floor = self.clock(), self.min_cacheable_tokens
        if floor is None:
            floor = min_cacheable_tokens(str(body.get("model", "")))
        prefix = _Prefixes(items)
        points = list(_cache_controls(body))
        read = 0
        for end in {e for b in points for e in range(max(0, b - CACHE_LOOKBACK_BLOCKS), b + 1)}:
            entry = self.cache.get(prefix.hash(end))
            if entry is not None and entry[1] > now:
                read = max(read, entry[0])
                self.cache[prefix.hash(end)] = (entry[0], now + CACHE_TTL_S)
        cacheable = [b for b in points if prefix.tokens(b) >= floor]
        written = max(prefix.tokens(cacheable[-1]) - read, 0) if cacheable else 0
        for b in cacheable:
            self.cache[prefix.hash(b)] = (prefix.tokens(b), now + CACHE_TTL_S)
        usage = {
            "input_tokens": max(tokens(canonical(items)) - read - written, 0),
            "output_tokens": max(tokens(canonical(reply["content"])), 1),
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
        }
        self.last_prefix_hashes = tuple(prefix.hash(b) for b in points)
        last = prefix.hash(points[-1]) if points else None
        return last, {**usage, **reply.get("usage", {})}

    @staticmethod
    def _message(body: dict[str, Any], reply: dict[str, Any], usage: dict[str, int]) -> dict[str, Any]:
        content = reply["content"]
        has_tools = any(b.get("type") == "tool_use" for b in content)
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": reply.get("model", body["model"]),
            "content": content,
            "stop_reason": reply.get("stop_reason", "tool_use" if has_tools else "end_turn"),
            "stop_sequence": None,
            "usage": usage,
        }


class _Prefixes:
    """Hash and token count of each prefix ``items[: end + 1]`` (computed once, on demand)."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self._memo: dict[int, tuple[str, int]] = {}

    def _of(self, end: int) -> tuple[str, int]:
        if end not in self._memo:
            data = canonical(self.items[: end + 1])
            self._memo[end] = (hashlib.sha256(data).hexdigest(), tokens(data))
        return self._memo[end]

    def hash(self, end: int) -> str:
        return self._of(end)[0]

    def tokens(self, end: int) -> int:
        return self._of(end)[1]


def _check_headers(request: web.Request) -> None:
    if not request.headers.get("x-api-key") and not request.headers.get("authorization"):
        raise Invalid("x-api-key header is required", 401, "authentication_error")
    if not request.headers.get("anthropic-version"):
        raise Invalid("anthropic-version header is required")


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
