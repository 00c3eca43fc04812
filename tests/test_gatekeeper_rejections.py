"""Every rejection path of the gatekeeper (C5), in the order it checks them:
known tool → loaded → JSON object → schema → repeat interception → scope →
rollout stage → business rules (ownership first) → limits → evidence.

Each test drives the real :class:`agent.gatekeeper.Gatekeeper` with the real
repositories over a small dataset; no model is involved. Confirmation,
approval routing, idempotency keys and rollout stages are pinned in
``test_gatekeeper_gates.py``.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent import steps
from agent.decisions import Execute, Intercept, NeedsApproval, NeedsConfirmation, Reject
from agent.executor import ExecOutcome
from agent.gatekeeper import DEDUP_WINDOW_STEPS, args_hash
from agent.policy import load_policy
from agent.turn import Turn
from storage.db import Database
from tests.conftest import make_sqlite
from tests.gatekeeper_kit import (
    C7,
    CANCEL_EVIDENCE,
    EVIDENCE,
    REP,
    SYSTEM,
    Env,
    base_dataset,
    confirm_exact,
    dumps,
    gate_turn,
    judge,
    make_env,
    policy_with,
    proposed,
    refund,
    retrieve,
)


@pytest.fixture
async def env(db: Database) -> Env:
    return await make_env(db)


async def _read(env: Env, turn: Turn, tool: str, args: dict[str, Any]) -> ExecOutcome:
    """Judge a read and, when the gate says Execute, run it (reads check ownership in the handler)."""
    decision = await judge(env, turn, tool, args)
    assert isinstance(decision, Execute) and decision.key is None, decision
    t = env.services.registry.tools[tool]
    return await env.services.executor.run(
        t, args, steps.tool_context(turn), key=None, proposal_id=None, run_id=turn.run.id
    )


def _reject(decision: Any, reason: str) -> Reject:
    assert isinstance(decision, Reject), decision
    assert decision.reason == reason, decision
    return decision


# -- 1. unknown tool ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["transfer_funds", "issue_refunds", "ISSUE_REFUND", "", "x" * 500, "get_order; drop table orders"]
)
async def test_unknown_tool_is_rejected_first_whatever_the_arguments(env: Env, name: str) -> None:
    """An unknown tool is `unknown_tool` even with garbage arguments; the echoed name is bounded."""
    turn = await gate_turn(env, C7)
    d = _reject(await judge(env, turn, name, ["not", "an", "object"]), "unknown_tool")
    assert len(d.message) < 120


# -- 2. tool not loaded ------------------------------------------------------------------------


async def test_tool_of_an_unloaded_group_is_rejected_before_its_arguments(env: Env) -> None:
    """`tool_not_loaded` names the group to load; it wins over bad arguments."""
    turn = await gate_turn(env, C7, groups=("orders",))
    d = _reject(await judge(env, turn, "issue_refund", "garbage"), "tool_not_loaded")
    assert "billing" in d.message
    _reject(await judge(env, turn, "get_account", {}), "tool_not_loaded")
    # the always group needs no loading
    assert isinstance(await judge(env, turn, "search_knowledge", {"query": "refund"}), Execute)
    assert isinstance(await judge(env, turn, "get_order", {"order_id": "O-1042"}), Execute)


# -- 3. arguments must be a JSON object -------------------------------------------------------


@pytest.mark.parametrize("args", [None, [], ["O-1042"], "O-1042", 1042, True, '{"order_id": "O-1042"}'])
async def test_arguments_that_are_not_an_object_are_invalid(env: Env, args: Any) -> None:
    turn = await gate_turn(env, C7)
    d = _reject(await judge(env, turn, "get_order", args), "invalid_arguments")
    assert "JSON object" in d.message


# -- 4. schema violations ----------------------------------------------------------------------

SCHEMA_CASES: list[tuple[str, str, dict[str, Any], str]] = [
    ("extra property: customer_id", "issue_refund", {**refund(), "customer_id": "C-8"}, "customer_id"),
    (
        "extra property: to",
        "send_message",
        {"channel": "email", "template": "order_update", "order_id": "O-1042", "to": "x@evil.example"},
        "to",
    ),
    ("extra property on an empty schema", "get_account", {"customer_id": "C-8"}, "customer_id"),
    (
        "extra nested property",
        "update_shipping_address",
        {
            "order_id": "O-1044",
            "address": {
                "line1": "1 A St",
                "city": "X",
                "postal_code": "12345",
                "country": "US",
                "recipient_email": "a@b.example",
            },
        },
        "recipient_email",
    ),
    ("wrong type: amount as string", "issue_refund", refund(amount="2000"), "amount_minor"),  # type: ignore[arg-type]
    ("wrong type: fractional amount", "issue_refund", refund(amount=20.5), "amount_minor"),  # type: ignore[arg-type]
    ("wrong type: boolean amount", "issue_refund", refund(amount=True), "amount_minor"),
    ("wrong type: evidence as string", "issue_refund", {**refund(), "evidence": EVIDENCE}, "evidence"),
    ("minimum: zero amount", "issue_refund", refund(amount=0), "amount_minor"),
    ("minimum: negative amount", "issue_refund", refund(amount=-500), "amount_minor"),
    ("maximum: absurd amount", "issue_refund", refund(amount=10**12), "amount_minor"),
    # A bare number is a Shopify order name (INTERFACES "Shopify"); this is neither form.
    ("pattern: order id", "get_order", {"order_id": "order 1042"}, "order_id"),
    ("pattern: order id with injection", "get_order", {"order_id": "O-1042' OR '1'='1"}, "order_id"),
    ("pattern: currency", "issue_refund", refund(currency="usd"), "currency"),
    ("pattern: evidence id", "issue_refund", refund(evidence=("the policy says so",)), "evidence"),
    ("pattern: email", "update_contact_details", {"email": "not-an-email"}, "email"),
    ("enum: reason code", "issue_refund", {**refund(), "reason_code": "because I said so"}, "reason_code"),
    ("enum: template", "send_message", {"channel": "email", "template": "password_reset"}, "template"),
    ("enum: channel", "send_message", {"channel": "slack", "template": "order_update"}, "channel"),
    ("enum: group", "load_tools", {"group": "admin"}, "group"),
    ("bidi override in a note", "add_case_note", {"note": "customer is \u202eregnad"}, "note"),
    ("bidi isolate in a summary", "escalate_to_human", {"reason": "other", "summary": "see \u2067x\u2069"}, "summary"),
    (
        "zero-width space in a city",
        "update_shipping_address",
        {
            "order_id": "O-1044",
            "address": {"line1": "1 A St", "city": "Spring\u200bfield", "postal_code": "12345", "country": "US"},
        },
        "city",
    ),
    ("byte-order mark in a query", "search_knowledge", {"query": "\ufeffrefund window"}, "query"),
    (
        "word joiner in a resolution",
        "finish",
        {"resolution": "done\u2060", "action_ids": [], "sources": []},
        "resolution",
    ),
    ("required property missing", "issue_refund", {"order_id": "O-1042", "amount_minor": 100}, "(arguments)"),
    ("empty object where one property is needed", "update_contact_details", {}, "(arguments)"),
]


@pytest.mark.parametrize(("case", "tool", "args", "where"), SCHEMA_CASES, ids=[c[0] for c in SCHEMA_CASES])
async def test_schema_violations_are_invalid_arguments_naming_the_problem(
    env: Env, case: str, tool: str, args: dict[str, Any], where: str
) -> None:
    """`invalid_arguments` with at most five short problems, each naming where it is."""
    turn = await gate_turn(env, REP)  # the rep holds every scope: only the schema can refuse
    d = _reject(await judge(env, turn, tool, args), "invalid_arguments")
    problems = d.details["problems"]
    assert 1 <= len(problems) <= 5 and all(len(p) <= 300 for p in problems)
    assert any(p.startswith(where) or where in p for p in problems), problems


async def test_integer_valued_float_amount_is_not_an_integer(env: Env) -> None:
    """2000.0 is not 2000: money is integer minor units, so one amount has one canonical form
    (its confirmation hash, its idempotency key, the amount written downstream)."""
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    _reject(await judge(env, turn, "issue_refund", refund(amount=2000.0)), "invalid_arguments")  # type: ignore[arg-type]


async def test_schema_is_checked_before_scope_stage_and_ownership(env: Env) -> None:
    """A malformed call for a tool the principal may not use, on someone else's order, is a schema error."""
    system = await gate_turn(env, SYSTEM)
    _reject(await judge(env, system, "issue_refund", {**refund("O-1050"), "x": 1}), "invalid_arguments")
    env2 = await make_env(
        await make_sqlite(Path(str(env.db.engine.url.database)).with_name("b.db")),
        policy=policy_with(rollout={"default": "reads", "channels": {}}),
    )
    turn = await gate_turn(env2, C7)
    _reject(await judge(env2, turn, "issue_refund", {**refund("O-1050"), "x": 1}), "invalid_arguments")
    await env2.db.dispose()


# -- 5. repeat interception --------------------------------------------------------------------


async def test_repeat_within_five_steps_returns_the_earlier_result(env: Env) -> None:
    """Same name + canonical arguments within the window: Intercept with the earlier result and step."""
    turn = await gate_turn(env, C7)
    args = {"order_id": "O-1042"}
    turn.facts.step = 1
    turn.facts.remember("get_order", args_hash("get_order", args), {"order_id": "O-1042", "status": "DELIVERED"})
    for step in range(1, 1 + DEDUP_WINDOW_STEPS + 1):
        turn.facts.step = step
        d = await judge(env, turn, "get_order", dict(args))
        assert isinstance(d, Intercept), (step, d)
        assert d.step == 1 and d.previous == {"order_id": "O-1042", "status": "DELIVERED"}
    turn.facts.step = 1 + DEDUP_WINDOW_STEPS + 1
    assert isinstance(await judge(env, turn, "get_order", args), Execute)


async def test_repeat_interception_ignores_key_order_but_not_values(env: Env) -> None:
    """Key order in the JSON does not matter; a different value or tool is a different call."""
    turn = await gate_turn(env, C7)
    a = {
        "order_id": "O-1042",
        "amount_minor": 1500,
        "currency": "USD",
        "reason_code": "damaged",
        "evidence": [EVIDENCE],
    }
    b = {
        "evidence": [EVIDENCE],
        "reason_code": "damaged",
        "currency": "USD",
        "amount_minor": 1500,
        "order_id": "O-1042",
    }
    assert list(a) != list(b) and args_hash("issue_refund", a) == args_hash("issue_refund", b)
    turn.facts.step = 2
    turn.facts.remember("issue_refund", args_hash("issue_refund", a), {"refund_id": "R-1"})
    turn.facts.step = 4
    d = await judge(env, turn, "issue_refund", b)
    assert isinstance(d, Intercept) and d.previous == {"refund_id": "R-1"}
    assert not isinstance(await judge(env, turn, "issue_refund", {**b, "amount_minor": 1501}), Intercept)
    assert not isinstance(await judge(env, turn, "get_order", {"order_id": "O-1042"}), Intercept)


async def test_repeat_of_a_read_in_a_turn_does_not_run_it_again(env: Env) -> None:
    """Through the turn: the second identical call is answered from the first, marked as intercepted."""
    turn = await gate_turn(env, C7)
    first, _, o1, _ = await steps.handle(
        turn, {"id": "tu1", "name": "get_order", "input": {"order_id": "O-1042"}}, "p1"
    )
    turn.facts.step += 1
    second, is_error, o2, events = await steps.handle(
        turn, {"id": "tu2", "name": "get_order", "input": {"order_id": "O-1042"}}, "p2"
    )
    assert o1.decision == "execute" and o2.decision == "intercept" and not is_error
    assert second["intercepted"] is True and second["previous_result"] == first
    assert events.kind == "gate.intercept"


# -- 6. scope ----------------------------------------------------------------------------------


async def test_scope_is_checked_before_ownership_and_stage(env: Env) -> None:
    """A customer may not change contact details: `not_permitted`, whatever the arguments say."""
    turn = await gate_turn(env, C7)
    d = _reject(await judge(env, turn, "update_contact_details", {"email": "new@example.com"}), "not_permitted")
    assert "ceiling" not in d.message.lower() and not re.search(r"\d", d.message)
    system = await gate_turn(env, SYSTEM)
    _reject(await judge(env, system, "issue_refund", refund("O-1050")), "not_permitted")
    _reject(await judge(env, system, "get_order", {"order_id": "O-1042"}), "not_permitted")


# -- 7. business rules: ownership, currency, refundable, window, per-day count, state -----------


def _without_o1050() -> dict[str, Any]:
    ds = base_dataset()
    ds["orders"] = [o for o in ds["orders"] if o["id"] != "O-1050"]
    ds["payments"] = [p for p in ds["payments"] if p["order_id"] != "O-1050"]
    ds["returns"] = [r for r in ds["returns"] if r["order_id"] != "O-1050"]
    ds["invoices"] = [i for i in ds["invoices"] if i["order_id"] != "O-1050"]
    return ds


FOREIGN_ACTIONS: list[tuple[str, dict[str, Any]]] = [
    ("issue_refund", refund("O-1050", 2000, currency="EUR")),
    ("issue_refund", refund("O-1050", 2000, currency="USD")),
    ("cancel_order", {"order_id": "O-1050", "reason_code": "customer_request", "evidence": [CANCEL_EVIDENCE]}),
    ("create_return", {"order_id": "O-1050", "items": [{"sku": "JKT-DWN", "qty": 1}], "reason_code": "damaged"}),
    (
        "update_shipping_address",
        {"order_id": "O-1050", "address": {"line1": "9 B St", "city": "Y", "postal_code": "99999", "country": "US"}},
    ),
    ("create_reorder", {"order_id": "O-1050"}),
    ("retry_payment", {"order_id": "O-1050"}),
    ("send_message", {"channel": "email", "template": "order_update", "order_id": "O-1050"}),
    ("send_payment_link", {"order_id": "O-1050"}),
]
FOREIGN_READS: list[tuple[str, dict[str, Any]]] = [
    ("get_order", {"order_id": "O-1050"}),
    ("track_shipment", {"order_id": "O-1050"}),
    ("list_payments", {"order_id": "O-1050"}),
    ("get_return", {"return_id": "RT-50"}),
    ("get_invoices", {"invoice_id": "INV-3001"}),
]


async def test_someone_elses_order_is_byte_identical_to_a_missing_one(env: Env, tmp_path: Path) -> None:
    """S1: for every action and read, C-8's O-1050 answers exactly like an O-1050 that does not exist."""
    missing = await make_env(await make_sqlite(tmp_path / "missing.db"), dataset=_without_o1050())
    try:
        assert await env.services.backend.get_order("C-8", "O-1050") is not None
        assert await missing.services.backend.get_order("C-8", "O-1050") is None
        answers: dict[str, list[str]] = {}
        for name, e in (("foreign", env), ("missing", missing)):
            turn = await gate_turn(e, C7)
            await retrieve(turn, EVIDENCE, CANCEL_EVIDENCE)
            out = []
            for tool, args in FOREIGN_ACTIONS:
                d = _reject(await judge(e, turn, tool, args), "not_found")
                out.append(dumps(d.as_result()))
            for tool, args in FOREIGN_READS:
                outcome = await _read(e, turn, tool, args)
                assert outcome.is_error and outcome.result["error"] == "not_found", (tool, outcome.result)
                out.append(dumps(outcome.result))
            answers[name] = out
        assert answers["foreign"] == answers["missing"]
        for text in answers["foreign"]:
            for leak in ("Jonas", "C-8", "EUR", "24900", "JKT-DWN", "DELIVERED"):
                assert leak not in text, (leak, text)
    finally:
        await missing.db.dispose()


async def test_currency_mismatch_names_the_orders_currency(env: Env) -> None:
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    d = _reject(await judge(env, turn, "issue_refund", refund(currency="EUR")), "currency_mismatch")
    assert d.details == {"order_currency": "USD"}


async def test_amount_over_refundable_reports_refundable_minor(env: Env) -> None:
    """`{"error":"amount_exceeds_refundable","refundable_minor":…}` — after earlier refunds too."""
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    d = _reject(await judge(env, turn, "issue_refund", refund(amount=18901)), "amount_exceeds_refundable")
    assert d.as_result()["refundable_minor"] == 18900 and d.details["currency"] == "USD"
    await env.services.backend.issue_refund(
        "C-7",
        "O-1042",
        amount_minor=15000,
        currency="USD",
        reason_code="damaged",
        return_id=None,
        idempotency_key="seed-1",
    )
    d = _reject(await judge(env, turn, "issue_refund", refund(amount=4000)), "amount_exceeds_refundable")
    assert d.as_result() == {
        "error": "amount_exceeds_refundable",
        "message": d.message,
        "refundable_minor": 3900,
        "currency": "USD",
    }
    assert isinstance(await judge(env, turn, "issue_refund", refund(amount=3900)), NeedsConfirmation)


async def test_refund_outside_the_window_is_refused(env: Env) -> None:
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    d = _reject(await judge(env, turn, "issue_refund", refund("O-1043", 1000)), "outside_refund_window")
    assert "delivered_at" in d.details
    env.clock.advance(timedelta(days=26))  # O-1042 was delivered 5 days before "now"
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    _reject(await judge(env, turn, "issue_refund", refund("O-1042", 1000)), "outside_refund_window")


async def test_fourth_refund_in_a_day_is_refused_without_revealing_the_limit(env: Env) -> None:
    """`daily_refund_limit_reached` counts the customer's refunds from every channel in 24 hours."""
    backend = env.services.backend
    for i, oid in enumerate(("O-1048", "O-1049", "O-1045")):
        await backend.issue_refund(
            "C-7",
            oid,
            amount_minor=100,
            currency="USD",
            reason_code="damaged",
            return_id=None,
            idempotency_key=f"seed-{i}",
        )
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    d = _reject(await judge(env, turn, "issue_refund", refund(amount=100)), "daily_refund_limit_reached")
    assert not re.search(r"\d", d.message) and d.details == {}
    env.clock.advance(timedelta(hours=24, seconds=1))
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    assert isinstance(await judge(env, turn, "issue_refund", refund(amount=100)), NeedsConfirmation)


STATE_RULES: list[tuple[str, dict[str, Any], str]] = [
    (
        "cancel_order",
        {"order_id": "O-1045", "reason_code": "customer_request", "evidence": [CANCEL_EVIDENCE]},
        "order_not_cancellable",
    ),
    (
        "cancel_order",
        {"order_id": "O-1042", "reason_code": "customer_request", "evidence": [CANCEL_EVIDENCE]},
        "order_not_cancellable",
    ),
    (
        "update_shipping_address",
        {"order_id": "O-1045", "address": {"line1": "2 B St", "city": "X", "postal_code": "12345", "country": "US"}},
        "address_change_not_allowed",
    ),
    (
        "create_return",
        {"order_id": "O-1044", "items": [{"sku": "HAT-SUN", "qty": 1}], "reason_code": "damaged"},
        "order_not_delivered",
    ),
    (
        "create_return",
        {"order_id": "O-1043", "items": [{"sku": "SOCK-3", "qty": 1}], "reason_code": "damaged"},
        "outside_return_window",
    ),
    (
        "create_return",
        {"order_id": "O-1042", "items": [{"sku": "BOOT-W8", "qty": 2}], "reason_code": "damaged"},
        "invalid_items",
    ),
    (
        "create_return",
        {"order_id": "O-1042", "items": [{"sku": "NOT-IN-ORDER", "qty": 1}], "reason_code": "damaged"},
        "invalid_items",
    ),
    ("retry_payment", {"order_id": "O-1042"}, "nothing_to_retry"),
    ("send_payment_link", {"order_id": "O-1042"}, "order_already_paid"),
    (
        "send_message",
        {"channel": "email", "template": "refund_confirmation", "order_id": "O-1042"},
        "no_refund_for_order",
    ),
    ("send_message", {"channel": "email", "template": "order_update"}, "order_id_required"),
    ("issue_refund", refund(return_id="RT-50"), "not_found"),
]


@pytest.mark.parametrize(("tool", "args", "reason"), STATE_RULES, ids=[f"{t}:{r}" for t, _, r in STATE_RULES])
async def test_business_rules_refuse_through_the_tools_checks(
    env: Env, tool: str, args: dict[str, Any], reason: str
) -> None:
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE, CANCEL_EVIDENCE)
    _reject(await judge(env, turn, tool, args), reason)


async def test_rep_contact_change_to_what_is_on_file_is_no_change(env: Env) -> None:
    turn = await gate_turn(env, REP)
    _reject(await judge(env, turn, "update_contact_details", {"email": "MAYA.CHEN@example.com"}), "no_change")


async def test_business_rules_come_before_limits_and_evidence(env: Env) -> None:
    """Someone else's order is `not_found` even when the run is out of actions and cites nothing."""
    turn = await gate_turn(env, C7)
    turn.facts.action_counts["issue_refund"] = 99
    _reject(await judge(env, turn, "issue_refund", refund("O-1050", evidence=())), "not_found")


# -- 8. limits ---------------------------------------------------------------------------------


async def test_run_action_limit(env: Env) -> None:
    """After max_actions_per_run executed actions the run must escalate."""
    lim = load_policy().limits
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    turn.facts.action_counts["send_message"] = lim.max_actions_per_run - 1
    assert isinstance(await judge(env, turn, "issue_refund", refund()), NeedsConfirmation)
    turn.facts.action_counts["create_return"] = 1
    d = _reject(await judge(env, turn, "issue_refund", refund()), "run_action_limit_reached")
    assert not re.search(r"\d", d.message)
    # runtime tools and reads are not actions
    assert isinstance(
        await judge(env, turn, "escalate_to_human", {"reason": "cannot_resolve", "summary": "limit"}), Execute
    )
    assert isinstance(await judge(env, turn, "get_order", {"order_id": "O-1042"}), Execute)


async def test_tool_call_limit(env: Env) -> None:
    lim = load_policy().limits
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    turn.facts.tool_counts["issue_refund"] = lim.max_calls_per_tool_per_run
    _reject(await judge(env, turn, "issue_refund", refund()), "tool_call_limit_reached")
    assert isinstance(await judge(env, turn, "send_password_reset", {}), NeedsConfirmation)


async def test_daily_amount_limit_counts_refunds_and_pending_approvals(db: Database) -> None:
    """`daily_amount_limit_reached`: today's refunds + pending approvals + this one over the day's cap."""
    env = await make_env(db, policy=policy_with(limits={"max_refund_minor_per_customer_per_day": {"USD": 10000}}))
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    d = _reject(await judge(env, turn, "issue_refund", refund(amount=10001)), "daily_amount_limit_reached")
    assert not re.search(r"\d", d.message) and d.details == {}
    await env.services.backend.issue_refund(
        "C-7",
        "O-1049",
        amount_minor=6000,
        currency="USD",
        reason_code="damaged",
        return_id=None,
        idempotency_key="seed",
    )
    assert isinstance(await judge(env, turn, "issue_refund", refund(amount=4000)), NeedsConfirmation)
    _reject(await judge(env, turn, "issue_refund", refund(amount=4001)), "daily_amount_limit_reached")
    # a pending approval reserves its amount
    big = refund("O-1048", 3000)
    await confirm_exact(env, turn, "issue_refund", big)
    pending = await judge(env, turn, "issue_refund", big)
    assert isinstance(pending, NeedsApproval)
    await steps.act(turn, pending, proposed("issue_refund", big), "prop_big", steps.tool_context(turn))
    _reject(await judge(env, turn, "issue_refund", refund(amount=1001)), "daily_amount_limit_reached")


# -- 9. evidence -------------------------------------------------------------------------------


async def test_tier_two_actions_require_evidence(env: Env) -> None:
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE, CANCEL_EVIDENCE)
    _reject(await judge(env, turn, "issue_refund", refund(evidence=())), "evidence_required")
    _reject(
        await judge(env, turn, "cancel_order", {"order_id": "O-1044", "reason_code": "customer_request"}),
        "evidence_required",
    )
    rep = await gate_turn(env, REP)
    _reject(await judge(env, rep, "update_contact_details", {"email": "new@example.com"}), "evidence_required")
    # tier 1 needs none
    assert isinstance(await judge(env, turn, "send_password_reset", {}), NeedsConfirmation)


async def test_evidence_must_have_been_returned_by_search_knowledge_in_this_run(env: Env) -> None:
    """An id that exists in the store but was not retrieved here, or was retrieved in another
    conversation, is `evidence_not_retrieved`, listing the unknown ids."""
    other = await gate_turn(env, C7)
    outcome = await env.services.executor.run(
        env.services.registry.tools["search_knowledge"],
        {"query": "refund window damaged"},
        steps.tool_context(other),
        key=None,
        proposal_id=None,
        run_id=other.run.id,
    )
    assert EVIDENCE in dumps(outcome.result) and EVIDENCE in other.facts.knowledge_ids

    turn = await gate_turn(env, C7)
    d = _reject(await judge(env, turn, "issue_refund", refund()), "evidence_not_retrieved")
    assert d.details == {"unknown_evidence": [EVIDENCE]}
    await retrieve(turn, EVIDENCE)
    d = _reject(
        await judge(env, turn, "issue_refund", refund(evidence=(EVIDENCE, "refund-policy@8#window"))),
        "evidence_not_retrieved",
    )
    assert d.details == {"unknown_evidence": ["refund-policy@8#window"]}
    assert isinstance(await judge(env, turn, "issue_refund", refund()), NeedsConfirmation)


async def test_evidence_is_checked_before_confirmation(env: Env) -> None:
    """Even an exact confirmation does not excuse missing evidence."""
    turn = await gate_turn(env, C7)
    args = refund(evidence=())
    await confirm_exact(env, turn, "issue_refund", args)
    _reject(await judge(env, turn, "issue_refund", args), "evidence_required")
