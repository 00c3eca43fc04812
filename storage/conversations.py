"""Conversations, their message history, runs and proposals.

The loop writes one :class:`StepWrite` per iteration in one short transaction
(never held across a model call): messages, proposals, outcomes, run state,
token usage and the audit events that describe them commit together, so a
crash leaves history, proposals and audit consistent.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Table, bindparam, select, update
from sqlalchemy.exc import IntegrityError

from storage.audit import AuditEvent, append_audit_many
from storage.db import Database, WriteContext
from storage.fastsql import prepared
from storage.holders import is_dead, process_id
from storage.models import (
    CaseNoteRow,
    ConversationRow,
    MessageRow,
    ProposalRow,
    RunRow,
    TokenUsageRow,
)
from storage.opening import (
    TurnState,
    find_open_run,
    insert_conversation,
    insert_run,
    load_turn_state,
    new_run,
    to_proposal,
    to_run,
)
from storage.records import Clock, Conversation, Proposal, Run, StoredMessage, aware, wall_clock
from storage.step_statement import HeadMoved, fits, write_in_one
from storage.steps import (
    ConcurrentTurn,
    StepWrite,
    write_step,
)


def to_conversation(row: ConversationRow) -> Conversation:
    """The frozen record of a conversation row."""
    return Conversation(
        id=row.id,
        channel=row.channel,
        external_ref=row.external_ref,
        principal_kind=row.principal_kind,
        principal_id=row.principal_id,
        customer_id=row.customer_id,
        status=row.status,
        loaded_groups=tuple(row.loaded_groups or ()),
        model=row.model,
        prompt_version=row.prompt_version,
        next_seq=row.next_seq,
        meta=dict(row.meta or {}),
        created_at=aware(row.created_at) or wall_clock(),
        principal_group=row.principal_group,
    )


def _stale(row: RunRow, older_than: datetime) -> bool:
    """Nothing moved on the run since ``older_than``, or the process holding it is gone."""
    updated = aware(row.updated_at)
    return (updated is not None and updated < older_than) or (row.holder is not None and is_dead(row.holder))


_RUNS: Table = RunRow.__table__  # type: ignore[assignment]
_CONVS: Table = ConversationRow.__table__  # type: ignore[assignment]
_MSGS: Table = MessageRow.__table__  # type: ignore[assignment]
_PROPS: Table = ProposalRow.__table__  # type: ignore[assignment]
_USAGE: Table = TokenUsageRow.__table__  # type: ignore[assignment]

_GET_CONV = prepared(select(_CONVS).where(_CONVS.c.id == bindparam("id")))
_CONV_BY_REF = prepared(select(_CONVS).where(_CONVS.c.external_ref == bindparam("ref")))


class ConversationRepo:
    """Conversations, history, runs, proposals, usage and case notes."""

    def __init__(self, db: Database, *, clock: Clock = wall_clock) -> None:
        self.db = db
        #: Stamps rows that are ordered by time (runs, proposals, notes): the composition root
        #: keeps the real time here, so a frozen clock cannot tie their order.
        self._clock = clock

    def stamp(self) -> datetime:
        """The time this repository stamps rows with now (see ``__init__``)."""
        return self._clock()

    def draft(
        self,
        *,
        id: str,
        channel: str,
        external_ref: str | None,
        principal_kind: str,
        principal_id: str,
        customer_id: str | None,
        model: str,
        prompt_version: str,
        loaded_groups: list[str],
        meta: dict[str, Any] | None = None,
        principal_group: str | None = None,
    ) -> Conversation:
        """A new conversation's record, not stored yet (:meth:`create` or a turn's opening stores it)."""
        return Conversation(
            id=id,
            channel=channel,
            external_ref=external_ref,
            principal_kind=principal_kind,
            principal_id=principal_id,
            customer_id=customer_id,
            principal_group=principal_group,
            status="open",
            loaded_groups=tuple(loaded_groups),
            model=model,
            prompt_version=prompt_version,
            next_seq=0,
            meta=dict(meta or {}),
            created_at=self._clock(),
        )

    async def create(self, **fields: Any) -> Conversation:
        """Insert-if-absent on ``external_ref`` (a Slack thread, an email thread); ``fields`` as
        for :meth:`draft`."""
        conv = self.draft(**fields)
        try:
            await self.db.write(lambda conn, _ctx: insert_conversation(conn, conv))
        except IntegrityError:
            if conv.external_ref is None:
                raise
            existing = await self.get_by_external_ref(conv.external_ref)
            assert existing is not None
            return existing
        return conv

    async def get(self, conversation_id: str) -> Conversation | None:
        """The conversation ``conversation_id``, if it exists."""
        row = await self.db.read(lambda conn: conn.execute(_GET_CONV, {"id": conversation_id}).first())
        return to_conversation(row) if row else None  # type: ignore[arg-type]

    async def get_by_external_ref(self, external_ref: str) -> Conversation | None:
        """The conversation bound to ``external_ref`` (a Slack thread, an email thread), if any."""
        row = await self.db.read(lambda conn: conn.execute(_CONV_BY_REF, {"ref": external_ref}).one_or_none())
        return to_conversation(row) if row else None  # type: ignore[arg-type]

    async def set_meta(self, conversation_id: str, meta: dict[str, Any]) -> None:
        """Replace the conversation's ``meta``."""
        async with self.db.sessions() as s, s.begin():
            await s.execute(update(ConversationRow).where(ConversationRow.id == conversation_id).values(meta=meta))

    async def history(self, conversation_id: str) -> list[StoredMessage]:
        """The conversation's messages in seq order."""
        async with self.db.reader() as s:
            rows = (
                await s.execute(
                    select(MessageRow.seq, MessageRow.role, MessageRow.content, MessageRow.run_id)
                    .where(MessageRow.conversation_id == conversation_id)
                    .order_by(MessageRow.seq)
                )
            ).all()
        return [StoredMessage(seq=r[0], role=r[1], content=r[2], run_id=r[3]) for r in rows]

    # -- runs ------------------------------------------------------------------
    async def open_run(self, conversation_id: str) -> Run | None:
        """The conversation's unfinished run (running or waiting), if any."""
        return await self.db.read(lambda conn: find_open_run(conn, conversation_id))

    async def create_run(
        self,
        *,
        id: str,
        conversation_id: str,
        model: str,
        prompt_version: str,
        policy_version: str,
        trace_id: str,
        audit: list[AuditEvent] | None = None,
    ) -> Run:
        """Insert a running run of the conversation (with its audit events)."""
        run = new_run(
            id=id,
            conversation_id=conversation_id,
            model=model,
            prompt_version=prompt_version,
            policy_version=policy_version,
            trace_id=trace_id,
        )
        now = self._clock()
        await self.db.write(lambda conn, ctx: insert_run(conn, ctx, run, now, audit or []))
        return run

    async def turn_state(self, conversation_id: str, run_id: str) -> TurnState:
        """What a turn loads, in one read: the history, the run's proposals, tokens used."""
        return await self.db.read(lambda conn: load_turn_state(conn, conversation_id, run_id))

    async def stale_runs(self, *, older_than: datetime, limit: int = 100) -> list[Run]:
        """Runs left ``running`` by a crash: their process is gone, or nothing moved since ``older_than``."""
        async with self.db.reader() as s:
            rows = (
                (
                    await s.execute(
                        select(RunRow).where(RunRow.status == "running").order_by(RunRow.updated_at).limit(limit * 10)
                    )
                )
                .scalars()
                .all()
            )
        runs = [to_run(r) for r in rows if _stale(r, older_than)]
        return runs[:limit]

    async def take_over_run(self, run: Run) -> bool:
        """Make this process the holder of a ``running`` run whose holder died (or stalled);
        false when someone else took it over, or it is no longer running."""

        def _take(conn: Connection, _ctx: WriteContext) -> bool:
            held = RunRow.holder.is_(None) if run.holder is None else RunRow.holder == run.holder
            res = conn.execute(
                update(_RUNS)
                .where(RunRow.id == run.id, RunRow.status == "running", held)
                .values(holder=process_id(), updated_at=self._clock())
            )
            return bool(res.rowcount == 1)

        return await self.db.write(_take)

    @staticmethod
    def abandoned(run: Run) -> bool:
        """A ``running`` run nobody is finishing: the process holding it no longer runs."""
        return run.status == "running" and run.holder is not None and is_dead(run.holder)

    async def undecided_runtime_proposals(self, *, older_than: datetime, limit: int = 100) -> list[Proposal]:
        """Proposals the runtime made for a settled confirmation whose decision a crash interrupted."""
        async with self.db.reader() as s:
            rows = (
                (
                    await s.execute(
                        select(ProposalRow)
                        .where(
                            ProposalRow.decision.is_(None),
                            ProposalRow.origin.is_not(None),
                            ProposalRow.created_at < older_than,
                        )
                        .limit(limit)
                    )
                )
                .scalars()
                .all()
            )
            return [to_proposal(r) for r in rows]

    async def proposal_for_origin(self, origin: str) -> Proposal | None:
        """The newest proposal the runtime made for ``origin`` (``approval:apr_…``), if any."""
        async with self.db.reader() as s:
            row = (
                await s.execute(
                    select(ProposalRow)
                    .where(ProposalRow.origin == origin)
                    .order_by(ProposalRow.created_at.desc(), ProposalRow.id.desc())
                    .limit(1)
                )
            ).scalar_one_or_none()
            return to_proposal(row) if row else None

    async def get_run(self, run_id: str) -> Run | None:
        """The run ``run_id``, if it exists."""
        async with self.db.reader() as s:
            row = await s.get(RunRow, run_id)
            return to_run(row) if row else None

    # -- proposals -------------------------------------------------------------
    async def proposals(self, run_id: str) -> list[Proposal]:
        """The run's proposals, oldest first."""
        async with self.db.reader() as s:
            rows = (
                (
                    await s.execute(
                        select(ProposalRow)
                        .where(ProposalRow.run_id == run_id)
                        .order_by(ProposalRow.created_at, ProposalRow.id)
                    )
                )
                .scalars()
                .all()
            )
            return [to_proposal(r) for r in rows]

    async def get_proposal(self, proposal_id: str) -> Proposal | None:
        """The proposal ``proposal_id``, if it exists."""
        async with self.db.reader() as s:
            row = await s.get(ProposalRow, proposal_id)
            return to_proposal(row) if row else None

    async def proposals_by_tool_use(self, conversation_id: str, tool_use_ids: list[str]) -> dict[str, Proposal]:
        """The conversation's proposals for these tool_use ids, by tool_use id."""
        if not tool_use_ids:
            return {}
        async with self.db.reader() as s:
            rows = (
                (
                    await s.execute(
                        select(ProposalRow).where(
                            ProposalRow.conversation_id == conversation_id,
                            ProposalRow.tool_use_id.in_(tool_use_ids),
                        )
                    )
                )
                .scalars()
                .all()
            )
            return {r.tool_use_id: to_proposal(r) for r in rows}

    # -- the step write ----------------------------------------------------------
    async def commit(self, step: StepWrite) -> int | None:
        """Apply ``step`` atomically; returns the conversation's next seq, or ``None`` when the
        step carries an ``event_key`` the conversation already holds (nothing was written).

        Raises :class:`~storage.steps.LostRace` when its confirmation move lost a race."""
        now = self._clock()
        try:
            if self.db.is_postgres and step.event_key is None and fits(step):
                # One statement in autocommit: one round trip (storage.step_statement); when the
                # audit head is another writer's, nothing was written: a transaction below.
                with contextlib.suppress(HeadMoved):
                    seq = await self.db.write_statement(lambda c, ctx: write_in_one(c, ctx, step, now, single=True))
                    if seq is None:
                        raise ConcurrentTurn(f"conversation {step.conversation_id} is gone")
                    return seq
            return await self.db.write(lambda conn, ctx: write_step(conn, ctx, step, now))
        except IntegrityError as exc:
            if step.event_key is not None and await self.has_event(step.conversation_id, step.event_key):
                return None  # another process appended the same event first
            raise ConcurrentTurn(str(exc.orig)) from exc

    async def event_at(self, conversation_id: str, event_key: str) -> tuple[int, str | None] | None:
        """Where the message or event ``event_key`` is: its seq and run."""
        async with self.db.reader() as s:
            row = (
                await s.execute(
                    select(MessageRow.seq, MessageRow.run_id)
                    .where(MessageRow.conversation_id == conversation_id, MessageRow.event_key == event_key)
                    .limit(1)
                )
            ).first()
        return (row[0], row[1]) if row is not None else None

    async def has_event(self, conversation_id: str, event_key: str) -> bool:
        """Whether the runtime event ``event_key`` is already in the conversation's history."""
        async with self.db.reader() as s:
            return (
                await s.execute(
                    select(MessageRow.id)
                    .where(MessageRow.conversation_id == conversation_id, MessageRow.event_key == event_key)
                    .limit(1)
                )
            ).first() is not None

    # -- usage and case notes ----------------------------------------------------
    async def add_case_note(
        self,
        conversation_id: str,
        *,
        author: str,
        kind: str,
        text: str,
        audit: list[AuditEvent] | None = None,
        status: str | None = None,
    ) -> int:
        """Append a case note (optionally setting the conversation's status); its id."""
        async with self.db.sessions() as s, s.begin():
            row = CaseNoteRow(
                conversation_id=conversation_id,
                author=author,
                kind=kind,
                text=text,
                created_at=self._clock(),
            )
            s.add(row)
            if status is not None:
                await s.execute(
                    update(ConversationRow).where(ConversationRow.id == conversation_id).values(status=status)
                )
            await s.flush()
            if audit:
                await append_audit_many(s, audit)
            return row.id

    async def case_notes(self, conversation_id: str) -> list[tuple[str, str, str]]:
        """The conversation's case notes as ``(kind, author, text)``, oldest first."""
        async with self.db.reader() as s:
            rows = (
                await s.execute(
                    select(CaseNoteRow.kind, CaseNoteRow.author, CaseNoteRow.text)
                    .where(CaseNoteRow.conversation_id == conversation_id)
                    .order_by(CaseNoteRow.id)
                )
            ).all()
        return [(r[0], r[1], r[2]) for r in rows]
