"""The OpenAI-compatible client: translation both ways, and contract tests against the fake."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agent.errors import ModelUnavailable
from agent.llm.base import Message, ModelRequest, ToolSpec
from agent.llm.breaker import BreakerConfig, CircuitBreaker
from agent.llm.openai_compat import (
    INVALID_JSON_KEY,
    OpenAICompatClient,
    OpenAIConfig,
    from_chat_completion,
    parse_arguments,
    to_chat_messages,
    to_chat_tools,
)
from agent.llm.testing import (
    RealModelCallBlocked,
    block_real_model_calls,
    text_block,
    tool_result_block,
    tool_use_block,
)
from tests.fakes import scripted
from tests.fakes.openai_api import FakeOpenAIAPI, chat_error, chat_text, chat_tool_call
from tests.fakes.plugin import SdkSleeps

TOOL = ToolSpec(
    name="get_order",
    description="Look up one order.",
    input_schema={"type": "object", "properties": {"order_id": {"type": "string"}}},
)


def completion(message: dict[str, Any], finish: str | None, usage: dict[str, Any] | None = None):
    return {
        "id": "chatcmpl-1",
        "model": "qwen",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 2},
    }


def client_for(api: FakeOpenAIAPI, **overrides: Any) -> OpenAICompatClient:
    breaker = overrides.pop("breaker", None)
    config = OpenAIConfig(model="qwen", base_url=api.base_url, **overrides)
    return OpenAICompatClient(config, breaker=breaker)


def test_history_translates_to_chat_messages_in_order() -> None:
    """System first; assistant tool_use → tool_calls with JSON-string arguments; the
    user's tool_results → ``tool`` messages in order, then the user's text after them."""
    history = [
        Message(role="user", content=[text_block("Where are A1 and A2?")]),
        Message(
            role="assistant",
            content=[
                text_block("Checking both."),
                tool_use_block("get_order", {"order_id": "A1"}, id="toolu_1"),
                tool_use_block("get_order", {"order_id": "A2"}, id="toolu_2"),
            ],
        ),
        Message(
            role="user",
            content=[
                tool_result_block("toolu_1", {"status": "shipped"}),
                tool_result_block("toolu_2", [text_block("not found")], is_error=True),
                text_block("Also, hurry."),
            ],
        ),
    ]
    assert to_chat_messages("Be kind.", history) == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Where are A1 and A2?"},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_order", "arguments": '{"order_id": "A1"}'},
                },
                {
                    "id": "toolu_2",
                    "type": "function",
                    "function": {"name": "get_order", "arguments": '{"order_id": "A2"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": '{"status": "shipped"}'},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "ERROR: not found"},
        {"role": "user", "content": "Also, hurry."},
    ]


def test_tools_translate_to_function_tools() -> None:
    """Each ToolSpec becomes a ``function`` tool: name, description, parameters."""
    assert to_chat_tools([TOOL]) == [
        {
            "type": "function",
            "function": {
                "name": "get_order",
                "description": "Look up one order.",
                "parameters": TOOL.input_schema,
            },
        }
    ]


def test_invalid_arguments_are_sent_back_verbatim() -> None:
    """A tool_use holding unparsable arguments round-trips the server's raw string."""
    history = [
        Message(role="user", content=[text_block("hi")]),
        Message(role="assistant", content=[tool_use_block("get_order", {INVALID_JSON_KEY: "{oops"})]),
    ]
    assert to_chat_messages("", history)[1]["tool_calls"][0]["function"]["arguments"] == "{oops"


def test_untranslatable_block_is_a_bad_request() -> None:
    """A block the chat format cannot carry is our bug, reported as ModelUnavailable."""
    history = [Message(role="user", content=[{"type": "image", "source": {}}])]
    with pytest.raises(ModelUnavailable) as info:
        to_chat_messages("", history)
    assert info.value.reason == "bad_request"


def test_response_translates_to_anthropic_blocks_and_usage() -> None:
    """Text then tool_use blocks (the tool_call id, parsed input); cached prompt tokens
    become cache reads and leave input_tokens, as in Anthropic's accounting."""
    call = chat_tool_call("get_order", {"order_id": "A1"}, id="call_9")["tool_calls"][0]
    data = completion(
        {"content": "Looking.", "tool_calls": [call]},
        "tool_calls",
        {
            "prompt_tokens": 100,
            "completion_tokens": 9,
            "prompt_tokens_details": {"cached_tokens": 60},
        },
    )
    response = from_chat_completion(data, request_id="req-1")
    assert response.content == [
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "call_9", "name": "get_order", "input": {"order_id": "A1"}},
    ]
    assert response.stop_reason == "tool_use"
    assert response.usage.input_tokens == 40
    assert response.usage.cache_read_input_tokens == 60
    assert response.usage.output_tokens == 9
    assert (response.model, response.request_id) == ("qwen", "req-1")


@pytest.mark.parametrize(
    ("finish", "stop"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("content_filter", "refusal"),
        (None, "end_turn"),
    ],
)
def test_finish_reason_maps_to_stop_reason(finish: str | None, stop: str) -> None:
    """stop→end_turn, length→max_tokens, content_filter→refusal."""
    assert from_chat_completion(completion({"content": "x"}, finish)).stop_reason == stop


def test_tool_calls_with_finish_stop_still_mean_tool_use() -> None:
    """Servers that say ``stop`` alongside tool calls still yield stop_reason tool_use."""
    call = chat_tool_call("get_order", {})["tool_calls"][0]
    assert from_chat_completion(completion({"tool_calls": [call]}, "stop")).stop_reason == "tool_use"


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        ('{"order_id": "A1"}', {"order_id": "A1"}),
        ({"order_id": "A1"}, {"order_id": "A1"}),
        ("", {}),
        ('{"order_id": "A1"', {INVALID_JSON_KEY: '{"order_id": "A1"'}),
        ("[1, 2]", {INVALID_JSON_KEY: "[1, 2]"}),
        ("null", {INVALID_JSON_KEY: "null"}),
    ],
)
def test_arguments_parse_or_are_marked_invalid(raw: Any, parsed: dict[str, Any]) -> None:
    """Anything but a JSON object becomes ``{"__invalid_json__": raw}`` for the schema check."""
    assert parse_arguments(raw) == parsed


async def test_tool_round_trip_against_the_fake() -> None:
    """A tool call, our tool_result, and the final answer: the fake validates that the
    tool message answers the call, and the history we store stays Anthropic-shaped."""
    script = scripted(chat_tool_call("get_order", {"order_id": "A1"}, id="call_1"), chat_text("Shipped."))
    async with FakeOpenAIAPI(script) as api:
        client = client_for(api, api_key="sk-local")
        request = ModelRequest(
            system="Be kind.",
            messages=[Message(role="user", content=[text_block("A1?")])],
            tools=[TOOL],
        )
        first = await client.complete(request)
        assert first.stop_reason == "tool_use"
        assert first.tool_uses == [tool_use_block("get_order", {"order_id": "A1"}, id="call_1")]
        history = [
            *request.messages,
            Message(role="assistant", content=first.content),
            Message(role="user", content=[tool_result_block("call_1", "shipped")]),
        ]
        second = await client.complete(ModelRequest(system="Be kind.", messages=history, tools=[TOOL]))
        await client.aclose()
    assert second.text == "Shipped." and second.stop_reason == "end_turn"
    assert [r.status for r in api.requests] == [200, 200]
    sent = api.requests[1]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-local"
    assert sent.body["tools"] == to_chat_tools([TOOL])
    assert [m["role"] for m in sent.body["messages"]] == ["system", "user", "assistant", "tool"]
    assert sent.body["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "shipped",
    }


async def test_invalid_json_arguments_from_the_server_become_an_invalid_tool_use() -> None:
    """Broken arguments do not raise: the loop gets a tool_use its schema check rejects."""
    async with FakeOpenAIAPI(lambda body: chat_tool_call("get_order", '{"order_id": ', id="c1")) as api:
        client = client_for(api)
        response = await client.complete(
            ModelRequest(system="", messages=[Message(role="user", content=[text_block("x")])], tools=[TOOL])
        )
        await client.aclose()
    assert response.tool_uses == [
        {
            "type": "tool_use",
            "id": "c1",
            "name": "get_order",
            "input": {INVALID_JSON_KEY: '{"order_id": '},
        }
    ]


async def test_retries_honour_retry_after_and_bad_requests_are_not_retried(
    caplog: pytest.LogCaptureFixture, sdk_sleeps: SdkSleeps
) -> None:
    """Same policy as the Anthropic client, through the official SDK: 429/5xx retried after
    ``retry-after`` (exponential backoff without it); a 400 is logged with the request id
    and raised as bad_request at once."""
    request = ModelRequest(system="", messages=[Message(role="user", content=[text_block("x")])], tools=[])
    script = scripted(chat_error(429, retry_after="2"), chat_error(503), chat_text("ok"), chat_error(400))
    async with FakeOpenAIAPI(script) as api:
        client = client_for(api)
        assert (await client.complete(request)).text == "ok"
        assert sdk_sleeps.delays == [2.0, 1.0]
        with caplog.at_level(logging.ERROR, logger="agent.llm.openai_compat"):
            with pytest.raises(ModelUnavailable) as info:
                await client.complete(request)
        await client.aclose()
    assert len(api.requests) == 4
    assert sdk_sleeps.delays == [2.0, 1.0]
    assert info.value.reason == "bad_request"
    assert info.value.request_id and info.value.request_id in caplog.text


async def test_exhausted_retries_are_an_honest_give_up_naming_the_attempts(sdk_sleeps: SdkSleeps) -> None:
    """After ``max_retries`` the caller gets ModelUnavailable naming the attempts made."""
    request = ModelRequest(system="", messages=[Message(role="user", content=[text_block("x")])], tools=[])
    async with FakeOpenAIAPI(lambda body: chat_error(502)) as api:
        client = client_for(api, max_retries=2)
        with pytest.raises(ModelUnavailable, match="gave up after 3 attempts: HTTP 502") as info:
            await client.complete(request)
        await client.aclose()
    assert info.value.reason == "unavailable"
    assert len(api.requests) == 3 and len(sdk_sleeps.delays) == 2


async def test_a_wait_past_the_deadline_is_an_honest_give_up_not_a_hang() -> None:
    """A server asking for a long wait ends the call at ``deadline_s``, with nothing more sent."""
    request = ModelRequest(system="", messages=[Message(role="user", content=[text_block("x")])], tools=[])
    async with FakeOpenAIAPI(lambda body: chat_error(429, retry_after="60")) as api:
        client = client_for(api, deadline_s=0.2)
        with pytest.raises(ModelUnavailable, match="deadline") as info:
            await client.complete(request)
        await client.aclose()
    assert info.value.reason == "unavailable" and len(api.requests) == 1


async def test_breaker_opens_on_repeated_failures(sdk_sleeps: SdkSleeps) -> None:
    """Exhausted calls count against the breaker; once open nothing reaches the server."""
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=2), clock=lambda: 0.0)
    request = ModelRequest(system="", messages=[Message(role="user", content=[text_block("x")])], tools=[])
    async with FakeOpenAIAPI(lambda body: chat_error(500)) as api:
        client = client_for(api, max_retries=1, breaker=breaker)
        for _ in range(2):
            with pytest.raises(ModelUnavailable, match="gave up"):
                await client.complete(request)
        with pytest.raises(ModelUnavailable) as info:
            await client.complete(request)
        await client.aclose()
    assert info.value.reason == "circuit_open"
    assert len(api.requests) == 4


async def test_without_a_key_no_authorization_header_is_sent() -> None:
    """Local servers need no key: the SDK's placeholder never goes out as a credential."""
    request = ModelRequest(system="", messages=[Message(role="user", content=[text_block("x")])], tools=[])
    async with FakeOpenAIAPI() as api:
        client = client_for(api)
        assert (await client.complete(request)).text == "ok"
        await client.aclose()
    assert "authorization" not in api.requests[0].headers


async def test_ollama_style_object_arguments_come_through_the_sdk() -> None:
    """A server that sends tool-call arguments as a JSON object (Ollama) still yields the
    parsed input, through the SDK's response model."""
    call = {"id": "call_o", "type": "function", "function": {"name": "get_order", "arguments": {"order_id": "A1"}}}
    async with FakeOpenAIAPI(lambda body: {"content": None, "tool_calls": [call]}) as api:
        client = client_for(api)
        response = await client.complete(
            ModelRequest(system="", messages=[Message(role="user", content=[text_block("x")])], tools=[TOOL])
        )
        await client.aclose()
    assert response.tool_uses == [tool_use_block("get_order", {"order_id": "A1"}, id="call_o")]
    assert response.request_id is not None and response.request_id.startswith("req-")


async def test_tripwire_refuses_non_loopback_servers() -> None:
    """Under ``block_real_model_calls`` a remote server is refused before any I/O."""
    client = OpenAICompatClient(OpenAIConfig(model="m", base_url="https://llm.example.com/v1"))
    request = ModelRequest(system="", messages=[Message(role="user", content=[text_block("x")])], tools=[])
    with block_real_model_calls(), pytest.raises(RealModelCallBlocked):
        await client.complete(request)
    await client.aclose()


async def test_fake_rejects_a_tool_call_without_its_tool_message() -> None:
    """The fake is strict: an unanswered tool_call is a 400, surfaced as bad_request."""
    history = [
        Message(role="user", content=[text_block("x")]),
        Message(role="assistant", content=[tool_use_block("get_order", {}, id="call_1")]),
        Message(role="user", content=[text_block("no result")]),
    ]
    async with FakeOpenAIAPI() as api:
        client = client_for(api)
        with pytest.raises(ModelUnavailable) as info:
            await client.complete(ModelRequest(system="", messages=history, tools=[TOOL]))
        await client.aclose()
    assert info.value.reason == "bad_request"
    assert api.requests[0].status == 400
