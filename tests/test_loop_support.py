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
from agent.policy import Policy, load_policy
from agent.runtime import Runtime
from storage.db import Database
from storage.models import ApprovalRow, AuditEventRow, CaseNoteRow, ToolExecutionRow
from storage.store_models import StoreRefundRow
from tests.fakes.anthropic_api import validate as validate_anthropic
from tests.support import Clock, Harness
from tools.context import Principal

#: Below the customer's ceiling (USD 50.00): needs the customer's confirmation only.
SMALL_REFUND = {"order_id": "O-1044", "amount_minor": 3000, "currency": "USD", "reason_code": "damaged",
                "evidence": ["refund-policy@7#window"]}
#: Above the customer's ceiling: confirmation, then one supervisor's approval.
BIG_REFUND = {"order_id": "O-1042", "amount_minor": 18900, "currency": "USD", "reason_code": "damaged",
              "evidence": ["refund-policy@7#window"]}
SEARCH = {"query": "refund window"}


def policy_with(**changes: Any) -> Policy:
    """The bundled policy with top-level fields replaced (e.g. a lower dual threshold)."""
    return load_policy().model_copy(update=changes)


def dual_policy(threshold_minor: int = 10000, version: str = "test-dual") -> Policy:
    """Two distinct supervisors above ``threshold_minor`` USD."""
    return policy_with(dual_approval_above={"USD": threshold_minor, "EUR": threshold_minor, "GBP": threshold_minor},
                       version=version)


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


async def assert_history_valid(rt: Runtime, conversation_id: str, principal: Principal,
                               *, then_user: bool = True) -> dict[str, Any]:
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


__all__ = ["BIG_REFUND", "SEARCH", "SMALL_REFUND", "Harness", "advance", "approvals_of", "assert_history_valid",
           "audit_kinds", "case_notes", "count", "dual_policy", "ledger_rows", "next_request_body", "policy_with",
           "roles", "store_refunds", "tool_names"]
