"""A step's write as one statement on PostgreSQL: one round trip, not one per table.

An agent step writes the conversation's next seq, its messages, its proposals, the run, the
model's token usage and the audit events describing them (:func:`storage.steps.write_step`).
On PostgreSQL each statement is a round trip to the server; here they are the data-modifying
CTEs of one ``SELECT``::

    WITH moved AS (UPDATE audit_head … WHERE seq = :cached AND hash = :cached RETURNING id),
         conv AS (UPDATE conversations … WHERE … AND EXISTS (SELECT FROM moved) RETURNING next_seq),
         msgs AS (INSERT INTO messages … SELECT conv.next_seq - n + i, … FROM conv),
         props AS (INSERT INTO proposals … SELECT … FROM conv),
         run AS (UPDATE runs … WHERE … AND EXISTS (SELECT FROM conv)),
         usage AS (INSERT INTO token_usage … SELECT … FROM conv),
         events AS (INSERT INTO audit_events … SELECT … FROM conv … RETURNING 1)
    SELECT (SELECT next_seq FROM conv), (SELECT count(*) FROM events)

The sub-statements touch different tables and share one snapshot; each row inserted refers
only to rows that exist before the statement. Everything hangs on ``moved``, the partition's
head guarded against the process's cached one (:mod:`storage.audit`): when another writer
moved it first, the statement writes nothing at all. So it needs no transaction:
``ConversationRepo.commit`` runs it alone in autocommit (``Database.write_statement``: no
``BEGIN``/``COMMIT``, one round trip in all), and when the head was not this process's it
writes the step in a transaction instead — the statement without the audit part, then the
events appended the locked way. A step without audit events is the same statement without
``moved``. Only the common shape is built here (:func:`fits`): a step that also moves a
confirmation, records the outcome of an earlier proposal, opens confirmations or queues jobs
takes the statement-per-table path. Statements are built once per shape and run prepared
(:mod:`storage.fastsql`). ``tests/test_step_statement.py`` compares what the paths store.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Table, bindparam, func, insert, literal, select, union_all, update

from storage.audit import (
    append_audit_sync,
    append_params,
    cached_head,
    chain_rows,
    inserted_if_moved,
    moved_head,
    remember_head,
)
from storage.db import WriteContext
from storage.fastsql import prepared
from storage.holders import process_id
from storage.models import ConversationRow, MessageRow, ProposalRow, RunRow, TokenUsageRow

if TYPE_CHECKING:
    from datetime import datetime

    from storage.steps import NewProposal, ProposalOutcome, StepWrite

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
_USAGE_COLUMNS = (
    "model",
    "input_tokens",
    "output_tokens",
    "cache_creation_tokens",
    "cache_read_tokens",
    "principal_group",
)
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


class HeadMoved(Exception):
    """The step could not be written in one statement (the audit partition's head is not
    this process's, or another writer moved it first): nothing was written."""


def write_in_one(
    conn: Connection, ctx: WriteContext, step: StepWrite, now: datetime, *, single: bool = False
) -> int | None:
    """Write ``step`` (it :func:`fits`); the conversation's next seq (``None``: no conversation
    row was updated, nothing written).

    The step's audit events go in the statement when this process holds their partition's
    head; the statement then writes everything or, when another writer moved that head first,
    nothing. Inside a transaction the step is then written without them and they are appended
    the locked way after it. With ``single`` (one statement in autocommit, see
    ``Database.write_statement``) :class:`HeadMoved` is raised instead, before or after the
    statement, having written nothing: write it in a transaction."""
    params, shape = _step_params(step, now)
    cache, rows = ctx.audit_head, []
    held = cached_head(step.audit, cache)
    if single and step.audit and not held:
        raise HeadMoved(step.conversation_id)
    if held:
        part, cached = held
        rows = chain_rows(part, cached[0], cached[1], step.audit)
        result = conn.execute(step_statement(*shape, len(rows)), params | append_params(part, cached, rows)).one()
        if result.appended != len(rows):  # the head had moved: nothing was written
            cache.pop(str(part), None)  # type: ignore[union-attr]  # stale: the locked way, next
            if single:
                raise HeadMoved(step.conversation_id)
            rows = []
    if not rows:
        result = conn.execute(step_statement(*shape, 0), params).one()
    if result.next_seq is None:
        return None  # the caller says what that means (storage.steps.ConcurrentTurn)
    if step.audit:
        if rows:
            remember_head(cache, part, rows)  # type: ignore[arg-type]
        else:
            append_audit_sync(conn, step.audit, cache)
        ctx.audit_events.extend(step.audit)
    return int(result.next_seq)


def _step_params(step: StepWrite, now: datetime) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """The statement's parameters for ``step``, and the shape of its statement (audit aside)."""
    params: dict[str, Any] = {"c_id": step.conversation_id, "r_id": step.run_id, "c_now": now}
    params["c_n"] = len(step.messages)
    conv_keys = conversation_params(step, params)
    for i, (role, content) in enumerate(step.messages):
        event_key = step.event_key if i == 0 else None
        params |= {f"m{i}_role": role, f"m{i}_content": content, f"m{i}_event_key": event_key}
    _proposal_params(step, params)
    run_keys = run_params(step, params) if step.run_id is not None else frozenset()
    if run_keys:
        params["r_now"] = now
    usage = step.usage is not None and step.run_id is not None
    if usage:
        params |= {f"u_{c}": getattr(step.usage, c) for c in _USAGE_COLUMNS}
    return params, (conv_keys, len(step.messages), len(step.new_proposals), run_keys, usage)


def conversation_params(step: StepWrite, params: dict[str, Any]) -> frozenset[str]:
    """Add the conversation's columns ``step`` sets to ``params``; their keys."""
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
        params |= {f"p{i}_{c}": v for c, v in proposal_values(p, decided.get(p.id)).items()}


def proposal_values(p: NewProposal, outcome: ProposalOutcome | None) -> dict[str, Any]:
    """A new proposal's own columns (run, conversation and time aside), with the gate's
    ``outcome`` when the step decided it (``None``: undecided, as the gate leaves it to decide)."""
    o: Any = outcome or _UNDECIDED
    return {
        "id": p.id, "tool_use_id": p.tool_use_id, "origin": p.origin, "tool": p.tool, "arguments": p.arguments,
        "args_hash": p.args_hash, "principal": p.principal, "step": p.step, "policy_version": p.policy_version,
        "decision": o.decision, "reason": o.reason, "result": o.result, "is_error": o.is_error,
        "idempotency_key": o.idempotency_key,
    }  # fmt: skip


def run_params(step: StepWrite, params: dict[str, Any]) -> frozenset[str]:
    """Add the run's columns ``step`` sets (status with holder, steps added, state, pending
    ids) to ``params``; their keys (none: the run is not updated)."""
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
    """The one statement of a step of this shape (see the module docstring). With ``events``,
    everything hangs on the head's guarded move: ``conv`` updates only when ``moved`` did, and
    every other part is written from ``conv``'s row, so the statement writes all or nothing."""
    ctes: list[Any] = []
    conv_update = conversation_update(conv_keys)
    if events:
        moved = moved_head()
        ctes.append(moved)
        conv_update = conv_update.where(select(moved.c.id).exists())
    conv = conv_update.cte("conv")
    ctes.append(conv)
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
        ctes.append(insert(_MSG).from_select(cols, _union(rows)).cte("msgs"))
    if proposals:
        common = {"run_id": "r_id", "conversation_id": "c_id", "created_at": "c_now"}
        rows = [_from(conv, _PROP, common, {c: f"p{i}_{c}" for c in _PROP_COLUMNS}) for i in range(proposals)]
        cols = [*common, *_PROP_COLUMNS]
        ctes.append(insert(_PROP).from_select(cols, _union(rows)).cte("props"))
    if run_keys:
        ctes.append(run_update(run_keys).where(select(conv.c.next_seq).exists()).returning(_RUN.c.id).cte("run"))
    if usage:
        common = {"conversation_id": "c_id", "run_id": "r_id", "created_at": "c_now"}
        row = _from(conv, _USAGE, common, {c: f"u_{c}" for c in _USAGE_COLUMNS})
        ctes.append(insert(_USAGE).from_select([*common, *_USAGE_COLUMNS], row).cte("usage"))
    appended: Any = literal(0)
    if events:
        inserted = inserted_if_moved(conv, events).returning(literal(1)).cte("events")
        ctes.append(inserted)
        appended = select(func.count()).select_from(inserted).scalar_subquery()
    next_seq = select(conv.c.next_seq).scalar_subquery()
    return prepared(select(next_seq.label("next_seq"), appended.label("appended")).add_cte(*ctes))


def _from(conv: Any, table: Table, common: dict[str, str], own: dict[str, str]) -> Any:
    """``SELECT <the row's parameters> FROM conv``: the row, written only with the step's
    conversation update."""
    names = {**common, **own}
    return select(*(bindparam(n, type_=table.c[c].type) for c, n in names.items())).select_from(conv)


def _union(rows: list[Any]) -> Any:
    return rows[0] if len(rows) == 1 else union_all(*rows)


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
