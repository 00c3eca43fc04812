"""A turn's opening in one transaction, and the rows it reads and writes.

Opening a turn checks the principal's limits, creates the conversation (a new one), takes the
conversation's lease (on SQLite its row is written in this very transaction, see
:meth:`storage.leases.Leases.hold`), starts the run (or finds the open one) with its audit
event, stores the user's message and loads what the turn reads: history, the run's
proposals, tokens used, confirmations waiting. One commit: a crash before it leaves nothing
(no conversation, run, message or lease), and after it the message is durable before
anything acts on it — the state a turn that wrote them one by one reached at that line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import Connection, Table, bindparam, func, insert, select
from sqlalchemy.exc import IntegrityError

from storage.audit import AuditEvent, append_audit_sync
from storage.db import WriteContext
from storage.fastsql import one_of, prepared
from storage.gates import pending_confirmations
from storage.handoffs import Handoff, active_handoff
from storage.holders import process_id
from storage.limits import Allowance, check_allowance, tokens_today
from storage.models import ConversationRow, MessageRow, ProposalRow, RunRow, TokenUsageRow
from storage.records import Confirmation, Conversation, Proposal, Run, StoredMessage, aware, wall_clock
from storage.steps import ConcurrentTurn, StepWrite, event_seen, write_step

_RUNS: Table = RunRow.__table__  # type: ignore[assignment]
_CONVS: Table = ConversationRow.__table__  # type: ignore[assignment]
_MSGS: Table = MessageRow.__table__  # type: ignore[assignment]
_PROPS: Table = ProposalRow.__table__  # type: ignore[assignment]
_USAGE: Table = TokenUsageRow.__table__  # type: ignore[assignment]


def to_run(row: RunRow) -> Run:
    """The frozen record of a run row."""
    return Run(
        id=row.id,
        conversation_id=row.conversation_id,
        status=row.status,  # type: ignore[arg-type]
        steps=row.steps,
        model=row.model,
        prompt_version=row.prompt_version,
        policy_version=row.policy_version,
        trace_id=row.trace_id,
        pending_ids=tuple(row.pending_ids or ()),
        state=dict(row.state or {}),
        holder=row.holder,
    )


def to_proposal(row: ProposalRow) -> Proposal:
    """The frozen record of a proposal row."""
    return Proposal(
        id=row.id,
        run_id=row.run_id,
        conversation_id=row.conversation_id,
        tool_use_id=row.tool_use_id,
        tool=row.tool,
        arguments=row.arguments,
        args_hash=row.args_hash,
        principal=row.principal,
        step=row.step,
        origin=row.origin,
        decision=row.decision,
        reason=row.reason,
        idempotency_key=row.idempotency_key,
        result=row.result,
        is_error=row.is_error,
        policy_version=row.policy_version,
        created_at=aware(row.created_at) or wall_clock(),
    )


# What opening a turn reads and writes, built once (storage.fastsql).
_INSERT_CONV = prepared(insert(_CONVS))
#: The columns ``create`` sets (any other keeps its default).
_CONV_KEYS = (
    "id", "channel", "external_ref", "principal_kind", "principal_id", "customer_id", "principal_group", "status",
    "loaded_groups", "model", "prompt_version", "next_seq", "meta", "created_at", "updated_at",
)  # fmt: skip
_INSERT_RUN = prepared(insert(_RUNS))
_OPEN_RUN = prepared(
    select(_RUNS)
    .where(_RUNS.c.conversation_id == bindparam("c"), one_of(_RUNS.c.status, ("running", "waiting")))
    .order_by(_RUNS.c.created_at.desc())
    .limit(1)
)
_HISTORY = prepared(
    select(_MSGS.c.seq, _MSGS.c.role, _MSGS.c.content, _MSGS.c.run_id)
    .where(_MSGS.c.conversation_id == bindparam("c"))
    .order_by(_MSGS.c.seq)
)
_RUN_PROPOSALS = prepared(
    select(_PROPS).where(_PROPS.c.run_id == bindparam("r")).order_by(_PROPS.c.created_at, _PROPS.c.id)
)
_CONV_TOKENS = prepared(
    select(
        func.coalesce(
            func.sum(
                _USAGE.c.input_tokens
                + _USAGE.c.output_tokens
                + _USAGE.c.cache_creation_tokens
                + _USAGE.c.cache_read_tokens
            ),
            0,
        )
    ).where(_USAGE.c.conversation_id == bindparam("c"))
)


@dataclass(frozen=True, kw_only=True)
class TurnState:
    """What a turn loads at once: the conversation, its latest run, history, proposals, tokens used."""

    history: list[StoredMessage]
    proposals: list[Proposal]
    tokens_used: int


def insert_conversation(conn: Connection, conv: Conversation) -> None:
    """Insert the new conversation ``conv`` (see :meth:`ConversationRepo.draft`)."""
    values = {key: getattr(conv, key) for key in _CONV_KEYS if key != "updated_at"}
    values.update(loaded_groups=list(conv.loaded_groups), updated_at=conv.created_at)
    conn.execute(_INSERT_CONV, values)


def new_run(
    *, id: str, conversation_id: str, model: str, prompt_version: str, policy_version: str, trace_id: str
) -> Run:
    """A new running run of the conversation, held by this process (not stored yet)."""
    return Run(
        id=id,
        conversation_id=conversation_id,
        status="running",
        steps=0,
        model=model,
        prompt_version=prompt_version,
        policy_version=policy_version,
        trace_id=trace_id,
        pending_ids=(),
        state={},
        holder=process_id(),
    )


def insert_run(conn: Connection, ctx: WriteContext, run: Run, now: datetime, audit: list[AuditEvent]) -> None:
    """Insert ``run`` (see :func:`new_run`) with its audit events."""
    values = {c.name: getattr(run, c.name, None) for c in _RUNS.columns}
    values.update(pending_ids=list(run.pending_ids), state=dict(run.state), created_at=now, updated_at=now)
    conn.execute(_INSERT_RUN, values)
    if audit:
        append_audit_sync(conn, audit, ctx.audit_head)
        ctx.audit_events.extend(audit)


def find_open_run(conn: Connection, conversation_id: str) -> Run | None:
    """The conversation's unfinished run (running or waiting), if any."""
    row = conn.execute(_OPEN_RUN, {"c": conversation_id}).first()
    return to_run(row) if row else None  # type: ignore[arg-type]


def load_turn_state(conn: Connection, conversation_id: str, run_id: str) -> TurnState:
    """What a turn loads: the conversation's history, the run's proposals, tokens used."""
    messages = conn.execute(_HISTORY, {"c": conversation_id}).all()
    proposals = conn.execute(_RUN_PROPOSALS, {"r": run_id}).all()
    tokens = conn.execute(_CONV_TOKENS, {"c": conversation_id}).scalar_one()
    return TurnState(
        history=[StoredMessage(seq=r[0], role=r[1], content=r[2], run_id=r[3]) for r in messages],
        proposals=[to_proposal(r) for r in proposals],  # type: ignore[arg-type]
        tokens_used=int(tokens),
    )


@dataclass(frozen=True, kw_only=True)
class Opening:
    """What a turn's opening is asked to do (see the module docstring)."""

    conversation: Conversation
    #: Store ``conversation`` (a new one, see ``ConversationRepo.draft``).
    create: bool
    #: The caps checked first; whose tokens the turn counts unless ``acting`` says otherwise.
    allowance: Allowance
    #: The acting principal's tokens are counted by this one instead (when it differs).
    acting: Allowance | None
    #: The run started when the conversation has none open, with its audit events.
    new_run: Run
    run_audit: list[AuditEvent]
    #: The user's message (its run is set here: the open run or the new one).
    message: StepWrite
    #: Stamps the rows written (``ConversationRepo.stamp``).
    now: datetime


@dataclass(frozen=True, kw_only=True)
class Opened:
    """What the opening found and did. With ``handoff`` or ``owed`` it stopped before the run:
    a person owns the conversation, or the message's key is already stored (nothing of the
    turn was written)."""

    handoff: Handoff | None = None
    owed: bool = False
    run: Run | None = None
    state: TurnState | None = None
    tokens_today: int | None = None
    next_seq: int = 0
    waiting: list[Confirmation] | None = None


class ConversationTaken(Exception):
    """Another writer stored a conversation for this ``external_ref`` first; nothing was written."""


def open_turn(conn: Connection, ctx: WriteContext, o: Opening) -> Opened:
    """Open the turn ``o`` describes, in the caller's (lease's) transaction. Raises
    :class:`~storage.limits.OverLimit` (nothing written), :class:`ConversationTaken`, or
    :class:`~storage.steps.ConcurrentTurn` (rolled back: open again)."""
    tokens = check_allowance(conn, o.allowance)
    if o.acting is not None:
        tokens = tokens_today(conn, o.acting)
    conv = o.conversation
    if o.create:
        # A conversation stored just now has no hand-off, message, run or confirmation yet.
        try:
            insert_conversation(conn, conv)
        except IntegrityError as exc:
            raise ConversationTaken(conv.external_ref) from exc
        run: Run | None = None
    else:
        handoff = active_handoff(conn, conv.id)
        if handoff is not None and handoff.owned:
            return Opened(handoff=handoff)
        key = o.message.event_key
        if key is not None and event_seen(conn, conv.id, key):
            return Opened(owed=True)
        run = find_open_run(conn, conv.id)
    fresh = run is None
    if run is None:
        run = o.new_run
        insert_run(conn, ctx, run, o.now, o.run_audit)
    message = replace(o.message, run_id=run.id)
    if fresh and message.run_status == run.status:
        message = replace(message, run_status=None)  # inserted just now so, held by this process
    state = TurnState(history=[], proposals=[], tokens_used=0) if o.create else load_turn_state(conn, conv.id, run.id)
    try:
        next_seq = write_step(conn, ctx, message, o.now)
    except IntegrityError as exc:
        raise ConcurrentTurn(str(exc.orig)) from exc
    assert next_seq is not None  # its key was not there (above)
    waiting = [] if o.create else pending_confirmations(conn, conv.id)
    return Opened(run=run, state=state, tokens_today=tokens, next_seq=next_seq, waiting=waiting)
