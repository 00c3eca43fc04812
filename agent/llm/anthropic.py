"""The Anthropic Messages API behind :class:`agent.llm.base.ModelClient`.

The only module that imports ``anthropic``; every SDK exception is translated
to :class:`agent.errors.ModelUnavailable` here. The SDK retries 429/529/5xx and
connection errors itself (honouring ``retry-after-ms``/``retry-after``), up to
``max_retries`` times; the breaker sees one outcome per call, and
:func:`agent.llm.sending.within_deadline` bounds the whole call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, get_args

import anthropic

from agent.errors import ModelUnavailable
from agent.llm.base import Block, ModelRequest, ModelResponse, StopReason, Usage
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

_STOP_REASONS: frozenset[str] = frozenset(get_args(StopReason))


@dataclass(frozen=True, kw_only=True)
class AnthropicConfig:
    """Connection and retry settings; ``base_url=None`` lets the SDK read ``ANTHROPIC_BASE_URL``.

    ``timeout_s`` bounds one HTTP attempt, ``max_retries`` is the SDK's retry count,
    ``deadline_s`` bounds the whole call with its retries and waits. ``max_tokens``
    is a ceiling: a request asking for more is clamped to it. ``max_connections`` sizes
    the one connection pool every conversation of the process shares: that many calls in
    flight at once, each kept alive for the next step (the SDK's default keeps 100 alive,
    so a busier process reconnects on every call beyond them). The pool is the one of the
    SDK's ``DefaultAioHttpClient`` transport: the default transport's pool walks every connection
    it holds on each request (``has_expired`` per connection), a third of a busy process's CPU
    with 200 calls in flight; this one takes a kept connection in constant time.
    """

    model: str
    api_key: str = field(repr=False)
    base_url: str | None = None
    timeout_s: float = 60
    max_retries: int = 4
    deadline_s: float = 120
    max_tokens: int = 1024
    max_connections: int = 512
    #: Mark the prompt-cache breakpoints (see :func:`build_params`); off only to measure without.
    prompt_cache: bool = True


class AnthropicClient:
    """A :class:`~agent.llm.base.ModelClient` on the official ``AsyncAnthropic`` SDK.

    Marks two prompt-cache breakpoints (:func:`build_params`): the system block, so the
    tools followed by the system prompt form one cached prefix, and the conversation's
    last block, so each step reads the conversation so far from the cache. Raises
    :class:`ModelUnavailable` with reason ``unavailable`` (the SDK's retries
    spent, or the deadline passed), ``bad_request`` (a 4xx: our bug, logged with
    the request id, not retried), ``bad_response`` or ``circuit_open``.
    """

    def __init__(self, config: AnthropicConfig, *, breaker: CircuitBreaker | None = None) -> None:
        self._config = config
        self._sdk = anthropic.AsyncAnthropic(
            api_key=config.api_key,
            base_url=config.base_url,
            timeout=config.timeout_s,
            max_retries=config.max_retries,
            http_client=anthropic.DefaultAioHttpClient(
                limits=type(anthropic.DEFAULT_CONNECTION_LIMITS)(
                    max_connections=config.max_connections, max_keepalive_connections=config.max_connections
                )
            ),
        )
        self._breaker = breaker or CircuitBreaker(name=f"anthropic:{config.model}")

    @property
    def model_name(self) -> str:
        """The Anthropic model id requests are sent to."""
        return self._config.model

    @property
    def base_url(self) -> str:
        """Where requests go (the config's, else ``ANTHROPIC_BASE_URL``, else the SDK default)."""
        return str(self._sdk.base_url)

    @property
    def breaker(self) -> CircuitBreaker:
        """The circuit breaker guarding this client (state and trip count for metrics)."""
        return self._breaker

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send one Messages API request; see the class docstring for failures."""
        check_outbound(self.base_url, client="AnthropicClient")
        params = build_params(
            request, model=self._config.model, max_tokens=self._config.max_tokens, cache=self._config.prompt_cache
        )
        return await self._breaker.call(lambda: self._send(params, request), is_failure=counts_against_provider)

    async def aclose(self) -> None:
        """Close the SDK's HTTP connection pool."""
        await self._sdk.close()

    async def __aenter__(self) -> AnthropicClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _send(self, params: dict[str, Any], request: ModelRequest) -> ModelResponse:
        try:
            message = await within_deadline(
                self._sdk.messages.create(**params), deadline_s=self._config.deadline_s, provider="anthropic"
            )
        except anthropic.APIStatusError as exc:
            raise _status_failure(exc, request) from exc
        except anthropic.APIConnectionError as exc:
            raise gave_up("anthropic", f"connection error: {exc}", attempts=attempts_made(exc.request)) from exc
        except anthropic.AnthropicError as exc:
            raise ModelUnavailable(f"anthropic: unusable response: {exc}", reason="bad_response") from exc
        response = to_model_response(message)
        log.debug(
            "anthropic answered",
            extra={"request_id": response.request_id, "usage": response.usage, "metadata": dict(request.metadata)},
        )
        return response


_EPHEMERAL = {"type": "ephemeral"}


def build_params(request: ModelRequest, *, model: str, max_tokens: int, cache: bool = True) -> dict[str, Any]:
    """The Messages API body for ``request``: tools in the given order, the system, the messages.

    With ``cache``, two ``cache_control`` breakpoints (of the API's four): on the system block
    (tools + system, the prefix every request of every conversation with the same tools
    shares) and on the last block of the last message (the conversation so far: the next
    step's request finds it within the API's 20-block lookback and pays only for what is
    new). The last block is copied, never marked in place: history stays as stored.
    """
    messages = [message.as_api() for message in request.messages]
    if cache and messages and messages[-1]["content"]:
        last = messages[-1]
        content = last["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        last["content"] = [*content[:-1], {**content[-1], "cache_control": _EPHEMERAL}]
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": min(request.max_tokens, max_tokens),
        "messages": messages,
    }
    if request.system:
        system: dict[str, Any] = {"type": "text", "text": request.system}
        params["system"] = [{**system, "cache_control": _EPHEMERAL} if cache else system]
    if request.tools:
        params["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in request.tools
        ]
    return params


def to_model_response(message: Any) -> ModelResponse:
    """Map an SDK ``Message`` to :class:`ModelResponse` with plain-dict blocks."""
    content = [_block(b) for b in message.content]
    usage = message.usage
    return ModelResponse(
        stop_reason=_stop_reason(message.stop_reason, content),
        content=content,
        usage=Usage(
            input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
            cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
            cache_read_input_tokens=usage.cache_read_input_tokens or 0,
        ),
        model=message.model,
        request_id=getattr(message, "_request_id", None),
    )


def _block(block: Any) -> Block:
    # Text and tool_use keep exactly the API's shape; SDK-only extras
    # (citations=None, caller, toolset_name) would otherwise leak into history.
    if block.type == "text":
        return {"type": "text", "text": block.text}
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    dumped: Block = block.model_dump(mode="json", exclude_none=True)
    return dumped


def _stop_reason(raw: str | None, content: list[Block]) -> StopReason:
    if raw in _STOP_REASONS:
        return raw  # type: ignore[return-value]
    if raw == "model_context_window_exceeded":
        return "max_tokens"
    if raw is not None:
        log.warning("anthropic: unknown stop_reason %r", raw)
    return "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"


def _status_failure(exc: anthropic.APIStatusError, request: ModelRequest) -> ModelUnavailable:
    status = exc.status_code
    if is_transient(status):
        return gave_up(
            "anthropic",
            f"HTTP {status}: {exc.message}",
            attempts=attempts_made(exc.response.request),
            request_id=exc.request_id,
        )
    return rejected("anthropic", status, exc.request_id, exc.message, request.metadata, logger=log)
