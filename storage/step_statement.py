"""A step's write as one statement on PostgreSQL: one round trip, not one per table.

An agent step writes the conversation's next seq, its messages, its proposals (decided),
the run, the model's token usage and the audit events describing them
(:func:`storage.steps.write_step`). On PostgreSQL each statement is a round trip to the
server; here they are the data-modifying CTEs of one ``SELECT``::

    WITH conv AS (UPDATE conversations … RETURNING next_seq),
         msgs AS (INSERT INTO messages … SELECT conv.next_seq - n + i, … FROM conv),
         props AS (INSERT INTO proposals … VALUES …),
         run AS (UPDATE runs … RETURNING id),
         usage AS (INSERT INTO token_usage … VALUES …),
         moved AS (UPDATE audit_head … WHERE seq = :cached AND hash = :cached RETURNING id),
         events AS (INSERT INTO audit_events … SELECT … FROM moved … RETURNING seq)
    SELECT (SELECT next_seq FROM conv), (SELECT count(*) FROM events)

The sub-statements touch different tables and share one snapshot; each row inserted refers
only to rows that exist before the statement (the conversation, the run). The audit part is
:mod:`storage.audit`'s one-statement append, the head guarded against the process's cached
one: when another writer moved the head first, ``events`` inserts nothing, the count says so
and the events are appended the locked way in the same transaction. Only the common shape is
built here (:func:`fits`): a step that also moves a confirmation, records the outcome of an
earlier proposal, opens confirmations or queues jobs takes the statement-per-table path.
Statements are built once per shape and run prepared (:mod:`storage.fastsql`).
``tests/test_step_statement.py`` compares what the two paths store.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Table, bindparam, func, insert, literal, select, union_all, update

from storage.audit import (
    ONE_STATEMENT_MAX,
    append_audit_sync,
    append_params,
    chain_rows,
    inserted_if_moved,
    moved_head,
    partition_of,
)
from storage.db import WriteContext
from storage.fastsql import prepared
from storage.holders import process_id
from storage.models import ConversationRow, MessageRow, ProposalRow, RunRow, TokenUsageRow

if TYPE_CHECKING:
    from datetime import datetime

    from storage.steps import StepWrite

_CONV: Table = ConversationRow.__table__  # type: ignore[assignment]
_MSG: Table = MessageRow.__table__  # type: ignore[assignment]
_PROP: Table = ProposalRow.__table__  # type: ignore[assignment]
_RUN: Table = RunRow.__table__  # type: ignore[assignment]
_USAGE: Table = TokenUsageRow.__table__  # type: ignore[assignment]

_MSG_COLUMNS = ("role", "content", "event_key")
_PROP_COLUMNS = (
    "id", "tool_use_id", "origin", "tool", "arguments", "args_hash", "principal", "step", "policy_version",
    "decision", "reason", "result", "is_error", "idempotency_key",
)  # fmt: skip
_USAGE_COLUMNS = ("model", "input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens")
#: A proposal the step inserts for the gate to decide later (as the statement-per-table path stores it).
_UNDECIDED = SimpleNamespace(decision=None, reason=None, result=None, is_error=False, idempotency_key=None)
#: At most this many messages or proposals in one statement (beyond: a statement per table).
_MAX = 8


def fits(step: StepWrite) -> bool:
    """Whether ``step`` is of the shape one statement writes: messages, proposals (all of them
    decided in the step itself, or none), the run, usage and audit events, and nothing else."""
    decided = {o.id for o in step.outcomes}
    return (
        step.confirmation_move is None
        and step.confirmation_outcome is None
        and not step.jobs
        and not step.confirmations
        and step.expect_seq is None
        and decided in (set(), {p.id for p in step.new_proposals})
        and len(step.messages) <= _MAX
        and len(step.new_proposals) <= _MAX
        and (step.run_id is not None or not (step.new_proposals or step.usage))
    )


def write_in_one(conn: Connection, ctx: WriteContext, step: StepWrite, now: datetime) -> int | None:
    """Write ``step`` (it :func:`fits`) in one statement; the conversation's next seq (``None``:
    no conversation row was updated). The audit events go in the same statement when this process
    holds their partition's head, else (or when the head had moved) the locked way after it."""
    params: dict[str, Any] = {
        "c_id": step.conversation_id,
        "r_id": step.run_id,
        "c_now": now,
        "c_n": len(step.messages),
    }
    conv_keys = _conversation_params(step, params)
    for i, (role, content) in enumerate(step.messages):
        event_key = step.event_key if i == 0 else None
        params |= {f"m{i}_role": role, f"m{i}_content": content, f"m{i}_event_key": event_key}
    _proposal_params(step, params)
    run_keys = _run_params(step, params) if step.run_id is not None else frozenset()
    if run_keys:
        params["r_now"] = now
    usage = step.usage is not None and step.run_id is not None
    if usage:
        params |= {f"u_{c}": getattr(step.usage, c) for c in _USAGE_COLUMNS}
    cache, rows, part = ctx.audit_head, [], 0
    if step.audit and len(step.audit) <= ONE_STATEMENT_MAX and cache is not None:
        part = partition_of(step.audit[0].run_id)
        cached = cache.get(str(part))
        if cached:
            rows = chain_rows(part, cached[0], cached[1], step.audit)
            params |= append_params(part, cached, rows)
    shape = (conv_keys, len(step.messages), len(step.new_proposals), run_keys, usage, len(rows))
    result = conn.execute(step_statement(*shape), params).one()
    if result.next_seq is None:
        return None  # the caller says what that means (storage.steps.ConcurrentTurn)
    if step.audit:
        if rows and result.appended == len(rows):
            cache[str(part)] = (rows[-1]["pseq"], rows[-1]["hash"])  # type: ignore[index]
        else:
            if rows:
                cache.pop(str(part), None)  # type: ignore[union-attr]  # stale: the locked way, at once
            append_audit_sync(conn, step.audit, cache)
        ctx.audit_events.extend(step.audit)
    return int(result.next_seq)


def _conversation_params(step: StepWrite, params: dict[str, Any]) -> frozenset[str]:
    keys = set()
    if step.loaded_groups is not None:
        params["c_groups"] = step.loaded_groups
        keys.add("c_groups")
    if step.conversation_status is not None:
        params["c_status"] = step.conversation_status
        keys.add("c_status")
    return frozenset(keys)


def _proposal_params(step: StepWrite, params: dict[str, Any]) -> None:
    decided = {o.id: o for o in step.outcomes}
    for i, p in enumerate(step.new_proposals):
        o = decided.get(p.id, _UNDECIDED)
        values = {
            "id": p.id, "tool_use_id": p.tool_use_id, "origin": p.origin, "tool": p.tool, "arguments": p.arguments,
            "args_hash": p.args_hash, "principal": p.principal, "step": p.step, "policy_version": p.policy_version,
            "decision": o.decision, "reason": o.reason, "result": o.result, "is_error": o.is_error,
            "idempotency_key": o.idempotency_key,
        }  # fmt: skip
        params |= {f"p{i}_{c}": v for c, v in values.items()}


def _run_params(step: StepWrite, params: dict[str, Any]) -> frozenset[str]:
    """The run's columns the step sets (as :func:`storage.steps.write_step` sets them)."""
    keys = set()
    if step.run_status:
        params |= {"r_status": step.run_status, "r_holder": process_id() if step.run_status == "running" else None}
        keys.add("r_status")
    if step.run_steps_delta:
        params["r_steps"] = step.run_steps_delta
        keys.add("r_steps")
    if step.run_state is not None:
        params["r_state"] = step.run_state
        keys.add("r_state")
    if step.pending_ids is not None:
        params["r_pending"] = step.pending_ids
        keys.add("r_pending")
    return frozenset(keys)


@functools.cache
def step_statement(
    conv_keys: frozenset[str], messages: int, proposals: int, run_keys: frozenset[str], usage: bool, events: int
) -> Any:
    """The one statement of a step of this shape (see the module docstring)."""
    conv = conversation_update(conv_keys).cte("conv")
    ctes: list[Any] = [conv]
    if messages:
        rows = [
            select(
                bindparam("c_id", type_=_MSG.c.conversation_id.type),
                conv.c.next_seq - bindparam("c_n") + literal(i),
                *(bindparam(f"m{i}_{c}", type_=_MSG.c[c].type) for c in _MSG_COLUMNS),
                bindparam("r_id", type_=_MSG.c.run_id.type),
                bindparam("c_now", type_=_MSG.c.created_at.type),
            ).select_from(conv)
            for i in range(messages)
        ]
        cols = ["conversation_id", "seq", *_MSG_COLUMNS, "run_id", "created_at"]
        ctes.append(insert(_MSG).from_select(cols, rows[0] if messages == 1 else union_all(*rows)).cte("msgs"))
    if proposals:
        common = {"run_id": "r_id", "conversation_id": "c_id", "created_at": "c_now"}
        values = [
            {c: bindparam(n, type_=_PROP.c[c].type) for c, n in common.items()}
            | {c: bindparam(f"p{i}_{c}", type_=_PROP.c[c].type) for c in _PROP_COLUMNS}
            for i in range(proposals)
        ]
        ctes.append(insert(_PROP).values(values).cte("props"))
    if run_keys:
        ctes.append(run_update(run_keys).returning(_RUN.c.id).cte("run"))
    if usage:
        common = {"conversation_id": "c_id", "run_id": "r_id", "created_at": "c_now"}
        row = {c: bindparam(n, type_=_USAGE.c[c].type) for c, n in common.items()}
        row |= {c: bindparam(f"u_{c}", type_=_USAGE.c[c].type) for c in _USAGE_COLUMNS}
        ctes.append(insert(_USAGE).values(row).cte("usage"))
    appended: Any = literal(0)
    if events:
        moved = moved_head()
        inserted = inserted_if_moved(moved, events).returning(literal(1)).cte("events")
        ctes += [moved, inserted]
        appended = select(func.count()).select_from(inserted).scalar_subquery()
    next_seq = select(conv.c.next_seq).scalar_subquery()
    return prepared(select(next_seq.label("next_seq"), appended.label("appended")).add_cte(*ctes))


def conversation_update(keys: frozenset[str]) -> Any:
    """``UPDATE conversations`` reserving the step's message seqs (``c_n``) and setting the
    columns ``keys`` name (``c_groups``, ``c_status``; ``c_expect``: only at this next seq),
    returning the next seq after them."""
    stmt = update(_CONV).where(_CONV.c.id == bindparam("c_id"))
    if "c_expect" in keys:
        stmt = stmt.where(_CONV.c.next_seq == bindparam("c_expect"))
    values: dict[str, Any] = {"next_seq": _CONV.c.next_seq + bindparam("c_n"), "updated_at": bindparam("c_now")}
    if "c_groups" in keys:
        values["loaded_groups"] = bindparam("c_groups", type_=_CONV.c.loaded_groups.type)
    if "c_status" in keys:
        values["status"] = bindparam("c_status")
    return stmt.values(**values).returning(_CONV.c.next_seq)


def run_update(keys: frozenset[str]) -> Any:
    """``UPDATE runs`` of the columns ``keys`` name (``r_status`` with the holder, ``r_steps``
    added, ``r_state``, ``r_pending``)."""
    values: dict[str, Any] = {"updated_at": bindparam("r_now")}
    if "r_status" in keys:
        values["status"] = bindparam("r_status")
        values["holder"] = bindparam("r_holder")
    if "r_steps" in keys:
        values["steps"] = _RUN.c.steps + bindparam("r_steps")
    if "r_state" in keys:
        values["state"] = bindparam("r_state", type_=_RUN.c.state.type)
    if "r_pending" in keys:
        values["pending_ids"] = bindparam("r_pending", type_=_RUN.c.pending_ids.type)
    return update(_RUN).where(_RUN.c.id == bindparam("r_id")).values(**values)
