"""OpenAI-compatible chat-completions servers (vLLM, Ollama, llama.cpp) behind
:class:`agent.llm.base.ModelClient`, over plain aiohttp.

History stays in Anthropic block form everywhere else; this module translates
at its edge, both ways. Retries, backoff and the breaker behave exactly as in
:mod:`agent.llm.anthropic`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from agent.errors import ModelUnavailable
from agent.llm.base import Block, Message, ModelRequest, ModelResponse, StopReason, ToolSpec, Usage
from agent.llm.breaker import CircuitBreaker
from agent.llm.retry import (
    Retryable,
    RetryPolicy,
    Sleep,
    check_outbound,
    counts_against_provider,
    is_retryable_status,
    parse_retry_after,
    send_with_retries,
)

log = logging.getLogger(__name__)

#: The ``input`` key of a tool_use whose arguments were not a JSON object; the
#: loop's schema check rejects it and the model gets an ``is_error`` result.
INVALID_JSON_KEY = "__invalid_json__"

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

    ``max_tokens`` is a ceiling: a request asking for more is clamped to it.
    """

    model: str
    base_url: str
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60
    max_retries: int = 4
    backoff_base_s: float = 0.5
    backoff_max_s: float = 20
    max_tokens: int = 1024


class OpenAICompatClient:
    """A :class:`~agent.llm.base.ModelClient` for ``POST {base_url}/chat/completions``.

    Fails like :class:`agent.llm.anthropic.AnthropicClient`: :class:`ModelUnavailable`
    with reason ``unavailable``, ``bad_request``, ``bad_response`` or ``circuit_open``.
    """

    def __init__(
        self,
        config: OpenAIConfig,
        *,
        breaker: CircuitBreaker | None = None,
        sleep: Sleep = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._config = config
        self._url = config.base_url.rstrip("/") + "/chat/completions"
        self._breaker = breaker or CircuitBreaker(name=f"openai:{config.model}")
        self._policy = RetryPolicy(
            max_retries=config.max_retries,
            backoff_base_s=config.backoff_base_s,
            backoff_max_s=config.backoff_max_s,
        )
        self._sleep = sleep
        self._rand = rand
        self._session: aiohttp.ClientSession | None = None

    @property
    def model_name(self) -> str:
        """The model name sent in every request."""
        return self._config.model

    @property
    def breaker(self) -> CircuitBreaker:
        """The circuit breaker guarding this client."""
        return self._breaker

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Translate, send with retries through the breaker, translate back."""
        check_outbound(self._config.base_url, client="OpenAICompatClient")
        body = build_chat_body(
            request, model=self._config.model, max_tokens=self._config.max_tokens
        )

        async def with_retries() -> ModelResponse:
            return await send_with_retries(
                lambda: self._attempt(body),
                policy=self._policy,
                what="openai-compat",
                sleep=self._sleep,
                rand=self._rand,
            )

        return await self._breaker.call(with_retries, is_failure=counts_against_provider)

    async def aclose(self) -> None:
        """Close the HTTP session, if one was opened."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> OpenAICompatClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _attempt(self, body: dict[str, Any]) -> ModelResponse:
        headers = {"content-type": "application/json"}
        if self._config.api_key:
            headers["authorization"] = f"Bearer {self._config.api_key}"
        if self._session is None:
            self._session = aiohttp.ClientSession()
        timeout = aiohttp.ClientTimeout(total=self._config.timeout_s)
        try:
            async with self._session.post(
                self._url, json=body, headers=headers, timeout=timeout
            ) as resp:
                raw = await resp.text()
                request_id = resp.headers.get("x-request-id")
                if resp.status >= 400:
                    raise _status_failure(resp.status, resp.headers, raw, request_id)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise Retryable(f"connection error: {exc!r}") from exc
        try:
            return from_chat_completion(json.loads(raw), request_id=request_id)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise ModelUnavailable(
                f"openai-compat: unusable response: {exc!r}", reason="bad_response"
            ) from exc


def _status_failure(status: int, headers: Any, raw: str, request_id: str | None) -> Exception:
    if is_retryable_status(status):
        return Retryable(
            f"HTTP {status}",
            status=status,
            retry_after_s=parse_retry_after(headers),
            request_id=request_id,
        )
    log.error(
        "openai-compat rejected the request: HTTP %s, request id %s: %s",
        status,
        request_id,
        raw[:500],
        extra={"status": status, "request_id": request_id},
    )
    return ModelUnavailable(
        f"openai-compat rejected the request (HTTP {status}, request id {request_id})",
        reason="bad_request",
        request_id=request_id,
    )


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
        if kind == "text":
            texts.append(block["text"])
        elif kind == "tool_use":
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
        if kind == "tool_result":
            content = _result_text(block.get("content", ""))
            if block.get("is_error"):
                content = f"ERROR: {content}"
            out.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": content})
        elif kind == "text":
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
        parts.append(
            block["text"] if block.get("type") == "text" else f"[{block.get('type')} omitted]"
        )
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
