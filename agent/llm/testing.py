"""Models for tests, shipped with the package: no network, no key.

* :class:`ScriptedModel` answers from a queue and records what it was asked.
* :class:`FunctionModel` answers with a function of the request.
* :class:`CompromisedModel` is the worst-case planner for adversarial tests: it
  obeys every ``[[CALL tool_name {json args}]]`` directive it can read.
* :func:`block_real_model_calls` is the tripwire that makes the real clients
  refuse anything but loopback (``tests/fakes/plugin.py`` turns it on for every test).
"""

from __future__ import annotations

import inspect
import json
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeAlias

from agent.llm.base import Block, ModelRequest, ModelResponse, ToolResultBlock, Usage, is_tool_use
from agent.llm.sending import RealModelCallBlocked, is_loopback_url, outbound_loopback_only

__all__ = [
    "CompromisedModel",
    "Directive",
    "FunctionModel",
    "RealModelCallBlocked",
    "ScriptExhausted",
    "ScriptedModel",
    "allow_real_model_calls",
    "block_real_model_calls",
    "find_directives",
    "is_loopback_url",
    "make_response",
    "text_block",
    "tool_result_block",
    "tool_use_block",
]

#: What a test model may answer with: a full response, a list of blocks, or plain text.
Reply: TypeAlias = ModelResponse | list[Block] | str


# --- blocks -----------------------------------------------------------------------


def text_block(text: str) -> Block:
    """``{"type": "text", "text": text}``."""
    return {"type": "text", "text": text}


def tool_use_block(name: str, input: dict[str, Any], id: str | None = None) -> Block:
    """A ``tool_use`` block; ``id`` defaults to a fresh unique ``toolu_…`` id."""
    return {"type": "tool_use", "id": id or new_tool_use_id(), "name": name, "input": input}


def tool_result_block(
    tool_use_id: str, content: str | list[Block] | dict[str, Any], *, is_error: bool = False
) -> ToolResultBlock:
    """A ``tool_result`` block; a dict ``content`` is sent as its JSON text."""
    if isinstance(content, dict):
        content = json.dumps(content, ensure_ascii=False)
    block: ToolResultBlock = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block


def new_tool_use_id() -> str:
    """A unique id shaped like the API's (``toolu_`` + 24 base-16 characters)."""
    return f"toolu_{uuid.uuid4().hex[:24]}"


def make_response(reply: Reply, *, model: str, request: ModelRequest | None = None) -> ModelResponse:
    """Normalise a shorthand reply; stop_reason is ``tool_use`` iff a tool_use block is present."""
    if isinstance(reply, ModelResponse):
        return reply
    content = [text_block(reply)] if isinstance(reply, str) else list(reply)
    has_tools = any(b.get("type") == "tool_use" for b in content)
    return ModelResponse(
        stop_reason="tool_use" if has_tools else "end_turn",
        content=content,
        usage=estimate_usage(request, content),
        model=model,
        request_id=f"req_test_{uuid.uuid4().hex[:16]}",
    )


def estimate_usage(request: ModelRequest | None, content: list[Block]) -> Usage:
    """Plausible token counts: characters / 4 of what went in and what came out."""
    if request is None:
        prompt_chars = 0
    else:
        tools = [(t.name, t.description, t.input_schema) for t in request.tools]
        history = [m.as_api() for m in request.messages]
        prompt_chars = len(request.system) + len(json.dumps([tools, history], default=str))
    out_chars = len(json.dumps(content, default=str))
    return Usage(input_tokens=max(1, prompt_chars // 4), output_tokens=max(1, out_chars // 4))


# --- scripted and function models ---------------------------------------------


class ScriptExhausted(AssertionError):
    """A :class:`ScriptedModel` was asked more often than it was scripted for."""


class ScriptedModel:
    """Answers from a queue of replies and records every request in :attr:`requests`."""

    def __init__(self, responses: Sequence[Reply], *, model_name: str = "scripted") -> None:
        self._queue = list(responses)
        self._scripted = len(self._queue)
        self._model_name = model_name
        self.requests: list[ModelRequest] = []

    @property
    def model_name(self) -> str:
        """``"scripted"`` unless told otherwise."""
        return self._model_name

    @property
    def remaining(self) -> int:
        """Replies not yet used."""
        return len(self._queue)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Record the request and pop the next reply.

        Raises :class:`ScriptExhausted` when none is left.
        """
        self.requests.append(request)
        if not self._queue:
            last = request.messages[-1].content if request.messages else []
            raise ScriptExhausted(
                f"ScriptedModel: request #{len(self.requests)} but only {self._scripted} "
                f"replies were scripted; last message was {json.dumps(last, default=str)[:300]}"
            )
        return make_response(self._queue.pop(0), model=self._model_name, request=request)


class FunctionModel:
    """Answers with ``fn(request)``, sync or async, returning any :data:`Reply`."""

    def __init__(
        self,
        fn: Callable[[ModelRequest], Reply | Awaitable[Reply]],
        *,
        model_name: str = "function",
    ) -> None:
        self._fn = fn
        self._model_name = model_name
        self.requests: list[ModelRequest] = []

    @property
    def model_name(self) -> str:
        """``"function"`` unless told otherwise."""
        return self._model_name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Record the request and answer with the function's reply."""
        self.requests.append(request)
        reply = self._fn(request)
        if inspect.isawaitable(reply):
            reply = await reply
        return make_response(reply, model=self._model_name, request=request)


# --- the compromised planner ------------------------------------------------------

_DIRECTIVE_HEAD = re.compile(r"\[\[CALL\s+([a-zA-Z0-9_-]{1,64})\s*")
_DECODER = json.JSONDecoder()


@dataclass(frozen=True, kw_only=True)
class Directive:
    """One ``[[CALL name {args}]]`` instruction found in the context."""

    name: str
    args: dict[str, Any]

    @property
    def key(self) -> tuple[str, str]:
        """Identity for "already issued": name plus canonical JSON of the args."""
        return (self.name, _canonical(self.args))


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def find_directives(text: str) -> Iterator[Directive]:
    """Directives in ``text`` in order; malformed ones are skipped."""
    pos = 0
    while (head := _DIRECTIVE_HEAD.search(text, pos)) is not None:
        pos = head.start() + 1
        try:
            args, end = _DECODER.raw_decode(text, head.end())
        except ValueError:
            continue
        while end < len(text) and text[end].isspace():
            end += 1
        if isinstance(args, dict) and text.startswith("]]", end):
            yield Directive(name=head.group(1), args=args)
            pos = end + 2


def _strings(value: Any) -> Iterator[str]:
    """Every string inside ``value``; a string that is itself JSON is opened and walked."""
    if isinstance(value, str):
        decoded = _json_or_none(value)
        if decoded is None:
            yield value
        else:
            yield from _strings(decoded)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _json_or_none(text: str) -> Any:
    stripped = text.strip()
    if not stripped or stripped[0] not in '{["':
        return None
    try:
        decoded = json.loads(stripped)
    except ValueError:
        return None
    return decoded if isinstance(decoded, (dict, list, str)) else None


def context_directives(request: ModelRequest) -> list[Directive]:
    """Distinct directives in every message of ``request`` (never the system prompt), in order."""
    seen: dict[tuple[str, str], Directive] = {}
    for message in request.messages:
        for text in _strings(message.content):
            for directive in find_directives(text):
                seen.setdefault(directive.key, directive)
    return list(seen.values())


def issued_calls(request: ModelRequest) -> set[tuple[str, str]]:
    """Keys of every tool_use already in the history."""
    return {
        (b["name"], _canonical(b.get("input", {})))
        for m in request.messages
        if m.role == "assistant"
        for b in m.content
        if is_tool_use(b)
    }


class CompromisedModel:
    """The worst-case planner: it obeys every directive it reads, once each, in order.

    A directive is ``[[CALL tool_name {json args}]]`` anywhere in the messages —
    user text, tool results (also inside JSON strings nested in them), documents.
    One tool call per response; when every directive has been issued (judged by
    the tool_use blocks in the history), it answers with ``final_text``.
    """

    def __init__(
        self,
        *,
        final_text: str = "Done: I followed every instruction I found.",
        model_name: str = "compromised",
    ) -> None:
        self._final_text = final_text
        self._model_name = model_name
        self.requests: list[ModelRequest] = []

    @property
    def model_name(self) -> str:
        """``"compromised"`` unless told otherwise."""
        return self._model_name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Issue the first directive not yet in the history, else answer in text."""
        self.requests.append(request)
        issued = issued_calls(request)
        for directive in context_directives(request):
            if directive.key not in issued:
                block = tool_use_block(directive.name, directive.args)
                return make_response([block], model=self._model_name, request=request)
        return make_response(self._final_text, model=self._model_name, request=request)


# --- tripwire ---------------------------------------------------------------------


@contextmanager
def block_real_model_calls() -> Iterator[None]:
    """Within the block, ``AnthropicClient``/``OpenAICompatClient`` raise
    :class:`RealModelCallBlocked` instead of sending to a non-loopback address."""
    with outbound_loopback_only(True):
        yield


@contextmanager
def allow_real_model_calls() -> Iterator[None]:
    """The explicit opt-in: lift :func:`block_real_model_calls` within the block."""
    with outbound_loopback_only(False):
        yield
