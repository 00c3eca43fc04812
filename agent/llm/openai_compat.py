"""OpenAI-compatible chat-completions servers (vLLM, Ollama, llama.cpp) behind
:class:`agent.llm.base.ModelClient`, on the official ``openai`` SDK
(``AsyncOpenAI(base_url=...)``).

The only module that imports ``openai``, and the one place that maps tool calls
between the chat format and our blocks: history stays in Anthropic block form
everywhere else; this module translates at its edge, both ways. The SDK retries
429/5xx and connection errors itself (honouring ``retry-after``); the breaker,
the deadline and the honest give-up behave exactly as in :mod:`agent.llm.anthropic`.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import openai

from agent.errors import ModelUnavailable
from agent.llm.base import (
    Block,
    Message,
    ModelRequest,
    ModelResponse,
    StopReason,
    ToolSpec,
    Usage,
    is_text,
    is_tool_result,
    is_tool_use,
)
from agent.llm.breaker import CircuitBreaker
from agent.llm.sending import (
    attempts_made,
    check_outbound,
    counts_against_provider,
    gave_up,
    is_transient,
    rejected,
    within_deadline,
)

log = logging.getLogger(__name__)

#: The ``input`` key of a tool_use whose arguments were not a JSON object; the
#: loop's schema check rejects it and the model gets an ``is_error`` result.
INVALID_JSON_KEY = "__invalid_json__"

#: The SDK insists on a key; local servers need none, so none is sent (see ``_send``).
_NO_KEY = "unused"

_FINISH_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


@dataclass(frozen=True, kw_only=True)
class OpenAIConfig:
    """Where the server is (``base_url`` ends before ``/chat/completions``) and how to retry.

    ``timeout_s`` bounds one HTTP attempt, ``max_retries`` is the SDK's retry count,
    ``deadline_s`` bounds the whole call. ``max_tokens`` is a ceiling: a request
    asking for more is clamped to it.
    """

    model: str
    base_url: str
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60
    max_retries: int = 4
    deadline_s: float = 120
    max_tokens: int = 1024


class OpenAICompatClient:
    """A :class:`~agent.llm.base.ModelClient` for ``POST {base_url}/chat/completions``.

    Fails like :class:`agent.llm.anthropic.AnthropicClient`: :class:`ModelUnavailable`
    with reason ``unavailable``, ``bad_request``, ``bad_response`` or ``circuit_open``.
    """

    def __init__(self, config: OpenAIConfig, *, breaker: CircuitBreaker | None = None) -> None:
        self._config = config
        self._sdk = openai.AsyncOpenAI(
            base_url=config.base_url,
            api_key=config.api_key or _NO_KEY,
            timeout=config.timeout_s,
            max_retries=config.max_retries,
        )
        # Without a key of our own, send no Authorization header at all (not a placeholder).
        self._headers: dict[str, Any] = {} if config.api_key else {"Authorization": openai.omit}
        self._breaker = breaker or CircuitBreaker(name=f"openai:{config.model}")

    @property
    def model_name(self) -> str:
        """The model name sent in every request."""
        return self._config.model

    @property
    def base_url(self) -> str:
        """Where requests go."""
        return str(self._sdk.base_url)

    @property
    def breaker(self) -> CircuitBreaker:
        """The circuit breaker guarding this client."""
        return self._breaker

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Translate, send (the SDK retrying) through the breaker, translate back."""
        check_outbound(self._config.base_url, client="OpenAICompatClient")
        body = build_chat_body(request, model=self._config.model, max_tokens=self._config.max_tokens)
        return await self._breaker.call(lambda: self._send(body, request), is_failure=counts_against_provider)

    async def aclose(self) -> None:
        """Close the SDK's HTTP connection pool."""
        await self._sdk.close()

    async def __aenter__(self) -> OpenAICompatClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _send(self, body: dict[str, Any], request: ModelRequest) -> ModelResponse:
        create = self._sdk.chat.completions.create(**body, extra_headers=self._headers)
        try:
            completion = await within_deadline(create, deadline_s=self._config.deadline_s, provider="openai-compat")
        except openai.APIStatusError as exc:
            raise _status_failure(exc, request) from exc
        except openai.APIConnectionError as exc:
            raise gave_up("openai-compat", f"connection error: {exc}", attempts=attempts_made(exc.request)) from exc
        except openai.OpenAIError as exc:
            raise ModelUnavailable(f"openai-compat: unusable response: {exc}", reason="bad_response") from exc
        try:
            # The SDK builds its models without validating; servers stray (Ollama sends
            # arguments as an object), so the mapping below reads the plain JSON.
            data = completion.model_dump(mode="json", warnings=False)
            return from_chat_completion(data, request_id=completion._request_id)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            raise ModelUnavailable(f"openai-compat: unusable response: {exc!r}", reason="bad_response") from exc


def _status_failure(exc: openai.APIStatusError, request: ModelRequest) -> ModelUnavailable:
    status = exc.status_code
    if is_transient(status):
        return gave_up(
            "openai-compat", f"HTTP {status}", attempts=attempts_made(exc.response.request), request_id=exc.request_id
        )
    return rejected("openai-compat", status, exc.request_id, exc.response.text, request.metadata, logger=log)


# --- Anthropic blocks -> chat completions -------------------------------------


def build_chat_body(request: ModelRequest, *, model: str, max_tokens: int) -> dict[str, Any]:
    """The chat-completions body for ``request``."""
    body: dict[str, Any] = {
        "model": model,
        "messages": to_chat_messages(request.system, request.messages),
        "max_tokens": min(request.max_tokens, max_tokens),
        "stream": False,
    }
    if request.tools:
        body["tools"] = to_chat_tools(request.tools)
    return body


def to_chat_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs as OpenAI ``function`` tools, in the given order."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
            },
        }
        for t in tools
    ]


def to_chat_messages(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Anthropic history as chat messages: system first, tool results as ``tool`` messages."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        blocks = _as_blocks(message.content)
        if message.role == "assistant":
            out.append(_assistant_message(blocks))
        else:
            out.extend(_user_messages(blocks))
    return out


def _as_blocks(content: Any) -> list[Block]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _assistant_message(blocks: list[Block]) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if is_text(block):
            texts.append(block["text"])
        elif is_tool_use(block):
            calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": block["name"], "arguments": _arguments(block["input"])},
                }
            )
        elif kind not in ("thinking", "redacted_thinking"):
            raise _untranslatable(kind, "assistant")
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return message


def _arguments(tool_input: dict[str, Any]) -> str:
    # Send back exactly what the server produced, so its view of history is true.
    if set(tool_input) == {INVALID_JSON_KEY} and isinstance(tool_input[INVALID_JSON_KEY], str):
        return tool_input[INVALID_JSON_KEY]
    return json.dumps(tool_input, ensure_ascii=False)


def _user_messages(blocks: list[Block]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if is_tool_result(block):
            content = _result_text(block.get("content", ""))
            if block.get("is_error"):
                content = f"ERROR: {content}"
            out.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": content})
        elif is_text(block):
            texts.append(block["text"])
        else:
            raise _untranslatable(kind, "user")
    if texts:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        parts.append(block["text"] if block.get("type") == "text" else f"[{block.get('type')} omitted]")
    return "\n".join(parts)


def _untranslatable(kind: Any, role: str) -> ModelUnavailable:
    return ModelUnavailable(
        f"openai-compat cannot translate a {kind!r} block in a {role} message",
        reason="bad_request",
    )


# --- chat completions -> Anthropic blocks -------------------------------------


def from_chat_completion(data: dict[str, Any], *, request_id: str | None = None) -> ModelResponse:
    """A chat-completions response as a :class:`ModelResponse` of Anthropic blocks."""
    choice = data["choices"][0]
    message = choice["message"]
    content: list[Block] = []
    text = _message_text(message.get("content"))
    if text:
        content.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or []:
        function = call["function"]
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or f"call_{uuid.uuid4().hex[:24]}",
                "name": function["name"],
                "input": parse_arguments(function.get("arguments")),
            }
        )
    return ModelResponse(
        stop_reason=_stop_reason(choice.get("finish_reason"), content),
        content=content,
        usage=_usage(data.get("usage") or {}),
        model=data.get("model") or "",
        request_id=request_id or data.get("id"),
    )


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments as a dict; anything but a JSON object becomes
    ``{INVALID_JSON_KEY: raw}``."""
    if isinstance(raw, dict):  # some servers (Ollama) send an object, not a string
        return raw
    if raw is None or raw == "":
        return {}
    try:
        parsed = json.loads(raw)
    except (TypeError, ValueError):
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    return {INVALID_JSON_KEY: raw if isinstance(raw, str) else json.dumps(raw)}


def _message_text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(p.get("text", "") for p in content if p.get("type") == "text")


def _stop_reason(finish_reason: str | None, content: list[Block]) -> StopReason:
    has_tools = any(b["type"] == "tool_use" for b in content)
    # Several servers say "stop" even when they returned tool calls.
    if has_tools and finish_reason in (None, "stop"):
        return "tool_use"
    if finish_reason in _FINISH_REASONS:
        return _FINISH_REASONS[finish_reason]
    return "tool_use" if has_tools else "end_turn"


def _usage(usage: dict[str, Any]) -> Usage:
    prompt = usage.get("prompt_tokens") or 0
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    # prompt_tokens includes cached ones; Anthropic's input_tokens does not.
    return Usage(
        input_tokens=max(prompt - cached, 0),
        output_tokens=usage.get("completion_tokens") or 0,
        cache_read_input_tokens=cached,
    )
