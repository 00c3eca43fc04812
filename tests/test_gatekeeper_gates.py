"""The gatekeeper's later stages (C5, C6, C7, C9, C16): rollout stages, the
confirmation gate, approval routing and the idempotency key."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from agent import steps
from agent.decisions import Execute, NeedsApproval, NeedsConfirmation, Record, Reject
from agent.policy import load_policy
from storage.db import Database
from tests.gatekeeper_kit import (
    C7,
    CANCEL_EVIDENCE,
    CONTACT_EVIDENCE,
    EVIDENCE,
    REP,
    SUP,
    Env,
    confirm_exact,
    gate_turn,
    judge,
    ledger_rows,
    make_env,
    policy_with,
    proposed,
    refund,
    retrieve,
    store_state,
)
from tools.context import LOADABLE_GROUPS


@pytest.fixture
async def env(db: Database) -> Env:
    return await make_env(db)


def _stage_policy(stage: str, enabled: list[str] | None = None) -> Any:
    rollout: dict[str, Any] = {"default": "full", "channels": {"api": {"customer": stage, "rep": stage}}}
    if enabled is not None:
        rollout["enabled_actions"] = enabled
    return policy_with(rollout=rollout)


# -- rollout stages (C16) ----------------------------------------------------------------------


async def test_shadow_records_a_confirmed_action_and_never_executes_it(db: Database) -> None:
    """Shadow: the whole gate runs, then the action is recorded, not executed — even when confirmed."""
    env = await make_env(db, policy=_stage_policy("shadow"))
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    args = refund(amount=2000)
    await confirm_exact(env, turn, "issue_refund", args)
    before = await store_state(db)
    d = await judge(env, turn, "issue_refund", args)
    assert isinstance(d, Record) and d.would_need == "execute"
    big = refund("O-1048", 90000)
    d = await judge(env, turn, "issue_refund", big)
    assert isinstance(d, Record) and d.would_need == "approval"
    result, is_error, _o, events = await steps.handle(turn, {"id": "tu1", "name": "issue_refund", "input": args}, "p1")
    assert result["status"] == "RECORDED_NOT_EXECUTED" and not is_error
    assert events.kind == "gate.record"
    assert await store_state(db) == before and await ledger_rows(db) == []
    # the gate still refuses what it would refuse in production
    assert isinstance(await judge(env, turn, "issue_refund", refund("O-1050")), Reject)
    # reads and runtime tools run
    assert isinstance(await judge(env, turn, "get_order", {"order_id": "O-1042"}), Execute)
    assert isinstance(await judge(env, turn, "escalate_to_human", {"reason": "other", "summary": "s"}), Execute)


async def test_reads_stage_rejects_every_action_and_allows_reads(db: Database) -> None:
    env = await make_env(db, policy=_stage_policy("reads"))
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    for tool, args in (
        ("issue_refund", refund()),
        ("send_password_reset", {}),
        ("send_message", {"channel": "email", "template": "order_update", "order_id": "O-1042"}),
    ):
        await confirm_exact(env, turn, tool, args)
        d = await judge(env, turn, tool, args)
        assert isinstance(d, Reject) and d.reason == "action_not_enabled", (tool, d)
    for tool, args in (
        ("get_order", {"order_id": "O-1042"}),
        ("list_orders", {}),
        ("get_account", {}),
        ("search_knowledge", {"query": "refund"}),
        ("finish", {"resolution": "r", "action_ids": [], "sources": []}),
    ):
        assert isinstance(await judge(env, turn, tool, args), Execute), tool


async def test_actions_stage_allows_only_enabled_tools(db: Database) -> None:
    env = await make_env(db, policy=_stage_policy("actions", ["send_message", "create_return"]))
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    d = await judge(env, turn, "issue_refund", refund())
    assert isinstance(d, Reject) and d.reason == "action_not_enabled"
    d = await judge(env, turn, "send_password_reset", {})
    assert isinstance(d, Reject) and d.reason == "action_not_enabled"
    ok = await judge(env, turn, "send_message", {"channel": "email", "template": "order_update", "order_id": "O-1042"})
    assert isinstance(ok, NeedsConfirmation)


async def test_stage_is_per_channel_and_principal_kind(db: Database) -> None:
    """The same customer is in `reads` on email and `full` on the API; reps in `assist` confirm everything."""
    policy = policy_with(rollout={"channels": {"email": {"customer": "reads"}}})
    env = await make_env(db, policy=policy)
    email = await gate_turn(env, C7, channel="email")
    api = await gate_turn(env, C7, channel="api")
    for turn in (email, api):
        await retrieve(turn, EVIDENCE)
    assert isinstance(await judge(env, email, "issue_refund", refund()), Reject)
    assert isinstance(await judge(env, api, "issue_refund", refund()), NeedsConfirmation)
    rep = await gate_turn(env, REP, channel="slack")
    assert policy.stage("slack", "rep") == "assist"
    assert isinstance(await judge(env, rep, "create_reorder", {"order_id": "O-1042"}), NeedsConfirmation)


async def test_rollout_stage_is_checked_before_business_rules(db: Database) -> None:
    env = await make_env(db, policy=_stage_policy("reads"))
    turn = await gate_turn(env, C7)
    d = await judge(env, turn, "issue_refund", refund("O-1050"))
    assert isinstance(d, Reject) and d.reason == "action_not_enabled"


# -- the confirmation gate (C6) ------------------------------------------------------------------


async def test_action_needs_confirmation_of_exactly_these_arguments(env: Env) -> None:
    """A confirmation of other arguments, by another principal, in another conversation, declined,
    pending or already consumed does not count."""
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    args = refund(amount=2000)
    assert isinstance(await judge(env, turn, "issue_refund", args), NeedsConfirmation)
    await confirm_exact(env, turn, "issue_refund", refund(amount=1999))
    assert isinstance(await judge(env, turn, "issue_refund", args), NeedsConfirmation)
    await confirm_exact(env, turn, "issue_refund", {**args, "reason_code": "defective"})
    assert isinstance(await judge(env, turn, "issue_refund", args), NeedsConfirmation)
    other_conv = await gate_turn(env, C7)
    await confirm_exact(env, other_conv, "issue_refund", args)
    assert isinstance(await judge(env, turn, "issue_refund", args), NeedsConfirmation)
    # staff in the same conversation: the rep's confirmation is not the customer's
    rep_turn = await env.runtime.turn(turn.conversation, env.runtime.acting_principal(turn.conversation, REP))
    await confirm_exact(env, rep_turn, "issue_refund", args)
    assert isinstance(await judge(env, turn, "issue_refund", args), NeedsConfirmation)
    # a pending (unanswered) or declined one does not count
    from agent import gates
    from agent.decisions import NeedsConfirmation as Asked

    pending = (
        await gates.request_confirmation(
            turn, proposed("issue_refund", args), "p", Asked(summary="s", target="order:O-1042", key=None)
        )
    ).confirmation
    assert isinstance(await judge(env, turn, "issue_refund", args), NeedsConfirmation)
    await env.services.confirmations.transition(
        pending.id, expected_version=pending.version, from_status="pending", to_status="declined", at=env.clock()
    )
    assert isinstance(await judge(env, turn, "issue_refund", args), NeedsConfirmation)
    # exactly these arguments, in any key order
    cid = await confirm_exact(env, turn, "issue_refund", dict(reversed(list(args.items()))))
    d = await judge(env, turn, "issue_refund", args)
    assert isinstance(d, Execute) and d.key
    await env.services.confirmations.transition(
        cid, expected_version=2, from_status="confirmed", to_status="consumed", at=env.clock()
    )
    assert isinstance(await judge(env, turn, "issue_refund", args), NeedsConfirmation)


async def test_confirmed_action_executes_once_and_consumes_the_confirmation(env: Env) -> None:
    """Through the turn: confirmed → executed → the confirmation is consumed; the next identical call
    needs a new confirmation (or is intercepted within the window)."""
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    args = refund(amount=2000)
    cid = await confirm_exact(env, turn, "issue_refund", args)
    result, is_error, outcome, _ = await steps.handle(turn, {"id": "tu1", "name": "issue_refund", "input": args}, "p1")
    assert not is_error and result["refund_id"].startswith("R-") and outcome.decision == "execute"
    conf = await env.services.confirmations.get(cid)
    assert conf is not None and conf.status == "consumed"
    turn.facts.step += DEDUP_SKIP
    assert isinstance(await judge(env, turn, "issue_refund", args), NeedsConfirmation)
    assert len((await store_state(env.db))["refunds"]) == 1


DEDUP_SKIP = 10


# -- approval routing (C7) -----------------------------------------------------------------------


async def test_over_the_ceiling_needs_a_supervisor_after_confirmation(env: Env) -> None:
    """Confirmation comes first; then an amount over the principal's ceiling is NeedsApproval."""
    policy = load_policy()
    ceiling = policy.ceiling("customer", "USD")
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    at, over = refund(amount=ceiling), refund(amount=ceiling + 1)
    assert isinstance(await judge(env, turn, "issue_refund", over), NeedsConfirmation)
    for args in (at, over):
        await confirm_exact(env, turn, "issue_refund", args)
    assert isinstance(await judge(env, turn, "issue_refund", at), Execute)
    d = await judge(env, turn, "issue_refund", over)
    assert isinstance(d, NeedsApproval)
    assert (d.required_role, d.approvals_required, d.reason) == ("supervisor", 1, "over_ceiling")
    assert d.key == f"refund:O-1042:{ceiling + 1}:USD:-"


async def test_ceiling_depends_on_the_principal_kind(env: Env) -> None:
    """15000 USD: over a customer's ceiling, under a rep's, in assist mode on the same account."""
    args = refund(amount=15000)
    for principal, expected in ((C7, NeedsApproval), (REP, Execute), (SUP, Execute)):
        turn = await gate_turn(env, principal)
        await retrieve(turn, EVIDENCE)
        await confirm_exact(env, turn, "issue_refund", args)
        assert isinstance(await judge(env, turn, "issue_refund", args), expected), principal


async def test_above_the_dual_threshold_two_supervisors_must_approve(env: Env) -> None:
    policy = load_policy()
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    args = refund("O-1048", policy.dual_threshold("USD") + 1)
    await confirm_exact(env, turn, "issue_refund", args)
    d = await judge(env, turn, "issue_refund", args)
    assert isinstance(d, NeedsApproval) and d.approvals_required == 2
    just_under = refund("O-1048", policy.dual_threshold("USD"))
    await confirm_exact(env, turn, "issue_refund", just_under)
    d = await judge(env, turn, "issue_refund", just_under)
    assert isinstance(d, NeedsApproval) and d.approvals_required == 1


async def test_tier_three_contact_change_always_needs_approval(env: Env) -> None:
    """update_contact_details (tier 3) needs a supervisor even for a supervisor, whatever the amount."""
    for principal in (REP, SUP):
        turn = await gate_turn(env, principal)
        await retrieve(turn, CONTACT_EVIDENCE)
        args = {"phone": "+14155550199", "evidence": [CONTACT_EVIDENCE]}
        assert isinstance(await judge(env, turn, "update_contact_details", args), NeedsConfirmation)
        await confirm_exact(env, turn, "update_contact_details", args)
        d = await judge(env, turn, "update_contact_details", args)
        assert isinstance(d, NeedsApproval), principal
        assert (d.reason, d.required_role, d.approvals_required) == ("risk_tier", "supervisor", 1)
        assert d.key and d.key.startswith("contact:C-7:")


async def test_an_approved_approval_executes_only_if_it_still_covers_the_verdict(env: Env) -> None:
    """Approved with one approver: executes; if the verdict now needs two, a new approval is needed."""
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    args = refund("O-1048", 60000)
    await confirm_exact(env, turn, "issue_refund", args)
    d = await judge(env, turn, "issue_refund", args)
    assert isinstance(d, NeedsApproval) and d.approvals_required == 1
    _, _, _ = await steps.act(turn, d, proposed("issue_refund", args), "p1", steps.tool_context(turn))
    approval = await env.services.approvals.get(turn.pending[-1].id)
    assert approval is not None and approval.status == "pending"
    from dataclasses import replace

    approved = replace(approval, status="approved")
    assert isinstance(await judge(env, turn, "issue_refund", args, approval=approved), Execute)
    assert isinstance(await judge(env, turn, "issue_refund", args, approval=approval), NeedsApproval)
    # Meanwhile 50000 more was refunded today: the aggregate is now above the dual threshold.
    await env.services.backend.issue_refund(
        "C-7", "O-1049", amount_minor=25000, currency="USD", reason_code="damaged", return_id=None, idempotency_key="k1"
    )
    await env.services.backend.issue_refund(
        "C-7", "O-1042", amount_minor=18900, currency="USD", reason_code="damaged", return_id=None, idempotency_key="k2"
    )
    d = await judge(env, turn, "issue_refund", args, approval=approved)
    assert isinstance(d, NeedsApproval) and d.approvals_required == 2


# -- the idempotency key (C9) --------------------------------------------------------------------


async def _key(env: Env, turn: Any, tool: str, args: dict[str, Any]) -> str:
    await confirm_exact(env, turn, tool, args)
    d = await judge(env, turn, tool, args)
    assert isinstance(d, Execute | NeedsApproval), d
    assert d.key is not None
    return d.key


async def test_refund_key_is_the_operation_not_the_words_around_it(env: Env) -> None:
    """Same order + amount + currency (+ return) → same key, whatever the reason, evidence or key order."""
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE, "refund-policy@7#damaged")
    base = refund(amount=2000)
    k = await _key(env, turn, "issue_refund", base)
    assert k == "refund:O-1042:2000:USD:-"
    assert await _key(env, turn, "issue_refund", {**base, "reason_code": "goodwill"}) == k
    assert await _key(env, turn, "issue_refund", {**base, "evidence": ["refund-policy@7#damaged"]}) == k
    assert await _key(env, turn, "issue_refund", dict(sorted(base.items()))) == k
    assert await _key(env, turn, "issue_refund", refund(amount=2001)) != k
    assert await _key(env, turn, "issue_refund", refund("O-1049", 2000)) != k


async def test_key_is_not_derived_from_the_session(env: Env) -> None:
    """Two conversations, a customer and a rep on the same account: one operation, one key."""
    keys = set()
    for principal in (C7, C7, REP, SUP):
        turn = await gate_turn(env, principal)
        await retrieve(turn, EVIDENCE, CANCEL_EVIDENCE)
        keys.add(
            (
                await _key(env, turn, "issue_refund", refund(amount=2000)),
                await _key(
                    env,
                    turn,
                    "cancel_order",
                    {"order_id": "O-1044", "reason_code": "customer_request", "evidence": [CANCEL_EVIDENCE]},
                ),
                await _key(
                    env, turn, "send_message", {"channel": "email", "template": "order_update", "order_id": "O-1042"}
                ),
            )
        )
    assert len(keys) == 1
    ((refund_key, cancel_key, message_key),) = keys
    assert "conv_" not in refund_key + cancel_key + message_key and "run_" not in message_key
    assert cancel_key == "cancel:O-1044"


async def test_message_key_is_template_recipient_and_day(env: Env) -> None:
    turn = await gate_turn(env, C7)
    a = {"channel": "email", "template": "order_update", "order_id": "O-1042"}
    k1 = await _key(env, turn, "send_message", a)
    assert "C-7" in k1 and "order_update" in k1
    assert await _key(env, turn, "send_message", {**a, "channel": "sms"}) != k1
    assert await _key(env, turn, "send_message", {**a, "template": "shipping_delay", "order_id": "O-1044"}) != k1
    env.clock.advance(timedelta(days=1))
    turn = await gate_turn(env, C7)
    assert await _key(env, turn, "send_message", a) != k1


async def test_other_keys_normalise_their_operation(env: Env) -> None:
    """Return items in any order, an email in any case, an address with stray spaces: one key each."""
    turn = await gate_turn(env, REP)
    await retrieve(turn, CONTACT_EVIDENCE)
    r1 = {"order_id": "O-1042", "items": [{"sku": "BOOT-W8", "qty": 1}], "reason_code": "damaged"}
    assert await _key(env, turn, "create_return", r1) == await _key(
        env, turn, "create_return", {**r1, "reason_code": "wrong_size"}
    )
    c1 = {"email": "New.Address@Example.com", "evidence": [CONTACT_EVIDENCE]}
    c2 = {"email": "new.address@example.com", "evidence": [CONTACT_EVIDENCE]}
    assert await _key(env, turn, "update_contact_details", c1) == await _key(env, turn, "update_contact_details", c2)
    addr = {"line1": "9  Elm St", "city": "Springfield", "postal_code": "12345", "country": "US"}
    a1 = await _key(env, turn, "update_shipping_address", {"order_id": "O-1044", "address": addr})
    a2 = await _key(
        env, turn, "update_shipping_address", {"order_id": "O-1044", "address": {**addr, "line1": "9 Elm St"}}
    )
    assert a1 == a2


async def test_reads_and_runtime_tools_carry_no_key(env: Env) -> None:
    turn = await gate_turn(env, C7, groups=LOADABLE_GROUPS)
    for tool, args in (
        ("get_order", {"order_id": "O-1042"}),
        ("add_case_note", {"note": "n"}),
        ("load_tools", {"group": "billing"}),
    ):
        d = await judge(env, turn, tool, args)
        assert isinstance(d, Execute) and d.key is None


@pytest.mark.parametrize("threshold", [None, 2000])
async def test_cancelling_a_paid_order_is_not_a_refund(db: Database, threshold: int | None) -> None:
    """Cancelling a paid, unshipped order gives its captured money back but is not routed like a
    refund: by default the customer's confirmation alone cancels it, far above the refund ceiling;
    a retailer who sets a cancellation threshold in the policy gets a supervisor above it."""
    from agent.llm.testing import ScriptedModel, text_block, tool_use_block
    from tests.support import C7, seeded

    model = ScriptedModel([])
    policy = policy_with(cancellations={"approval_above": {"USD": threshold}}) if threshold else None
    h = await seeded(db, model, policy=policy)
    store = h.services.backend
    paid = [o for o in await store.list_orders("C-7") if o.status == "PAID"]
    assert paid, "the demo dataset gives C-7 a paid order (O-1044)"
    order = max(paid, key=lambda o: o.total_minor)
    refundable = await store.refundable_minor("C-7", order.id)
    assert refundable and refundable > h.services.policy.ceiling("customer", order.currency)
    hits = await h.services.knowledge.search("cancel order", limit=3)
    assert hits
    args = {"order_id": order.id, "reason_code": "customer_request", "evidence": [hits[0].evidence_id]}
    model._queue.extend(
        [
            [tool_use_block("search_knowledge", {"query": "cancel order"})],
            [tool_use_block("load_tools", {"group": "orders"})],
            [tool_use_block("cancel_order", args)],
            [text_block("Please confirm the cancellation.")],
            [text_block("Done.")],
        ]
    )
    first = await h.runtime.chat(principal=C7, channel="api", message="please cancel my order")
    assert [p.kind for p in first.pending] == ["confirmation"], first
    confirmed = await h.runtime.confirm(first.pending[0].id, actor=C7, accept=True)
    if threshold is None:
        assert confirmed.approval is None and confirmed.result["status"] == "CANCELLED"
        assert (await store.get_order("C-7", order.id)).status == "CANCELLED"
        assert await store.refundable_minor("C-7", order.id) == 0
        return
    assert confirmed.approval is not None and confirmed.approval.status == "pending"
    assert confirmed.approval.amount_minor == refundable
    assert confirmed.approval.routing == {
        "reason": "cancellation_over_threshold",
        "ceiling_minor": threshold,
        "aggregate_minor": refundable,
        "approvals_required": 1,
    }
    assert (await store.get_order("C-7", order.id)).status == "PAID"
    assert await store.refundable_minor("C-7", order.id) == refundable
