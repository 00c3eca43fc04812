"""One loop iteration's write: everything a step changes, in one short transaction.

The loop writes a :class:`StepWrite` once or twice per agent step, so this is
plain Core, batched, run through :meth:`Database.write` (one thread hop on
SQLite). Messages, proposals, outcomes, run state, token usage and the audit
events describing them commit together: a crash leaves them consistent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Table, bindparam, insert, update

from storage.audit import AuditEvent, append_audit_sync
from storage.db import WriteContext
from storage.models import ConversationRow, MessageRow, ProposalRow, RunRow, TokenUsageRow

_CONV: Table = ConversationRow.__table__  # type: ignore[assignment]
_MSG: Table = MessageRow.__table__  # type: ignore[assignment]
_PROP: Table = ProposalRow.__table__  # type: ignore[assignment]
_RUN: Table = RunRow.__table__  # type: ignore[assignment]
_USAGE: Table = TokenUsageRow.__table__  # type: ignore[assignment]


@dataclass(frozen=True, kw_only=True)
class NewProposal:
    id: str
    tool_use_id: str
    tool: str
    arguments: Any
    args_hash: str
    principal: str
    step: int
    policy_version: str


@dataclass(frozen=True, kw_only=True)
class ProposalOutcome:
    id: str
    decision: str
    reason: str | None
    result: Any
    is_error: bool
    idempotency_key: str | None = None


@dataclass(frozen=True, kw_only=True)
class UsageWrite:
    model: str
    input_tokens: int
    output_tokens: int
    cache_creation_tokens: int
    cache_read_tokens: int


@dataclass(kw_only=True)
class StepWrite:
    """Everything one loop iteration changes, committed atomically."""

    conversation_id: str
    run_id: str | None = None
    messages: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)
    new_proposals: list[NewProposal] = field(default_factory=list)
    outcomes: list[ProposalOutcome] = field(default_factory=list)
    run_status: str | None = None
    run_steps_delta: int = 0
    run_state: dict[str, Any] | None = None
    pending_ids: list[str] | None = None
    loaded_groups: list[str] | None = None
    conversation_status: str | None = None
    usage: UsageWrite | None = None
    audit: list[AuditEvent] = field(default_factory=list)
    #: Expected next seq: a concurrent writer on the same conversation loses (IntegrityError).
    expect_seq: int | None = None


class ConcurrentTurn(Exception):
    """Another writer appended to this conversation first."""




def write_step(conn: Connection, ctx: WriteContext, step: StepWrite, now: datetime) -> int:
    # Core statements, batched: this runs once or twice per agent step, and
    # the runtime's own cost per step is a design target (bench/step_cost.py).
    n = len(step.messages)
    conv_values: dict[str, Any] = {"updated_at": now}
    if step.loaded_groups is not None:
        conv_values["loaded_groups"] = step.loaded_groups
    if step.conversation_status is not None:
        conv_values["status"] = step.conversation_status
    stmt = update(_CONV).where(_CONV.c.id == step.conversation_id)
    if step.expect_seq is not None:
        stmt = stmt.where(_CONV.c.next_seq == step.expect_seq)
    result = conn.execute(
        stmt.values(next_seq=_CONV.c.next_seq + n, **conv_values).returning(_CONV.c.next_seq)
    )
    next_seq = result.scalar_one_or_none()
    if next_seq is None:
        raise ConcurrentTurn(f"conversation {step.conversation_id} moved on")
    first = next_seq - n
    if step.messages:
        conn.execute(insert(_MSG), [
            {"conversation_id": step.conversation_id, "seq": first + i, "role": role,
             "content": content, "run_id": step.run_id, "created_at": now}
            for i, (role, content) in enumerate(step.messages)
        ])
    if step.new_proposals:
        conn.execute(insert(_PROP), [
            {"id": p.id, "run_id": step.run_id, "conversation_id": step.conversation_id,
             "tool_use_id": p.tool_use_id, "tool": p.tool, "arguments": p.arguments,
             "args_hash": p.args_hash, "principal": p.principal, "step": p.step,
             "policy_version": p.policy_version, "created_at": now, "is_error": False}
            for p in step.new_proposals
        ])
    if step.outcomes:
        conn.execute(
            update(_PROP).where(_PROP.c.id == bindparam("o_id")).values(
                decision=bindparam("o_decision"), reason=bindparam("o_reason"),
                result=bindparam("o_result"), is_error=bindparam("o_is_error"),
                idempotency_key=bindparam("o_key")),
            [{"o_id": o.id, "o_decision": o.decision, "o_reason": o.reason, "o_result": o.result,
              "o_is_error": o.is_error, "o_key": o.idempotency_key} for o in step.outcomes],
        )
    if step.run_id is not None and (
        step.run_status or step.run_steps_delta or step.run_state is not None or step.pending_ids is not None
    ):
        values: dict[str, Any] = {"updated_at": now}
        if step.run_status:
            values["status"] = step.run_status
        if step.run_steps_delta:
            values["steps"] = _RUN.c.steps + step.run_steps_delta
        if step.run_state is not None:
            values["state"] = step.run_state
        if step.pending_ids is not None:
            values["pending_ids"] = step.pending_ids
        conn.execute(update(_RUN).where(_RUN.c.id == step.run_id).values(**values))
    if step.usage is not None and step.run_id is not None:
        u = step.usage
        conn.execute(insert(_USAGE).values(
            conversation_id=step.conversation_id, run_id=step.run_id, model=u.model,
            input_tokens=u.input_tokens, output_tokens=u.output_tokens,
            cache_creation_tokens=u.cache_creation_tokens, cache_read_tokens=u.cache_read_tokens,
            created_at=now))
    if step.audit:
        append_audit_sync(conn, step.audit, ctx.audit_head)
        ctx.audit_events.extend(step.audit)
    return next_seq
