"""The canonical conversation end to end on the runtime: order lookup, a refund
above the customer's ceiling, confirmation, supervisor approval, resume."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agent.llm.testing import ScriptedModel, text_block, tool_use_block
from storage.db import Database
from storage.locks import LockBusy
from tests.support import C7, SUP_A, last_tool_result, seeded

REFUND = {
    "order_id": "O-1042",
    "amount_minor": 18900,
    "currency": "USD",
    "reason_code": "damaged",
    "evidence": ["refund-policy@7#window"],
}


def script() -> ScriptedModel:
    return ScriptedModel(
        [
            [tool_use_block("get_order", {"order_id": "O-1042"})],
            [tool_use_block("search_knowledge", {"query": "refund window"})],
            [text_block("Checking the policy."), tool_use_block("issue_refund", REFUND)],
            "Your order O-1042 was delivered. Shall I refund $189.00? Please confirm.",
            "Thanks — a supervisor needs to approve this refund; it is pending.",
            "Good news: your refund of $189.00 was approved and issued.",
        ]
    )


async def test_canonical_refund_flow_confirm_approve_resume(db: Database) -> None:
    """Lookup → CONFIRMATION_REQUIRED → confirm → PENDING_APPROVAL → approve → REFUNDED → follow-up."""
    model = script()
    h = await seeded(db, model)
    rt = h.runtime
    first = await rt.chat(principal=C7, channel="api", message="Where is my order O-1042? Also refund it.")
    assert first.outcome == "answered"
    assert [p.kind for p in first.pending] == ["confirmation"]
    order = last_tool_result(model.requests[1])
    assert order["status"] == "DELIVERED"
    search = last_tool_result(model.requests[2])
    assert "refund-policy@7#window" in json.dumps(search)

    confirmed = await rt.confirm(first.pending[0].id, actor=C7, accept=True)
    assert confirmed.confirmation.status == "confirmed"
    assert confirmed.approval is not None and confirmed.approval.status == "pending"
    assert confirmed.result is None
    approval = confirmed.approval
    assert approval.approvals_required == 1
    assert approval.provenance["order_id"] == "system_of_record"
    assert approval.provenance["amount_minor"] == "system_of_record"
    assert await h.services.backend.refundable_minor("C-7", "O-1042") == 18900

    decided = await rt.decide(approval.id, expected_version=approval.version, decision="approve", actor=SUP_A)
    assert decided.approval.status == "approved"
    assert decided.result["status"] == "REFUNDED"
    assert await h.services.backend.refundable_minor("C-7", "O-1042") == 0

    follow = await rt.resume(approval.id)
    assert follow is not None and "approved" in follow.reply
    assert h.notifier.of("follow_up")
    assert await rt.resume(approval.id) is None  # a re-run job changes nothing
    verdict = await h.services.audit.verify()
    assert verdict.ok, verdict
    kinds = [e.kind for e in await h.services.audit.list(run_id=approval.run_id, limit=500)]
    for k in (
        "proposal",
        "gate.confirmation",
        "confirmation.confirmed",
        "approval.requested",
        "approval.approved",
        "execution.succeeded",
        "run.resumed",
    ):
        assert k in kinds, k


async def test_the_approval_card_goes_out_after_the_customers_money_lock_is_released(db: Database) -> None:
    """A card can wait seconds for Slack's pace in the approvals channel: the customer's money
    lock is not held meanwhile (it was, and every other action of the customer waited with it)."""
    model = script()
    h = await seeded(db, model)
    rt = h.runtime
    first = await rt.chat(principal=C7, channel="api", message="Where is my order O-1042? Also refund it.")
    lock_free_while_posting: list[bool] = []
    posted = h.notifier.approval_requested

    async def take_the_lock() -> None:
        async with h.services.locks.exclusive(f"money:{C7.customer_id}", wait_s=0.5):
            pass

    async def slow_post(approval: Any) -> None:
        try:
            await asyncio.wait_for(take_the_lock(), timeout=0.5)
            lock_free_while_posting.append(True)
        except (TimeoutError, LockBusy):
            lock_free_while_posting.append(False)
        await posted(approval)

    h.notifier.approval_requested = slow_post  # type: ignore[method-assign]
    confirmed = await rt.confirm(first.pending[0].id, actor=C7, accept=True)
    assert confirmed.approval is not None and confirmed.approval.status == "pending"
    assert lock_free_while_posting == [True]
    assert [a.id for kind, a in h.notifier.events if kind == "approval_requested"] == [confirmed.approval.id]
