"""The scope matrix (C5, S1): every (principal, tool) pair, in both directions.

Principals: customer C-7, rep S-1 in assist on C-7, supervisor S-3 on C-7, and
the system principal (the worker acting on its own). The table below is written
out by hand — not derived from the policy — so a policy edit that widens or
narrows a scope fails here and is reviewed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agent.decisions import Reject
from agent.policy import load_policy
from tests.conftest import make_sqlite
from tests.gatekeeper_kit import (
    C7,
    CANCEL_EVIDENCE,
    CONTACT_EVIDENCE,
    EVIDENCE,
    REP,
    SUP,
    SYSTEM,
    Env,
    gate_turn,
    judge,
    make_env,
    policy_with,
    refund,
    retrieve,
)
from tools.catalogue import build_registry
from tools.context import Principal

ADDR = {"line1": "2 Oak Ave", "city": "Springfield", "postal_code": "12345", "country": "US"}

#: One well-formed call per tool, on C-7's own records.
CALLS: dict[str, dict[str, Any]] = {
    "search_knowledge": {"query": "refund window"},
    "get_case": {},
    "add_case_note": {"note": "checked the order"},
    "escalate_to_human": {"reason": "customer_request", "summary": "wants a person"},
    "finish": {"resolution": "Answered the question.", "action_ids": [], "sources": []},
    "load_tools": {"group": "billing"},
    "get_account": {},
    "list_payment_methods": {},
    "update_contact_details": {"phone": "+14155550199", "evidence": [CONTACT_EVIDENCE]},
    "send_password_reset": {},
    "send_payment_link": {},
    "get_order": {"order_id": "O-1042"},
    "list_orders": {},
    "track_shipment": {"order_id": "O-1045"},
    "cancel_order": {"order_id": "O-1044", "reason_code": "customer_request", "evidence": [CANCEL_EVIDENCE]},
    "update_shipping_address": {"order_id": "O-1044", "address": ADDR},
    "create_reorder": {"order_id": "O-1042"},
    "send_message": {"channel": "email", "template": "order_update", "order_id": "O-1042"},
    "get_return": {"return_id": "RT-1"},
    "list_returns": {},
    "create_return": {"order_id": "O-1042", "items": [{"sku": "BOOT-W8", "qty": 1}], "reason_code": "damaged"},
    "get_invoices": {},
    "list_payments": {"order_id": "O-1042"},
    "issue_refund": refund(amount=2000),
    "retry_payment": {"order_id": "O-1046"},
}

ALWAYS = {"search_knowledge", "get_case", "add_case_note", "escalate_to_human", "finish", "load_tools"}
EVERYTHING = set(CALLS)

PRINCIPALS: dict[str, tuple[Principal, str]] = {
    "customer C-7": (C7, "api"),
    "rep S-1 assisting C-7": (REP, "slack"),
    "supervisor S-3 on C-7": (SUP, "slack"),
    "system": (SYSTEM, "api"),
}
MAY: dict[str, set[str]] = {
    "customer C-7": EVERYTHING - {"update_contact_details"},
    "rep S-1 assisting C-7": EVERYTHING,
    "supervisor S-3 on C-7": EVERYTHING,
    # On its own the worker may only read knowledge and manage the case: no account, order or billing tool.
    "system": ALWAYS,
}

CASES = [(who, tool, tool in MAY[who]) for who in PRINCIPALS for tool in CALLS]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    """One store for the whole matrix: judging has no side effects on it. Each case opens a
    conversation, so the per-customer hourly limit is lifted here (it has its own tests)."""
    db = await make_sqlite(Path(tmp_path_factory.mktemp("scope")) / "scope.db")
    yield await make_env(db, policy=policy_with(customer={"max_new_conversations_per_hour": 100_000}))
    await db.dispose()


def test_matrix_covers_every_tool_and_is_big_enough() -> None:
    assert set(CALLS) == set(build_registry().tools), "a tool was added or removed: extend the matrix"
    assert len(CASES) >= 60
    assert {may for _, _, may in CASES} == {True, False}


def test_hand_written_table_agrees_with_the_policy_scopes() -> None:
    """The policy is the source of truth at run time; the table pins what it must say."""
    policy, registry = load_policy(), build_registry()
    for who, (principal, _) in PRINCIPALS.items():
        held = policy.scopes_for(principal.kind)
        derived = {name for name, t in registry.tools.items() if t.meta.scopes <= held}
        assert derived == MAY[who], who


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize(
    ("who", "tool", "may"), CASES, ids=[f"{'may' if m else 'may-not'}:{w}:{t}" for w, t, m in CASES]
)
async def test_scope(env: Env, who: str, tool: str, may: bool) -> None:
    """`may`: the gate answers anything but not_permitted. `may-not`: exactly not_permitted, before
    any lookup (the answer is the same for C-7's own records and for nobody's)."""
    principal, channel = PRINCIPALS[who]
    turn = await gate_turn(env, principal, channel=channel)
    await retrieve(turn, EVIDENCE, CANCEL_EVIDENCE, CONTACT_EVIDENCE)
    decision = await judge(env, turn, tool, CALLS[tool])
    if may:
        assert not (isinstance(decision, Reject) and decision.reason == "not_permitted"), decision
        assert not (
            isinstance(decision, Reject) and decision.reason in ("invalid_arguments", "unknown_tool", "tool_not_loaded")
        ), decision
    else:
        assert isinstance(decision, Reject) and decision.reason == "not_permitted", decision
        assert decision.as_result() == {
            "error": "not_permitted",
            "message": "This action is not available to you here.",
        }
