"""Contract tests for the loop (C1/C2): the canonical conversation through the real
model clients against the strict local fakes, with zero protocol errors, a stable
cached prefix, and a tool list that only changes when ``load_tools`` adds a group."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select

from agent.llm.anthropic import AnthropicClient, AnthropicConfig
from agent.llm.openai_compat import OpenAICompatClient, OpenAIConfig
from storage.db import Database
from storage.models import TokenUsageRow
from tests.fakes import scripted
from tests.fakes.anthropic_api import FakeAnthropicAPI, text_turn, tool_turn
from tests.fakes.anthropic_api import validate as validate_anthropic
from tests.fakes.openai_api import FakeOpenAIAPI, chat_text, chat_tool_call
from tests.fakes.openai_api import validate as validate_openai
from tests.support import C7, SUP_A, seeded
from tests.test_loop_support import (
    BIG_REFUND,
    SEARCH,
    assert_history_valid,
    ledger_rows,
    store_refunds,
    tool_names,
)


def anthropic_client(api: FakeAnthropicAPI) -> AnthropicClient:
    return AnthropicClient(AnthropicConfig(model="claude-test", api_key="sk-test", base_url=api.base_url))


def openai_client(api: FakeOpenAIAPI) -> OpenAICompatClient:
    return OpenAICompatClient(OpenAIConfig(model="local-test", base_url=api.base_url))


async def _canonical(h: Any) -> tuple[str, str]:
    """Order lookup → refund above the ceiling → confirm → approve → resume. Returns
    (conversation id, approval id)."""
    rt = h.runtime
    first = await rt.chat(
        principal=C7, channel="api", message="Where is my order O-1042? It arrived damaged, refund it."
    )
    assert first.outcome == "answered"
    assert [p.kind for p in first.pending] == ["confirmation"]
    confirmed = await rt.confirm(first.pending[0].id, actor=C7, accept=True)
    assert confirmed.approval is not None and confirmed.approval.status == "pending"
    approval = confirmed.approval
    decided = await rt.decide(approval.id, expected_version=approval.version, decision="approve", actor=SUP_A)
    assert decided.approval.status == "approved"
    assert decided.result["status"] == "REFUNDED"
    follow = await rt.resume(approval.id)
    assert follow is not None and follow.reply
    return first.conversation_id, approval.id


async def test_canonical_conversation_through_the_anthropic_sdk_has_zero_protocol_errors(db: Database) -> None:
    """Every request the real AnthropicClient sent in the canonical flow was valid (the strict
    fake answers 400 otherwise), the refund ran once, and the stored history stays valid."""
    responder = scripted(
        tool_turn("get_order", {"order_id": "O-1042"}),
        tool_turn("search_knowledge", SEARCH),
        tool_turn("issue_refund", BIG_REFUND, text="The order was delivered; checking the refund."),
        text_turn("Shall I refund $189.00 on O-1042? Please confirm."),
        text_turn("Thanks. A supervisor must approve this refund; it is pending, not done yet."),
        text_turn("Good news: your refund of $189.00 was approved and issued."),
    )
    async with FakeAnthropicAPI(responder) as api:
        client = anthropic_client(api)
        h = await seeded(db, client)
        conv_id, _ = await _canonical(h)
        await client.aclose()
    assert len(api.requests) == 6
    assert [r.status for r in api.requests] == [200] * 6
    for r in api.requests:
        validate_anthropic(r.body)  # re-check: nothing slipped past the fake
        assert r.headers.get("anthropic-version")
    assert await store_refunds(db, "O-1042") == 1
    assert await ledger_rows(db) == 1
    await assert_history_valid(h.runtime, conv_id, C7)


async def test_second_request_reuses_the_cached_prefix_and_reports_cache_reads(db: Database) -> None:
    """Tools then system carry the first cache breakpoint: every request of the conversation has
    the same hash there, byte-identical tools and system; the conversation's last block carries
    the second, so each request reads what the one before it wrote and writes only what is new."""
    responder = scripted(
        tool_turn("get_order", {"order_id": "O-1042"}),
        tool_turn("search_knowledge", SEARCH),
        tool_turn("issue_refund", BIG_REFUND),
        text_turn("Please confirm the refund of $189.00."),
        text_turn("It is pending a supervisor's approval."),
        text_turn("Your refund was approved and issued."),
    )
    async with FakeAnthropicAPI(responder) as api:
        client = anthropic_client(api)
        h = await seeded(db, client)
        await _canonical(h)
        await client.aclose()
    hashes = {r.prefix_hashes[0] for r in api.requests}
    assert len(hashes) == 1 and all(len(r.prefix_hashes) == 2 for r in api.requests)
    tools = {json.dumps(r.body["tools"], sort_keys=False) for r in api.requests}
    systems = {json.dumps(r.body["system"]) for r in api.requests}
    assert len(tools) == 1 and len(systems) == 1
    assert api.requests[0].body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    async with db.sessions() as s:
        usage = (await s.execute(select(TokenUsageRow).order_by(TokenUsageRow.id))).scalars().all()
    assert len(usage) == 6
    assert usage[0].cache_creation_tokens > 0 and usage[0].cache_read_tokens == 0
    for before, after in zip(usage, usage[1:], strict=False):
        assert after.cache_read_tokens == before.cache_read_tokens + before.cache_creation_tokens
    assert all(u.cache_read_tokens > 0 and u.input_tokens == 0 for u in usage[1:])


async def test_canonical_conversation_through_an_openai_compatible_server(db: Database) -> None:
    """The same flow through OpenAICompatClient: every chat request was valid (every tool call
    answered by its tool message), the refund ran once, and the stored Anthropic history is valid."""
    responder = scripted(
        chat_tool_call("get_order", {"order_id": "O-1042"}),
        chat_tool_call("search_knowledge", SEARCH),
        chat_tool_call("issue_refund", BIG_REFUND),
        chat_text("Shall I refund $189.00 on O-1042? Please confirm."),
        chat_text("A supervisor must approve it; it is pending."),
        chat_text("Your refund of $189.00 was approved and issued."),
    )
    async with FakeOpenAIAPI(responder) as api:
        client = openai_client(api)
        h = await seeded(db, client)
        conv_id, _ = await _canonical(h)
        await client.aclose()
    assert [r.status for r in api.requests] == [200] * 6
    for r in api.requests:
        validate_openai(r.body)
    tools = {json.dumps(r.body["tools"]) for r in api.requests}
    assert len(tools) == 1
    last = api.requests[-1].body["messages"]
    assert last[0]["role"] == "system"
    assert sum(1 for m in last if m["role"] == "tool") == 3
    assert await store_refunds(db, "O-1042") == 1
    assert await ledger_rows(db) == 1
    await assert_history_valid(h.runtime, conv_id, C7)


async def test_load_tools_adds_a_group_and_the_tool_list_is_otherwise_byte_identical(db: Database) -> None:
    """An opening with no intent signal offers only the always-loaded tools; load_tools adds the
    orders group; the previously offered tools keep their exact bytes and the list stays fixed."""
    responder = scripted(
        tool_turn("get_case", {}),
        tool_turn("load_tools", {"group": "orders"}),
        tool_turn("get_order", {"order_id": "O-1042"}),
        text_turn("Your order O-1042 was delivered."),
        text_turn("You're welcome."),
    )
    async with FakeAnthropicAPI(responder) as api:
        client = anthropic_client(api)
        h = await seeded(db, client)
        first = await h.runtime.chat(principal=C7, channel="api", message="Hello, can you help me?")
        assert first.outcome == "answered"
        await h.runtime.chat(principal=C7, channel="api", message="thanks", conversation_id=first.conversation_id)
        await client.aclose()
    assert [r.status for r in api.requests] == [200] * 5
    before = [r.body["tools"] for r in api.requests[:2]]
    after = [r.body["tools"] for r in api.requests[2:]]
    assert before[0] == before[1]
    assert all(a == after[0] for a in after)
    assert "get_order" not in tool_names(api.requests[0].body)
    assert "get_order" in tool_names(api.requests[2].body)
    old = {t["name"]: json.dumps(t) for t in before[0]}
    new = {t["name"]: json.dumps(t) for t in after[0]}
    assert set(old) < set(new)
    for name, spec in old.items():
        if name != "load_tools":  # its description lists the groups not loaded yet
            assert new[name] == spec, name
    assert "orders" not in json.loads(new["load_tools"])["description"].split("Groups not loaded yet:")[-1]
    conv = await h.services.conversations.get(first.conversation_id)
    assert conv is not None and "orders" in conv.loaded_groups


TRUNCATED = {"type": "tool_use", "id": "toolu_01truncatedcall000000", "name": "get_order", "input": {}}


@pytest.mark.parametrize(
    ("reply", "outcome"),
    [
        ({"content": [{"type": "text", "text": "Hello!"}], "stop_reason": "end_turn"}, "answered"),
        ({"content": [{"type": "text", "text": "Your order is on its w"}], "stop_reason": "max_tokens"}, "answered"),
        ({"content": [{"type": "text", "text": "Looking it up"}, TRUNCATED], "stop_reason": "max_tokens"}, "answered"),
        ({"content": [], "stop_reason": "refusal"}, "refused"),
        ({"content": [{"type": "text", "text": "Working on it"}], "stop_reason": "pause_turn"}, "answered"),
    ],
)
async def test_every_stop_reason_leaves_a_history_the_real_api_accepts(
    db: Database, reply: dict[str, Any], outcome: str
) -> None:
    """end_turn, max_tokens (text, and a truncated tool_use), refusal (with no content) and
    pause_turn through the real SDK: the turn ends as it should and the next requests of the
    conversation, including one after the customer writes again, are all valid."""
    replies = [reply, text_turn("Here is what I found."), text_turn("Anything else?")]
    async with FakeAnthropicAPI(scripted(*replies)) as api:
        client = anthropic_client(api)
        h = await seeded(db, client)
        first = await h.runtime.chat(principal=C7, channel="api", message="Where is my order O-1042?")
        assert first.outcome == outcome
        await h.runtime.chat(principal=C7, channel="api", message="ok, and?", conversation_id=first.conversation_id)
        await client.aclose()
    assert [r.status for r in api.requests] == [200] * len(api.requests)
    assert len(api.requests) >= 2
    await assert_history_valid(h.runtime, first.conversation_id, C7)
