"""The Anthropic fake accounts prompt caching as the API does: breakpoints, the 20-block
lookback, the minimum cacheable length, the marker not being content, the 5-minute life."""

from __future__ import annotations

from typing import Any

from tests.fakes.anthropic_api import (
    CACHE_LOOKBACK_BLOCKS,
    CACHE_TTL_S,
    FakeAnthropicAPI,
    canonical,
    min_cacheable_tokens,
    prompt_items,
    text_turn,
    tokens,
)

CC = {"type": "ephemeral"}
TOOLS = [{"name": "get_order", "description": "Look up one order. " * 20, "input_schema": {"type": "object"}}]
SYSTEM = "You are a support agent. " * 20


def body(turns: int, *, mark_last: bool = True, model: str = "claude-sonnet-4-5") -> dict[str, Any]:
    """A conversation of ``turns`` user/assistant pairs plus the next question (``body(n)``'s
    messages are a prefix of ``body(n + 1)``'s, as a growing conversation's are)."""
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        messages += [
            {"role": "user", "content": [{"type": "text", "text": f"question {i} " * 10}]},
            {"role": "assistant", "content": [{"type": "text", "text": f"answer {i} " * 10}]},
        ]
    messages.append({"role": "user", "content": [{"type": "text", "text": f"question {turns} " * 10}]})
    if mark_last:
        last = messages[-1]["content"][-1]
        last["cache_control"] = CC
    return {
        "model": model,
        "max_tokens": 100,
        "tools": TOOLS,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": CC}],
        "messages": messages,
    }


def usage(api: FakeAnthropicAPI, b: dict[str, Any]) -> dict[str, int]:
    return api._usage(b, text_turn("ok"))[1]


def total(b: dict[str, Any]) -> int:
    unmarked = [{**i, "block": {k: v for k, v in i["block"].items() if k != "cache_control"}} for i in prompt_items(b)]
    return tokens(canonical(unmarked))


def test_a_moving_conversation_breakpoint_reads_what_the_previous_request_wrote() -> None:
    api = FakeAnthropicAPI()
    first = usage(api, body(1))
    assert first["cache_read_input_tokens"] == 0 and first["input_tokens"] == 0
    assert first["cache_creation_input_tokens"] == total(body(1))
    second = usage(api, body(2))
    assert second["cache_read_input_tokens"] == total(body(1))  # found by the lookback
    assert second["cache_creation_input_tokens"] == total(body(2)) - total(body(1))
    assert second["input_tokens"] == 0


def test_the_marker_is_not_content() -> None:
    """A block hashes the same with or without its cache_control."""
    api = FakeAnthropicAPI()
    usage(api, body(1))
    plain = body(2)
    plain["messages"][-1]["content"][-1]["cache_control"] = CC
    assert usage(api, plain)["cache_read_input_tokens"] == total(body(1))


def test_without_a_conversation_breakpoint_only_tools_and_system_are_read() -> None:
    api = FakeAnthropicAPI()
    usage(api, body(1, mark_last=False))
    again = usage(api, body(2, mark_last=False))
    head = {"model": "m", "max_tokens": 1, "tools": TOOLS, "system": [{"type": "text", "text": SYSTEM}], "messages": []}
    assert again["cache_read_input_tokens"] == tokens(canonical(prompt_items(head)))
    assert again["cache_creation_input_tokens"] == 0
    assert again["input_tokens"] == total(body(2)) - again["cache_read_input_tokens"]


def test_an_earlier_entry_beyond_the_lookback_is_not_found() -> None:
    api = FakeAnthropicAPI()
    usage(api, body(1))
    far = body(1 + CACHE_LOOKBACK_BLOCKS)  # two blocks a turn: the old end is 2 * 20 blocks back
    got = usage(api, far)
    head = {**far, "messages": []}  # tools + system: the other breakpoint, still found
    assert got["cache_read_input_tokens"] == total(head) < total(body(1))


def test_a_prefix_under_the_minimum_is_never_written() -> None:
    api = FakeAnthropicAPI(min_cacheable_tokens=10**6)
    first = usage(api, body(1))
    assert first["cache_creation_input_tokens"] == 0 and first["cache_read_input_tokens"] == 0
    assert first["input_tokens"] == total(body(1))
    assert usage(api, body(1))["cache_read_input_tokens"] == 0


def test_the_minimum_follows_the_model_when_asked() -> None:
    assert min_cacheable_tokens("claude-sonnet-4-5") == 1024
    assert min_cacheable_tokens("claude-3-5-haiku-latest") == 2048
    assert min_cacheable_tokens("claude-haiku-4-5") == 4096
    api = FakeAnthropicAPI(min_cacheable_tokens=None)
    small = body(0)
    assert total(small) < 1024
    assert usage(api, small)["cache_creation_input_tokens"] == 0


def test_an_entry_expires_five_minutes_after_its_last_use() -> None:
    api = FakeAnthropicAPI()
    now = [1000.0]
    api.clock = lambda: now[0]
    usage(api, body(1))
    now[0] += CACHE_TTL_S - 1
    assert usage(api, body(1))["cache_read_input_tokens"] == total(body(1))  # a read refreshes it
    now[0] += CACHE_TTL_S - 1
    assert usage(api, body(1))["cache_read_input_tokens"] == total(body(1))
    now[0] += CACHE_TTL_S + 1
    assert usage(api, body(1))["cache_read_input_tokens"] == 0
