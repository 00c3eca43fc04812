"""The loop's steps (C1): each stop reason, recoverable faults as ``is_error`` results,
repeat interception, ``finish`` verification, the step cap and the token budget."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.llm.base import ModelRequest, ModelResponse, Usage
from agent.llm.testing import FunctionModel, ScriptedModel, text_block, tool_use_block
from agent.wording import GIVE_UP_REPLY, REFUSAL_REPLY
from storage.db import Database
from tests.fakes.anthropic_api import validate as validate_anthropic
from tests.support import C7, last_tool_result, seeded
from tests.test_loop_support import (
    SEARCH,
    SMALL_REFUND,
    case_notes,
    next_request_body,
    policy_with,
    store_refunds,
)


def response(stop_reason: str, *blocks: dict[str, Any]) -> ModelResponse:
    return ModelResponse(
        stop_reason=stop_reason,
        content=list(blocks),  # type: ignore[arg-type]
        usage=Usage(input_tokens=10, output_tokens=5),
        model="scripted",
    )


def results_of(request: ModelRequest) -> list[dict[str, Any]]:
    """Every tool_result block of the request's last user message, content parsed."""
    out = []
    for block in request.messages[-1].content:
        if block.get("type") == "tool_result":
            out.append({**block, "content": json.loads(block["content"])})
    return out


async def valid_structure(h: Any, conv_id: str) -> dict[str, Any]:
    """The next request validates (tool names the model invented are stubbed in, since
    the fake refuses history naming tools not offered, which the real API tolerates)."""
    body = await next_request_body(h.runtime, conv_id, C7)
    offered = {t["name"] for t in body["tools"]}
    for m in body["messages"]:
        for b in m["content"]:
            if b.get("type") == "tool_use" and b["name"] not in offered:
                offered.add(b["name"])
                body["tools"].append({"name": b["name"], "description": "stub", "input_schema": {"type": "object"}})
    if body["messages"][-1]["role"] == "assistant":
        body["messages"].append({"role": "user", "content": [text_block("next")]})
    validate_anthropic(body)
    return body


# -- stop reasons ----------------------------------------------------------------------


async def test_end_turn_answers_and_stores_the_assistant_text(db: Database) -> None:
    """end_turn: the text is the reply, stored as the assistant message; the run waits."""
    model = ScriptedModel([response("end_turn", text_block("Hello! How can I help?"))])
    h = await seeded(db, model)
    r = await h.runtime.chat(principal=C7, channel="api", message="hi")
    assert (r.outcome, r.reply, r.iterations) == ("answered", "Hello! How can I help?", 1)
    history = await h.services.conversations.history(r.conversation_id)
    assert [m.role for m in history] == ["user", "assistant"]
    run = await h.services.conversations.get_run(r.run_id)
    assert run is not None and run.status == "waiting"
    await valid_structure(h, r.conversation_id)


async def test_tool_use_runs_the_tool_and_feeds_the_result_back(db: Database) -> None:
    """tool_use: the proposal is judged, executed, and its result is the next user message."""
    model = ScriptedModel(
        [response("tool_use", tool_use_block("get_order", {"order_id": "O-1042"})), "It was delivered."]
    )
    h = await seeded(db, model)
    r = await h.runtime.chat(principal=C7, channel="api", message="Where is order O-1042?")
    assert r.outcome == "answered"
    [result] = results_of(model.requests[1])
    assert "is_error" not in result and result["content"]["status"] == "DELIVERED"
    await valid_structure(h, r.conversation_id)


async def test_max_tokens_with_text_only_is_a_final_answer(db: Database) -> None:
    """max_tokens cutting plain text ends the turn with what was said."""
    model = ScriptedModel([response("max_tokens", text_block("Your order is on its w"))])
    h = await seeded(db, model)
    r = await h.runtime.chat(principal=C7, channel="api", message="hi")
    assert (r.outcome, r.reply) == ("answered", "Your order is on its w")
    await valid_structure(h, r.conversation_id)


async def test_max_tokens_with_a_truncated_tool_use_gets_an_error_result(db: Database) -> None:
    """max_tokens that cut a tool call short: the partial call still gets a tool_result
    (invalid_arguments, is_error) so the history stays valid, and nothing runs."""
    truncated = tool_use_block("issue_refund", {"order_id": "O-1044"})
    model = ScriptedModel([response("max_tokens", text_block("Refunding now"), truncated), "Sorry, let me retry."])
    h = await seeded(db, model)
    r = await h.runtime.chat(principal=C7, channel="api", message="refund O-1044 please")
    [result] = results_of(model.requests[1])
    assert result["is_error"] is True and result["tool_use_id"] == truncated["id"]
    assert result["content"]["error"] == "invalid_arguments"
    assert any("amount_minor" in p for p in result["content"]["problems"])
    assert await store_refunds(db, "O-1044") == 0
    await valid_structure(h, r.conversation_id)


async def test_refusal_gives_an_honest_reply_and_escalates(db: Database) -> None:
    """refusal: the user gets a reply (the fixed wording when the model said nothing), the case
    is escalated (case note + notifier), and the run is not left running for recovery."""
    model = ScriptedModel([response("refusal")])
    h = await seeded(db, model)
    r = await h.runtime.chat(principal=C7, channel="api", message="something the model declines")
    assert (r.outcome, r.reply) == ("refused", REFUSAL_REPLY)
    assert await case_notes(db, r.conversation_id, "escalation") == 1
    [notice] = h.notifier.of("escalated")
    assert notice.reason == "model_refusal"
    run = await h.services.conversations.get_run(r.run_id)
    assert run is not None and run.status == "escalated"
    history = await h.services.conversations.history(r.conversation_id)
    assert [m.role for m in history] == ["user", "assistant"]
    await valid_structure(h, r.conversation_id)


async def test_pause_turn_sends_the_partial_turn_back_and_continues(db: Database) -> None:
    """pause_turn: the partial assistant content is stored and sent back as is; the next
    response continues it; the history stays protocol-valid."""
    model = ScriptedModel(
        [
            response("pause_turn", text_block("Let me look that up")),
            response("end_turn", text_block("It was delivered.")),
        ]
    )
    h = await seeded(db, model)
    r = await h.runtime.chat(principal=C7, channel="api", message="Where is order O-1042?")
    assert (r.outcome, r.reply, r.iterations) == ("answered", "It was delivered.", 2)
    second = model.requests[1]
    assert second.messages[-1].role == "assistant"
    assert second.messages[-1].content == [text_block("Let me look that up")]
    body = await valid_structure(h, r.conversation_id)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]


# -- recoverable faults become is_error tool results ------------------------------------


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        (tool_use_block("teleport_parcel", {"order_id": "O-1042"}), "unknown_tool"),
        (tool_use_block("get_order", {"order": "O-1042"}), "invalid_arguments"),
        (tool_use_block("get_order", {"order_id": "nonsense id with spaces"}), "invalid_arguments"),
        (tool_use_block("get_invoices", {}), "tool_not_loaded"),
        (tool_use_block("get_order", {"order_id": "O-1050"}), "not_found"),  # another customer's order
    ],
)
async def test_recoverable_faults_become_structured_error_results(
    db: Database, call: dict[str, Any], reason: str
) -> None:
    """Unknown tool, invalid arguments, a tool whose group is not loaded, and a business
    failure each become an ``is_error`` tool_result with a structured reason; the loop goes on."""
    model = ScriptedModel([response("tool_use", call), "Sorry about that."])
    h = await seeded(db, model)
    r = await h.runtime.chat(principal=C7, channel="api", message="Where is order O-1042?")
    assert r.outcome == "answered"
    [result] = results_of(model.requests[1])
    assert result["is_error"] is True
    assert result["content"]["error"] == reason
    [prop] = await h.services.conversations.proposals(r.run_id)
    assert prop.is_error
    assert (prop.decision, prop.reason) in (("reject", reason), ("execute", None))  # a gate or a tool refusal
    await valid_structure(h, r.conversation_id)


async def test_business_rule_failure_reports_the_refundable_amount(db: Database) -> None:
    """A refund above what can still be refunded is refused with the structured facts."""
    too_much = {**SMALL_REFUND, "amount_minor": 999999}
    model = ScriptedModel(
        [
            response("tool_use", tool_use_block("search_knowledge", SEARCH)),
            response("tool_use", tool_use_block("issue_refund", too_much)),
            "Sorry.",
        ]
    )
    h = await seeded(db, model)
    await h.runtime.chat(principal=C7, channel="api", message="refund my order O-1044")
    [result] = results_of(model.requests[2])
    assert result["is_error"] is True
    assert result["content"]["error"] == "amount_exceeds_refundable"
    assert result["content"]["refundable_minor"] == 7300
    assert await store_refunds(db, "O-1044") == 0


# -- repeat interception ----------------------------------------------------------------


async def test_identical_call_within_five_steps_is_intercepted_with_the_earlier_result(db: Database) -> None:
    """The same tool and arguments again within 5 steps is not run: the model gets what it got."""
    lookup = {"order_id": "O-1042"}
    model = ScriptedModel(
        [
            response("tool_use", tool_use_block("get_order", lookup)),
            response("tool_use", tool_use_block("get_case", {})),
            response("tool_use", tool_use_block("get_order", lookup)),
            "Delivered.",
        ]
    )
    h = await seeded(db, model)
    r = await h.runtime.chat(principal=C7, channel="api", message="Where is order O-1042?")
    first = last_tool_result(model.requests[1])
    [again] = results_of(model.requests[3])
    assert "is_error" not in again
    assert again["content"]["intercepted"] is True
    assert again["content"]["previous_result"] == first
    assert "2 step(s) ago" in again["content"]["message"]
    decisions = [p.decision for p in await h.services.conversations.proposals(r.run_id)]
    assert decisions == ["execute", "execute", "intercept"]


async def test_identical_call_older_than_five_steps_runs_again(db: Database) -> None:
    """Interception looks back 5 steps only; an older identical call runs normally."""
    lookup = {"order_id": "O-1042"}
    fillers = [response("tool_use", tool_use_block("search_knowledge", {"query": f"policy {i}"})) for i in range(5)]
    model = ScriptedModel(
        [
            response("tool_use", tool_use_block("get_order", lookup)),
            *fillers,
            response("tool_use", tool_use_block("get_order", lookup)),
            "Delivered.",
        ]
    )
    h = await seeded(db, model)
    r = await h.runtime.chat(principal=C7, channel="api", message="Where is order O-1042?")
    [again] = results_of(model.requests[7])
    assert "intercepted" not in again["content"] and again["content"]["status"] == "DELIVERED"
    decisions = [p.decision for p in await h.services.conversations.proposals(r.run_id)]
    assert decisions.count("intercept") == 0


# -- finish ---------------------------------------------------------------------------------


async def test_finish_claiming_an_unperformed_refund_is_refused_and_explained(db: Database) -> None:
    """finish saying a refund was issued when no issue_refund result exists is refused with
    the reason; the run does not complete."""
    lie = {"resolution": "I refunded your order O-1042 in full.", "action_ids": [], "sources": []}
    model = ScriptedModel([response("tool_use", tool_use_block("finish", lie)), "Sorry — no refund has been made yet."])
    h = await seeded(db, model)
    r = await h.runtime.chat(principal=C7, channel="api", message="refund O-1042")
    [result] = results_of(model.requests[1])
    assert result["is_error"] is True
    assert result["content"]["error"] == "claims_unverified_action"
    assert result["content"]["claimed"] == ["issue_refund"]
    assert "message" in result["content"]
    assert r.outcome == "answered"
    run = await h.services.conversations.get_run(r.run_id)
    assert run is not None and run.status != "completed"


async def test_finish_with_an_invented_action_id_is_refused(db: Database) -> None:
    """An action id no tool returned in this run is refused (unverified_action_ids)."""
    lie = {"resolution": "All sorted.", "action_ids": ["R-deadbeef00"], "sources": []}
    model = ScriptedModel([response("tool_use", tool_use_block("finish", lie)), "Sorry."])
    h = await seeded(db, model)
    await h.runtime.chat(principal=C7, channel="api", message="hi")
    [result] = results_of(model.requests[1])
    assert result["content"]["error"] == "unverified_action_ids"
    assert result["content"]["unknown_action_ids"] == ["R-deadbeef00"]


async def test_valid_finish_after_a_real_refund_completes_the_run(db: Database) -> None:
    """A finish citing the refund id a tool returned and a retrieved source completes the run."""
    state: dict[str, Any] = {}

    def planner(request: ModelRequest) -> Any:
        n = len(model.requests)
        if n == 1:
            return [tool_use_block("search_knowledge", SEARCH)]
        if n == 2:
            return [tool_use_block("issue_refund", SMALL_REFUND)]
        if n == 3:
            return "Shall I refund $30.00 on O-1044? Please confirm."
        if n == 4:  # after the customer's "yes": the runtime executed it and said so
            text = " ".join(b.get("text", "") for b in request.messages[-1].content)
            state["refund_id"] = json.loads(text.split("Outcome: executed: ", 1)[1].split("</signoff_event>")[0])[
                "refund_id"
            ]
            return [
                tool_use_block(
                    "finish",
                    {
                        "resolution": "I refunded $30.00 on O-1044.",
                        "action_ids": [state["refund_id"]],
                        "sources": ["refund-policy@7#window"],
                    },
                )
            ]
        return "Done: $30.00 refunded."

    model = FunctionModel(planner)
    h = await seeded(db, model)
    first = await h.runtime.chat(principal=C7, channel="api", message="Please refund $30 on O-1044, it is damaged.")
    assert [p.kind for p in first.pending] == ["confirmation"]
    done = await h.runtime.chat(principal=C7, channel="api", message="yes", conversation_id=first.conversation_id)
    assert done.outcome == "finished"
    assert done.reply  # the model's own text, or the resolution
    run = await h.services.conversations.get_run(done.run_id)
    assert run is not None and run.status == "completed"
    assert await store_refunds(db, "O-1044") == 1
    assert len(model.requests) == 4  # finish ended the turn: no further model call
    [finish] = [p for p in await h.services.conversations.proposals(done.run_id) if p.tool == "finish"]
    assert (finish.decision, finish.is_error, finish.result["finished"]) == ("execute", False, True)
    body = await valid_structure(h, done.conversation_id)
    assert body["messages"][-1]["role"] == "user"


# -- caps -------------------------------------------------------------------------------------


async def test_step_cap_ends_a_looping_model_with_an_honest_reply_and_an_escalation(db: Database) -> None:
    """A model that never stops calling tools is stopped at the cap (12): the user gets the
    honest fixed reply, a case note and the notifier escalate it, and the run is not left running."""
    calls = iter(range(1000))
    model = FunctionModel(lambda _req: [tool_use_block("search_knowledge", {"query": f"loop {next(calls)}"})])
    h = await seeded(db, model)
    r = await h.runtime.chat(principal=C7, channel="api", message="hello")
    assert r.outcome == "gave_up"
    assert r.reply == GIVE_UP_REPLY
    assert len(model.requests) == h.services.policy.run.max_steps_per_turn == 12
    assert await case_notes(db, r.conversation_id, "escalation") == 1
    [notice] = h.notifier.of("escalated")
    assert notice.reason == "StepLimitExceeded"
    assert len(notice.trace) == 12  # every tool call of the run, for whoever picks it up
    run = await h.services.conversations.get_run(r.run_id)
    assert run is not None and run.status == "escalated"
    history = await h.services.conversations.history(r.conversation_id)
    assert history[-1].role == "assistant" and history[-1].content == [text_block(GIVE_UP_REPLY)]
    await valid_structure(h, r.conversation_id)


async def test_token_budget_ends_the_turn_honestly(db: Database) -> None:
    """Past the conversation's token budget no further model call is made."""
    policy = policy_with(run=policy_with().run.model_copy(update={"max_tokens_per_conversation": 1000}))
    big = ModelResponse(
        stop_reason="tool_use",
        content=[tool_use_block("get_case", {})],
        usage=Usage(input_tokens=2000, output_tokens=10),
        model="scripted",
    )
    model = ScriptedModel([big])
    h = await seeded(db, model, policy=policy)
    r = await h.runtime.chat(principal=C7, channel="api", message="hello")
    assert (r.outcome, r.reply) == ("gave_up", GIVE_UP_REPLY)
    assert len(model.requests) == 1
    assert h.notifier.of("escalated")[0].reason == "BudgetExceeded"
    await valid_structure(h, r.conversation_id)
