"""Contract tests: the real ``AnthropicClient`` (official SDK) against the strict fake API."""

from __future__ import annotations

import json
import logging
import socket
from typing import Any

import pytest

from agent.errors import ModelUnavailable
from agent.llm.anthropic import AnthropicClient, AnthropicConfig
from agent.llm.base import Message, ModelRequest, ToolSpec
from agent.llm.breaker import BreakerConfig, CircuitBreaker
from agent.llm.testing import (
    RealModelCallBlocked,
    block_real_model_calls,
    text_block,
    tool_result_block,
)
from tests.fakes import scripted
from tests.fakes.anthropic_api import FakeAnthropicAPI, Invalid, api_error, text_turn, tool_turn
from tests.fakes.anthropic_api import validate as validate_body
from tests.fakes.plugin import SdkSleeps

SYSTEM = "You are the support agent for Acme. " * 40
TOOLS = [
    ToolSpec(
        name="get_order",
        description="Look up one order.",
        input_schema={
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        name="finish",
        description="End the conversation.",
        input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    ),
]


def opening(text: str = "Where is my order A1?") -> ModelRequest:
    return ModelRequest(system=SYSTEM, messages=[Message(role="user", content=[text_block(text)])], tools=TOOLS)


def client_for(api: FakeAnthropicAPI, **overrides: Any) -> AnthropicClient:
    breaker = overrides.pop("breaker", None)
    config = AnthropicConfig(model="claude-test", api_key="sk-test", base_url=api.base_url, **overrides)
    return AnthropicClient(config, breaker=breaker)


async def test_request_shape_caches_tools_then_system_and_keeps_tool_order() -> None:
    """The body carries model, max_tokens, tools in order (name/description/schema only),
    then ``system`` as one text block with ephemeral cache_control, then the messages, whose
    last block carries the second breakpoint (the conversation so far)."""
    async with FakeAnthropicAPI() as api:
        client = client_for(api)
        await client.complete(opening())
        await client.aclose()
    [sent] = api.requests
    assert (sent.method, sent.path, sent.status) == ("POST", "/v1/messages", 200)
    # The key goes out as the SDK's credential header (2.x: a bearer token; before: x-api-key).
    assert "Bearer sk-test" == sent.headers.get("authorization", f"Bearer {sent.headers.get('x-api-key')}")
    assert "anthropic-version" in sent.headers
    assert sent.body["model"] == "claude-test"
    assert sent.body["max_tokens"] == 1024
    assert sent.body["system"] == [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    assert [t["name"] for t in sent.body["tools"]] == ["get_order", "finish"]
    assert sent.body["tools"][0] == {
        "name": "get_order",
        "description": "Look up one order.",
        "input_schema": TOOLS[0].input_schema,
    }
    assert sent.body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Where is my order A1?", "cache_control": {"type": "ephemeral"}}],
        }
    ]


async def test_max_tokens_is_clamped_to_the_config_ceiling() -> None:
    """A request asking for more than ``AnthropicConfig.max_tokens`` is clamped."""
    async with FakeAnthropicAPI() as api:
        client = client_for(api, max_tokens=300)
        request = ModelRequest(system=SYSTEM, messages=opening().messages, tools=[], max_tokens=900)
        await client.complete(request)
        await client.aclose()
    assert api.requests[0].body["max_tokens"] == 300
    assert "tools" not in api.requests[0].body


async def test_response_maps_to_plain_api_blocks_usage_and_request_id() -> None:
    """Blocks come back exactly as the API shapes them (no ``citations: None`` or
    other SDK extras); usage keeps cache fields, None becoming 0; request id kept."""
    turn = tool_turn("get_order", {"order_id": "A1"}, id="toolu_01", text="Let me look.")
    turn["content"][0]["citations"] = None
    turn["usage"] = {
        "input_tokens": 12,
        "output_tokens": 7,
        "cache_creation_input_tokens": None,
        "cache_read_input_tokens": 300,
    }
    async with FakeAnthropicAPI(lambda body: turn) as api:
        client = client_for(api)
        response = await client.complete(opening())
        await client.aclose()
    assert response.content == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_01", "name": "get_order", "input": {"order_id": "A1"}},
    ]
    assert response.stop_reason == "tool_use"
    assert response.model == "claude-test"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 7)
    assert response.usage.cache_creation_input_tokens == 0
    assert response.usage.cache_read_input_tokens == 300
    assert response.request_id is not None and response.request_id.startswith("req_")
    assert json.loads(json.dumps(response.content)) == response.content


@pytest.mark.parametrize("status", [429, 529, 500, 503])
async def test_retryable_statuses_are_retried_honouring_retry_after(status: int, sdk_sleeps: SdkSleeps) -> None:
    """429, 529 and 5xx are retried by the SDK; the wait is the server's ``retry-after``."""
    replies = scripted(api_error(status, retry_after="3"), api_error(status, retry_after="0.5"))
    async with FakeAnthropicAPI(scripted(replies, replies, text_turn("fine"))) as api:
        client = client_for(api)
        response = await client.complete(opening())
        await client.aclose()
    assert response.text == "fine"
    assert [r.status for r in api.requests] == [status, status, 200]
    assert sdk_sleeps.delays == [3.0, 0.5]
    assert [r.headers["x-stainless-retry-count"] for r in api.requests] == ["0", "1", "2"]


async def test_retry_after_ms_wins_and_backoff_is_exponential_without_a_hint(sdk_sleeps: SdkSleeps) -> None:
    """``retry-after-ms`` is the most precise hint and wins; without any hint the SDK backs
    off exponentially (0.5 s doubling, capped at 8 s; jitter pinned to none here)."""
    precise = (429, {"retry-after-ms": "1500", "retry-after": "9"}, api_error(429)[2])
    replies = [precise, api_error(500), api_error(500), api_error(529)]
    async with FakeAnthropicAPI(scripted(*replies, text_turn("ok"))) as api:
        client = client_for(api)
        assert (await client.complete(opening())).text == "ok"
        await client.aclose()
    assert sdk_sleeps.delays == [1.5, 1.0, 2.0, 4.0]


async def test_a_wait_past_the_deadline_is_an_honest_give_up_not_a_hang() -> None:
    """A provider asking for a minute's wait does not hold the turn: at ``deadline_s`` the
    call ends as ModelUnavailable (reason unavailable) and nothing more is sent."""
    async with FakeAnthropicAPI(lambda body: api_error(429, retry_after="60")) as api:
        client = client_for(api, deadline_s=0.2)
        with pytest.raises(ModelUnavailable, match="deadline") as info:
            await client.complete(opening())
        await client.aclose()
    assert info.value.reason == "unavailable"
    assert len(api.requests) == 1
    assert client.breaker.consecutive_failures == 1


async def test_exhausted_retries_raise_model_unavailable_with_request_id(sdk_sleeps: SdkSleeps) -> None:
    """After ``max_retries`` retries the caller gets ModelUnavailable, never an SDK error,
    and the message says how many attempts were made."""
    async with FakeAnthropicAPI(lambda body: api_error(529, "overloaded")) as api:
        client = client_for(api, max_retries=2)
        with pytest.raises(ModelUnavailable, match="gave up after 3 attempts: HTTP 529") as info:
            await client.complete(opening())
        await client.aclose()
    assert len(api.requests) == 3
    assert len(sdk_sleeps.delays) == 2
    assert info.value.reason == "unavailable"
    assert info.value.request_id is not None and info.value.request_id.startswith("req_")


async def test_connection_errors_are_retried_then_unavailable(sdk_sleeps: SdkSleeps) -> None:
    """A refused connection is retried like a 5xx and ends as ModelUnavailable."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = AnthropicConfig(model="claude-test", api_key="k", base_url=f"http://127.0.0.1:{port}", max_retries=2)
    client = AnthropicClient(config)
    with pytest.raises(ModelUnavailable, match="gave up after 3 attempts: connection error") as info:
        await client.complete(opening())
    await client.aclose()
    assert info.value.reason == "unavailable"
    assert len(sdk_sleeps.delays) == 2


async def test_bad_request_is_not_retried_and_is_logged_with_request_id(
    caplog: pytest.LogCaptureFixture, sdk_sleeps: SdkSleeps
) -> None:
    """A 4xx is our bug: one attempt, an ERROR log naming the request id, reason bad_request."""
    broken = ModelRequest(
        system=SYSTEM,
        messages=[
            Message(role="user", content=[text_block("hi")]),
            Message(
                role="assistant",
                content=[{"type": "tool_use", "id": "toolu_x", "name": "get_order", "input": {}}],
            ),
            Message(role="user", content=[text_block("no tool_result here")]),
        ],
        tools=TOOLS,
    )
    async with FakeAnthropicAPI() as api:
        client = client_for(api)
        with caplog.at_level(logging.ERROR, logger="agent.llm.anthropic"):
            with pytest.raises(ModelUnavailable) as info:
                await client.complete(broken)
        await client.aclose()
    assert len(api.requests) == 1 and api.requests[0].status == 400
    assert sdk_sleeps.delays == []
    assert info.value.reason == "bad_request"
    assert info.value.request_id and info.value.request_id in caplog.text
    assert client.breaker.consecutive_failures == 0


async def test_breaker_opens_after_repeated_failures_and_half_opens_after_cooldown() -> None:
    """Failed calls trip the breaker; while open nothing is sent; after the cool-down
    one trial goes out and its success closes the circuit."""
    now = [0.0]
    changes: list[str] = []
    breaker = CircuitBreaker(
        BreakerConfig(failure_threshold=2, cooldown_s=30),
        clock=lambda: now[0],
        on_change=changes.append,
    )
    healthy = [False]

    def responder(body: dict[str, Any]) -> Any:
        return text_turn("back") if healthy[0] else api_error(500)

    async with FakeAnthropicAPI(responder) as api:
        client = client_for(api, max_retries=0, breaker=breaker)
        for _ in range(2):
            with pytest.raises(ModelUnavailable, match="gave up"):
                await client.complete(opening())
        with pytest.raises(ModelUnavailable) as info:
            await client.complete(opening())
        assert info.value.reason == "circuit_open"
        assert len(api.requests) == 2
        healthy[0] = True
        now[0] += 30
        assert (await client.complete(opening())).text == "back"
        await client.aclose()
    assert len(api.requests) == 3
    assert changes == ["open", "half_open", "closed"]
    assert breaker.trips == 1


async def test_two_turns_share_a_byte_identical_cached_prefix() -> None:
    """The second request's tools+system prefix hashes identically, so it reads from
    the cache what the first one wrote."""
    script = scripted(tool_turn("get_order", {"order_id": "A1"}), text_turn("It shipped."))
    async with FakeAnthropicAPI(script) as api:
        client = client_for(api)
        first = await client.complete(opening())
        call = first.tool_uses[0]
        follow_up = ModelRequest(
            system=SYSTEM,
            tools=TOOLS,
            messages=[
                *opening().messages,
                Message(role="assistant", content=first.content),
                Message(role="user", content=[tool_result_block(call["id"], {"status": "shipped"})]),
            ],
        )
        second = await client.complete(follow_up)
        await client.aclose()
    one, two = api.requests
    assert one.prefix_hashes[0] == two.prefix_hashes[0]  # tools + system
    assert one.prefix_hash != two.prefix_hash  # the conversation breakpoint moved on
    assert json.dumps([one.body["tools"], one.body["system"]]) == json.dumps([two.body["tools"], two.body["system"]])
    assert first.usage.cache_creation_input_tokens > 0
    assert first.usage.cache_read_input_tokens == 0
    # The second request reads all the first one wrote (its whole prompt) and writes only the new turn.
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert 0 < second.usage.cache_creation_input_tokens < first.usage.cache_creation_input_tokens
    assert second.usage.input_tokens == 0


async def test_base_url_none_honours_anthropic_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``base_url=None`` the SDK's ``ANTHROPIC_BASE_URL`` decides where requests go."""
    async with FakeAnthropicAPI() as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
        client = AnthropicClient(AnthropicConfig(model="claude-test", api_key="k"))
        assert (await client.complete(opening())).text == "ok"
        await client.aclose()
    assert len(api.requests) == 1


async def test_tripwire_refuses_non_loopback_hosts_before_sending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under ``block_real_model_calls`` a real endpoint fails loudly (not ModelUnavailable)."""
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    client = AnthropicClient(AnthropicConfig(model="claude-test", api_key="k"))
    assert client.base_url.startswith("https://api.anthropic.com")
    with block_real_model_calls():
        with pytest.raises(RealModelCallBlocked, match="api.anthropic.com"):
            await client.complete(opening())
    assert client.breaker.consecutive_failures == 0
    await client.aclose()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b.pop("max_tokens"), "max_tokens: Field required"),
        (lambda b: b.update(messages=[]), "at least one message"),
        (lambda b: b["messages"].insert(0, {"role": "assistant", "content": "x"}), "first message"),
        (lambda b: b["messages"].append({"role": "user", "content": "x"}), "alternate"),
        (lambda b: b["tools"].append(dict(b["tools"][0])), "unique"),
        (lambda b: b["tools"][0].update(name="bad name!"), "String should match pattern"),
        (lambda b: b["tools"][0].update(input_schema={"type": "string"}), "'object'"),
        (lambda b: b["messages"][1]["content"][0].update(name="refund"), "not in `tools`"),
        (lambda b: b["messages"][2]["content"].reverse(), "must come before"),
        (lambda b: b["messages"][2]["content"][0].update(tool_use_id="toolu_zz"), "unexpected"),
        (lambda b: b["messages"].pop(2), "without `tool_result`"),
        (
            lambda b: b["messages"][1]["content"].append(dict(b["messages"][1]["content"][0])),
            "must be unique",
        ),
        (
            lambda b: b["messages"][0]["content"].extend(
                [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}] * 4
            ),
            "maximum of 4",
        ),
    ],
)
def test_fake_rejects_what_the_api_rejects(mutate: Any, message: str) -> None:
    """The fake is strict: protocol violations are 400s, so contract tests can trust it."""
    body = {
        "model": "m",
        "max_tokens": 10,
        "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "get_order", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"},
                    {"type": "text", "text": "thanks"},
                ],
            },
        ],
    }
    validate_body(json.loads(json.dumps(body)))
    mutate(body)
    with pytest.raises(Invalid, match=message):
        validate_body(body)


def test_the_conversation_breakpoint_is_a_copy_and_can_be_turned_off() -> None:
    """build_params marks a copy of the last block (the stored history keeps no marker), and
    with ``cache=False`` sends no cache_control at all."""
    from agent.llm.anthropic import build_params

    request = opening()
    params = build_params(request, model="m", max_tokens=100)
    assert params["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in request.messages[-1].content[-1]
    plain = build_params(request, model="m", max_tokens=100, cache=False)
    assert "cache_control" not in json.dumps(plain)
