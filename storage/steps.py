"""One loop iteration's write: everything a step changes, in one short transaction.

The loop writes a :class:`StepWrite` once or twice per agent step, so this is
plain Core, batched, run through :meth:`Database.write` (one thread hop on
SQLite). Messages, proposals, outcomes, run state, token usage and the audit
events describing them commit together: a crash leaves them consistent.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Table, bindparam, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from storage.audit import AuditEvent, append_audit_sync
from storage.db import WriteContext
from storage.fastsql import prepared
from storage.gates import create_confirmation
from storage.models import ConfirmationRow, ConversationRow, JobRow, MessageRow, ProposalRow, RunRow, TokenUsageRow
from storage.records import NewConfirmation
from storage.step_statement import (
    conversation_params,
    conversation_update,
    fits,
    proposal_values,
    run_params,
    run_update,
    write_in_one,
)

_CONV: Table = ConversationRow.__table__  # type: ignore[assignment]
_MSG: Table = MessageRow.__table__  # type: ignore[assignment]
_PROP: Table = ProposalRow.__table__  # type: ignore[assignment]
_RUN: Table = RunRow.__table__  # type: ignore[assignment]
_USAGE: Table = TokenUsageRow.__table__  # type: ignore[assignment]
_CONF: Table = ConfirmationRow.__table__  # type: ignore[assignment]
_JOBS: Table = JobRow.__table__  # type: ignore[assignment]


@dataclass(frozen=True, kw_only=True)
class NewProposal:
    """A proposal a step inserts."""

    id: str
    tool_use_id: str
    tool: str
    arguments: Any
    args_hash: str
    principal: str
    step: int
    policy_version: str
    #: ``None``: the model's; else what the runtime acted on (``confirmation:cnf_…``).
    origin: str | None = None


@dataclass(frozen=True, kw_only=True)
class ConfirmationMove:
    """A compare-and-set of one confirmation's status inside the step's transaction."""

    id: str
    expected_version: int
    from_status: str
    to_status: str
    at: datetime


@dataclass(frozen=True, kw_only=True)
class NewJob:
    """Background work that must exist exactly when the step commits (insert-if-absent on ``dedup_key``)."""

    kind: str
    payload: dict[str, Any]
    dedup_key: str
    run_after: datetime


@dataclass(frozen=True, kw_only=True)
class ProposalOutcome:
    """The gate's decision on a proposal and what came of it."""

    id: str
    decision: str
    reason: str | None
    result: Any
    is_error: bool
    idempotency_key: str | None = None


@dataclass(frozen=True, kw_only=True)
class UsageWrite:
    """The tokens a step's model call used."""

    model: str
    input_tokens: int
    output_tokens: int
    cache_creation_tokens: int
    cache_read_tokens: int
    #: The group budget the call counts against (``storage.limits.budget_group``).
    principal_group: str | None


@dataclass(kw_only=True)
class StepWrite:
    """Everything one loop iteration changes, committed atomically."""

    conversation_id: str
    run_id: str | None = None
    #: ``(role, content blocks)``: JSON objects, stored as given.
    messages: list[tuple[str, Sequence[Mapping[str, Any]]]] = field(default_factory=list)
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
    #: A runtime event's identity: when the conversation already holds it, the whole step is skipped.
    event_key: str | None = None
    confirmation_move: ConfirmationMove | None = None
    #: ``(confirmation id, outcome)``: what a confirmation led to, recorded with the outcome itself.
    confirmation_outcome: tuple[str, dict[str, Any]] | None = None
    jobs: list[NewJob] = field(default_factory=list)
    #: Confirmations opened by the step, each with its audit events (``storage.gates.create_confirmation``).
    confirmations: list[tuple[NewConfirmation, list[AuditEvent]]] = field(default_factory=list)


class ConcurrentTurn(Exception):
    """Another writer appended to this conversation first."""


class LostRace(Exception):
    """A compare-and-set inside a step found the row moved on; nothing of the step was written."""


def write_step(conn: Connection, ctx: WriteContext, step: StepWrite, now: datetime) -> int | None:
    """Apply ``step``; the conversation's next seq, or ``None`` when ``event_key`` was already there."""
    # Core statements, batched: this runs once or twice per agent step, and
    # the runtime's own cost per step is a design target (bench/overhead.py).
    if step.event_key is not None and event_seen(conn, step.conversation_id, step.event_key):
        return None
    if conn.dialect.name == "postgresql" and fits(step):
        # The step's tables in one statement: one round trip (storage.step_statement).
        seq = write_in_one(conn, ctx, step, now)
        if seq is None:
            raise ConcurrentTurn(f"conversation {step.conversation_id} moved on")
        return seq
    if step.confirmation_move is not None:
        _move_confirmation(conn, step.confirmation_move)
    next_seq = _advance_conversation(conn, step, now)
    if step.messages:
        _insert_messages(conn, step, next_seq - len(step.messages), now)
    outcomes: Sequence[ProposalOutcome] = step.outcomes
    if step.new_proposals:
        outcomes = _insert_proposals(conn, step, now)
    if outcomes:
        _record_outcomes(conn, outcomes)
    if step.run_id is not None:
        _update_run(conn, step, step.run_id, now)
    if step.usage is not None and step.run_id is not None:
        _insert_usage(conn, step, step.usage, step.run_id, now)
    for new, events in step.confirmations:
        create_confirmation(conn, ctx, new, events)
    if step.confirmation_outcome is not None:
        cid, outcome = step.confirmation_outcome
        conn.execute(_SET_CONF_OUTCOME, {"cid": cid, "outcome": outcome})
    for job in step.jobs:
        _insert_job(conn, job, now)
    if step.audit:
        append_audit_sync(conn, step.audit, ctx.audit_head)
        ctx.audit_events.extend(step.audit)
    return next_seq


def event_seen(conn: Connection, conversation_id: str, event_key: str) -> bool:
    """Whether the conversation already holds the message or event ``event_key``."""
    return conn.execute(_EVENT_SEEN, {"c": conversation_id, "k": event_key}).first() is not None


def _advance_conversation(conn: Connection, step: StepWrite, now: datetime) -> int:
    """Reserve the step's message seqs (compare-and-set on ``expect_seq``); the next seq after them."""
    params: dict[str, Any] = {"c_id": step.conversation_id, "c_n": len(step.messages), "c_now": now}
    conversation_params(step, params)
    if step.expect_seq is not None:
        params["c_expect"] = step.expect_seq
    next_seq = conn.execute(_conversation_update(frozenset(params)), params).scalar_one_or_none()
    if next_seq is None:
        raise ConcurrentTurn(f"conversation {step.conversation_id} moved on")
    return int(next_seq)


def _insert_messages(conn: Connection, step: StepWrite, first: int, now: datetime) -> None:
    conn.execute(
        _INSERT_MSG,
        [
            {
                "conversation_id": step.conversation_id,
                "seq": first + i,
                "role": role,
                "content": content,
                "run_id": step.run_id,
                "event_key": step.event_key if i == 0 else None,
                "created_at": now,
            }
            for i, (role, content) in enumerate(step.messages)
        ],
    )


def _insert_proposals(conn: Connection, step: StepWrite, now: datetime) -> Sequence[ProposalOutcome]:
    """Insert the step's new proposals; the outcomes left to record. When the step also
    decides every one of them (a step of reads), each is inserted with its outcome: one
    statement, not an insert and an update."""
    decided = {o.id: o for o in step.outcomes}
    folded = all(p.id in decided for p in step.new_proposals)
    common = {"run_id": step.run_id, "conversation_id": step.conversation_id, "created_at": now}
    rows = [common | proposal_values(p, decided.pop(p.id) if folded else None) for p in step.new_proposals]
    conn.execute(_INSERT_PROP, rows)
    return list(decided.values()) if folded else step.outcomes


def _record_outcomes(conn: Connection, outcomes: Sequence[ProposalOutcome]) -> None:
    conn.execute(
        _UPDATE_OUTCOME,
        [
            {
                "o_id": o.id,
                "o_decision": o.decision,
                "o_reason": o.reason,
                "o_result": o.result,
                "o_is_error": o.is_error,
                "o_key": o.idempotency_key,
            }
            for o in outcomes
        ],
    )


def _update_run(conn: Connection, step: StepWrite, run_id: str, now: datetime) -> None:
    """The run's status, holder, step count, state and pending ids, for those the step sets."""
    run: dict[str, Any] = {"r_id": run_id, "r_now": now}
    if not run_params(step, run):
        return
    conn.execute(_run_update(frozenset(run)), run)


def _insert_usage(conn: Connection, step: StepWrite, u: UsageWrite, run_id: str, now: datetime) -> None:
    conn.execute(
        _INSERT_USAGE,
        {
            "conversation_id": step.conversation_id,
            "run_id": run_id,
            "model": u.model,
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cache_creation_tokens": u.cache_creation_tokens,
            "cache_read_tokens": u.cache_read_tokens,
            "principal_group": u.principal_group,
            "created_at": now,
        },
    )


def _move_confirmation(conn: Connection, m: ConfirmationMove) -> None:
    res = conn.execute(
        update(_CONF)
        .where(_CONF.c.id == m.id, _CONF.c.version == m.expected_version, _CONF.c.status == m.from_status)
        .values(status=m.to_status, version=m.expected_version + 1, decided_at=m.at)
    )
    if res.rowcount != 1:
        raise LostRace(f"confirmation {m.id} is no longer {m.from_status} at version {m.expected_version}")


def _insert_job(conn: Connection, job: NewJob, now: datetime) -> None:
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    conn.execute(
        dialect.insert(_JOBS)
        .values(
            kind=job.kind,
            payload=job.payload,
            dedup_key=job.dedup_key,
            status="queued",
            attempts=0,
            run_after=job.run_after,
            created_at=now,
        )
        .on_conflict_do_nothing(index_elements=["dedup_key"])
    )


# Statements are built once (per shape) and reused: building and coercing Core
# constructs was a third of a step's write cost.
_INSERT_MSG = prepared(insert(_MSG))
_INSERT_PROP = prepared(insert(_PROP))
_INSERT_USAGE = prepared(insert(_USAGE))
_EVENT_SEEN = prepared(
    select(_MSG.c.id).where(_MSG.c.conversation_id == bindparam("c"), _MSG.c.event_key == bindparam("k")).limit(1)
)
_SET_CONF_OUTCOME = prepared(
    update(_CONF).where(_CONF.c.id == bindparam("cid")).values(outcome=bindparam("outcome", type_=_CONF.c.outcome.type))
)
_UPDATE_OUTCOME = prepared(
    update(_PROP)
    .where(_PROP.c.id == bindparam("o_id"))
    .values(
        decision=bindparam("o_decision"),
        reason=bindparam("o_reason"),
        result=bindparam("o_result"),
        is_error=bindparam("o_is_error"),
        idempotency_key=bindparam("o_key"),
    )
)


@functools.cache
def _conversation_update(keys: frozenset[str]) -> Any:
    return prepared(conversation_update(keys))


@functools.cache
def _run_update(keys: frozenset[str]) -> Any:
    return prepared(run_update(keys))
