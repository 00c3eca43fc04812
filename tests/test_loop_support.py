"""Helpers shared by the loop, gate, resume, audit and migration tests.

This module holds no tests; it lives under a ``test_loop_*`` name so that the
files which own the loop and gate tests can share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select

from agent.llm.anthropic import build_params
from agent.llm.base import ModelRequest
from agent.llm.testing import FunctionModel, text_block, tool_use_block
from agent.policy import Policy, load_policy
from agent.runtime import Runtime
from sandbox.models import StoreRefundRow
from storage.db import Database
from storage.models import ApprovalRow, AuditEventRow, CaseNoteRow, ToolExecutionRow
from storage.records import Approval
from tests.fakes.anthropic_api import validate as validate_anthropic
from tests.support import C7, Clock, Harness
from tools.context import Principal

#: Below the customer's ceiling (USD 50.00): needs the customer's confirmation only.
SMALL_REFUND = {
    "order_id": "O-1044",
    "amount_minor": 3000,
    "currency": "USD",
    "reason_code": "damaged",
    "evidence": ["refund-policy@7#window"],
}
#: Above the customer's ceiling: confirmation, then one supervisor's approval.
BIG_REFUND = {
    "order_id": "O-1042",
    "amount_minor": 18900,
    "currency": "USD",
    "reason_code": "damaged",
    "evidence": ["refund-policy@7#window"],
}
SEARCH = {"query": "refund window"}


def refund_planner(args: dict[str, Any], *, text: str = "Noted.") -> FunctionModel:
    """A stateless planner: search the policy, propose ``args`` once, then answer in text.

    Stateless (it reads the history), so it serves any number of runtimes and turns.
    """

    def plan(request: ModelRequest) -> Any:
        called = {
            b.get("name")
            for m in request.messages
            if m.role == "assistant"
            for b in m.content
            if b.get("type") == "tool_use"
        }
        if "search_knowledge" not in called:
            return [tool_use_block("search_knowledge", SEARCH)]
        if "issue_refund" not in called:
            return [text_block("I'll set up the refund."), tool_use_block("issue_refund", args)]
        return text

    return FunctionModel(plan)


async def open_refund_approval(h: Harness, *, principal: Principal = C7, channel: str = "api") -> Approval:
    """Chat until the refund is proposed, confirm it: returns the pending approval."""
    first = await h.runtime.chat(
        principal=principal, channel=channel, message="My order O-1042 arrived damaged, please refund it."
    )
    [pending] = first.pending
    assert pending.kind == "confirmation", first
    out = await h.runtime.confirm(pending.id, actor=principal, accept=True)
    assert out.approval is not None and out.approval.status == "pending", out
    return out.approval


def policy_with(**changes: Any) -> Policy:
    """The bundled policy with top-level fields replaced (e.g. a lower dual threshold)."""
    return load_policy().model_copy(update=changes)


def dual_policy(threshold_minor: int = 10000, version: str = "test-dual") -> Policy:
    """Two distinct supervisors above ``threshold_minor`` USD."""
    return policy_with(
        dual_approval_above={"USD": threshold_minor, "EUR": threshold_minor, "GBP": threshold_minor}, version=version
    )


async def count(db: Database, column: Any, *where: Any) -> int:
    async with db.sessions() as s:
        return int((await s.execute(select(func.count(column)).where(*where))).scalar_one())


async def ledger_rows(db: Database, key_prefix: str = "refund:") -> int:
    return await count(db, ToolExecutionRow.key, ToolExecutionRow.key.like(f"{key_prefix}%"))


async def store_refunds(db: Database, order_id: str) -> int:
    return await count(db, StoreRefundRow.id, StoreRefundRow.order_id == order_id)


async def audit_kinds(db: Database, *kinds: str) -> int:
    return await count(db, AuditEventRow.seq, AuditEventRow.kind.in_(kinds))


async def case_notes(db: Database, conversation_id: str, kind: str | None = None) -> int:
    where = [CaseNoteRow.conversation_id == conversation_id]
    if kind is not None:
        where.append(CaseNoteRow.kind == kind)
    return await count(db, CaseNoteRow.id, *where)


async def approvals_of(db: Database, conversation_id: str) -> int:
    return await count(db, ApprovalRow.id, ApprovalRow.conversation_id == conversation_id)


async def next_request_body(rt: Runtime, conversation_id: str, principal: Principal) -> dict[str, Any]:
    """The Messages API body the runtime would send next for this conversation."""
    conv = await rt.s.conversations.get(conversation_id)
    assert conv is not None
    turn = await rt.turn(conv, rt.acting_principal(conv, principal))
    return build_params(turn.request(), model="claude-test", max_tokens=1024)


async def assert_history_valid(
    rt: Runtime, conversation_id: str, principal: Principal, *, then_user: bool = True
) -> dict[str, Any]:
    """The stored history, as the next model call would send it, passes the strict fake.

    ``then_user``: append a user message first when the history ends with the
    assistant (the next call follows the user's next message).
    """
    body = await next_request_body(rt, conversation_id, principal)
    if then_user and body["messages"] and body["messages"][-1]["role"] == "assistant":
        body["messages"].append({"role": "user", "content": [{"type": "text", "text": "and now?"}]})
    validate_anthropic(body)
    return body


def advance(clock: Clock, seconds: float) -> None:
    clock.now = clock.now + timedelta(seconds=seconds)


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["name"] for t in body.get("tools", [])]


def roles(messages: Sequence[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in messages]


__all__ = [
    "BIG_REFUND",
    "SEARCH",
    "SMALL_REFUND",
    "Harness",
    "advance",
    "approvals_of",
    "assert_history_valid",
    "audit_kinds",
    "case_notes",
    "count",
    "dual_policy",
    "ledger_rows",
    "next_request_body",
    "open_refund_approval",
    "policy_with",
    "refund_planner",
    "roles",
    "store_refunds",
    "tool_names",
]
