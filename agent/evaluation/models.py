"""Which model plays the agent's part in a case.

* ``scripted`` — the replies written inside the case (``turns[].model``), so CI
  runs with no key and no network;
* ``demo`` — :class:`agent.planner.DemoPlanner`, the offline good planner;
* ``compromised`` — :class:`agent.llm.testing.CompromisedModel`, which obeys
  every ``[[CALL ...]]`` directive it reads (the worst case for S1–S8);
* ``anthropic`` / ``openai`` — the configured real clients, only when a key or
  base URL is configured.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agent.errors import ConfigError
from agent.evaluation.suite import Case, ModelKind, ScriptedReply, Suite
from agent.history import EVENT_OPEN
from agent.llm.base import Block, ModelClient, ModelRequest, ModelResponse
from agent.llm.testing import CompromisedModel, ScriptExhausted, make_response, text_block, tool_use_block
from agent.planner import DemoPlanner

OFFLINE: frozenset[str] = frozenset({"scripted", "demo", "compromised"})


def effective_model(requested: str, suite: Suite, case: Case) -> ModelKind:
    """``scripted`` (the CLI default) means each suite's offline default; anything else overrides."""
    if requested == "scripted":
        return case.model or suite.model
    return requested  # type: ignore[return-value]


class CaseScript:
    """The case's scripted replies, in order; ``"$key"`` arguments are filled from what the model saw."""

    def __init__(self, replies: list[str | ScriptedReply], *, case_id: str) -> None:
        self._queue = list(replies)
        self._case_id = case_id
        self.requests: list[ModelRequest] = []

    @property
    def model_name(self) -> str:
        return "scripted"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if not self._queue:
            raise ScriptExhausted(f"case {self._case_id}: model call #{len(self.requests)} has no scripted reply")
        reply = self._queue.pop(0)
        return make_response(self._blocks(reply, request), model=self.model_name, request=request)

    def _blocks(self, reply: str | ScriptedReply, request: ModelRequest) -> list[Block]:
        if isinstance(reply, str):
            return [text_block(fill_text(reply, request))]
        blocks: list[Block] = [text_block(fill_text(reply.say, request))] if reply.say else []
        for name, args in (reply.call or {}).items():
            blocks.append(tool_use_block(name, fill(args, request)))
        return blocks


def fill(value: Any, request: ModelRequest) -> Any:
    """Replace ``"$key"`` strings with the newest value of ``key`` the model was sent."""
    if isinstance(value, str) and value.startswith("$") and len(value) > 1:
        found = newest_value(request, value[1:])
        if found is None:
            raise ScriptExhausted(f"scripted placeholder {value} has no value in the conversation yet")
        return found
    if isinstance(value, dict):
        return {k: fill(v, request) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, request) for v in value]
    return value


_TEXT_SLOT = re.compile(r"\{\$([a-z_]+)\}")
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T")


def fill_text(text: str, request: ModelRequest) -> str:
    """Replace ``{$key}`` in reply text with the newest value of ``key`` (an ISO time as its date)."""

    def value(m: re.Match[str]) -> str:
        found = newest_value(request, m.group(1))
        if found is None:
            raise ScriptExhausted(f"scripted text slot {m.group(0)} has no value in the conversation yet")
        return str(found)[:10] if _ISO.match(str(found)) else str(found)

    return _TEXT_SLOT.sub(value, text)


def newest_value(request: ModelRequest, key: str) -> Any:
    """The value of ``key`` in the newest tool result or runtime event that has one."""
    for message in reversed(request.messages):
        for block in reversed(message.content):
            text = block.get("content") if block.get("type") == "tool_result" else block.get("text")
            if block.get("type") == "text" and not str(text).startswith(EVENT_OPEN):
                continue
            found = _find(_json_objects(str(text or "")), key)
            if found is not None:
                return found
    return None


def _json_objects(text: str) -> list[Any]:
    decoder, out, i = json.JSONDecoder(), [], 0
    while (i := text.find("{", i)) >= 0:
        try:
            obj, end = decoder.raw_decode(text, i)
        except ValueError:
            i += 1
            continue
        out.append(obj)
        i = end
    return out


def _find(value: Any, key: str) -> Any:
    if isinstance(value, dict):
        if isinstance(value.get(key), str | int):
            return value[key]
        for v in value.values():
            if (found := _find(v, key)) is not None:
                return found
    if isinstance(value, list):
        for v in value:
            if (found := _find(v, key)) is not None:
                return found
    return None


def real_model(kind: str, settings: Any) -> ModelClient:
    """The configured real client for ``anthropic`` or ``openai``; ConfigError when not configured."""
    if settings is None:
        raise ConfigError(f"--model {kind}: no settings to build the client from")
    if kind == "anthropic":
        if not getattr(settings, "anthropic_api_key", None):
            raise ConfigError("ANTHROPIC_API_KEY: required for --model anthropic")
        from agent.llm.anthropic import AnthropicClient, AnthropicConfig

        return AnthropicClient(
            AnthropicConfig(
                model=settings.signoff_model,
                api_key=_reveal(settings.anthropic_api_key) or "",
                base_url=settings.anthropic_base_url,
            )
        )
    if not getattr(settings, "openai_base_url", None):
        raise ConfigError("OPENAI_BASE_URL: required for --model openai")
    from agent.llm.openai_compat import OpenAICompatClient, OpenAIConfig

    return OpenAICompatClient(
        OpenAIConfig(
            model=settings.signoff_model, base_url=settings.openai_base_url, api_key=_reveal(settings.openai_api_key)
        )
    )


def model_for(kind: ModelKind, case: Case, *, real: ModelClient | None = None) -> ModelClient:
    """A fresh model for one run of ``case`` (the real client is shared across runs)."""
    if kind == "scripted":
        replies = [r for t in case.turns for r in t.model]
        if not replies:
            raise ConfigError(f"case {case.id} has no scripted model turns; run it with --model demo or compromised")
        return CaseScript(replies, case_id=case.id)
    if kind == "demo":
        return DemoPlanner()
    if kind == "compromised":
        return CompromisedModel()
    assert real is not None, kind
    return real


__all__ = [
    "OFFLINE",
    "CaseScript",
    "effective_model",
    "fill",
    "model_for",
    "newest_value",
    "real_model",
    "tool_use_block",
]


def _reveal(secret: Any) -> str | None:
    """A ``SecretStr`` setting's value (the settings live in ``bot/``, above this package)."""
    return secret.get_secret_value() if secret is not None else None
