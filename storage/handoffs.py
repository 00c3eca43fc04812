"""Hand-offs to a person: the ``handoffs`` table and its transitions.

A conversation has at most one hand-off that is *active* (``waiting`` or ``taken``), which the
database enforces (the partial unique index ``uq_handoffs_active``, on SQLite and PostgreSQL). Every
transition is a compare-and-set on ``version`` and ``state`` in one transaction with its
audit events and the jobs it asks for (the SLA check, a relayed message), so two people
clicking Take over at once get one owner, and a transition is never recorded without
its work, nor the reverse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

from sqlalchemy import Connection, CursorResult, bindparam, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from storage.audit import AuditEvent, append_audit_many, utc
from storage.db import Database
from storage.fastsql import one_of, prepared
from storage.jobs import JobQueue
from storage.models import HandoffRow, HandoffSuggestionRow, HandoffThreadRow
from storage.records import Clock, wall_clock

HandoffState = Literal["waiting", "taken", "returned", "closed"]
ACTIVE: tuple[HandoffState, ...] = ("waiting", "taken")


@dataclass(frozen=True, kw_only=True)
class Handoff:
    """One hand-off as the runtime sees it."""

    id: str
    conversation_id: str
    state: HandoffState
    reason: str
    opened_by: str
    owner: str | None
    owner_name: str | None
    notes: str | None
    thread: str | None
    surfaces: dict[str, Any]
    version: int
    opened_at: datetime
    taken_at: datetime | None
    ended_at: datetime | None

    @property
    def active(self) -> bool:
        """Waiting for a person or owned by one."""
        return self.state in ACTIVE

    @property
    def owned(self) -> bool:
        """A person owns the conversation right now (the agent says nothing in it)."""
        return self.state == "taken"


@dataclass(frozen=True, kw_only=True)
class Suggestion:
    """A reply the agent drafted for the hand-off's owner (sent only by a person's Send)."""

    id: str
    handoff_id: str
    conversation_id: str
    text: str
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """A job a transition enqueues in its own transaction (insert-if-absent on ``dedup_key``)."""

    kind: str
    payload: dict[str, Any]
    dedup_key: str
    run_after: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class Move:
    """A compare-and-set: from one of ``from_states`` at ``version`` to ``to``, with these values."""

    to: HandoffState
    from_states: tuple[HandoffState, ...]
    version: int
    values: dict[str, Any] = field(default_factory=dict)


def _handoff(r: HandoffRow) -> Handoff:
    return Handoff(
        id=r.id,
        conversation_id=r.conversation_id,
        state=cast(HandoffState, r.state),
        reason=r.reason,
        opened_by=r.opened_by,
        owner=r.owner,
        owner_name=r.owner_name,
        notes=r.notes,
        thread=r.thread,
        surfaces=dict(r.surfaces or {}),
        version=r.version,
        opened_at=utc(r.opened_at),
        taken_at=utc(r.taken_at) if r.taken_at else None,
        ended_at=utc(r.ended_at) if r.ended_at else None,
    )


class Handoffs:
    """Repository over ``handoffs``."""

    def __init__(self, db: Database, *, clock: Clock | None = None) -> None:
        self.db = db
        self._clock = clock or wall_clock
        self._jobs = JobQueue(db, clock=self._clock)

    def now(self) -> datetime:
        """The repository's clock (the runtime's)."""
        return utc(self._clock())

    async def open(
        self,
        *,
        id: str,
        conversation_id: str,
        reason: str,
        opened_by: str,
        audit: Sequence[AuditEvent] = (),
        jobs: Sequence[JobSpec] = (),
    ) -> tuple[Handoff, bool]:
        """The conversation's active hand-off, opened now if it has none: ``(handoff, opened)``.
        Two opens at once (PostgreSQL lets both look before either inserts) meet the partial
        unique index ``uq_handoffs_active``: the loser's transaction, audit and jobs included,
        rolls back and it returns the winner's hand-off."""
        try:
            async with self.db.sessions() as s, s.begin():
                found = await _active(s, conversation_id)
                if found is not None:
                    return _handoff(found), False
                row = HandoffRow(
                    id=id,
                    conversation_id=conversation_id,
                    state="waiting",
                    reason=reason[:200],
                    opened_by=opened_by[:160],
                    surfaces={},
                    version=1,
                    opened_at=self.now(),
                )
                s.add(row)
                await s.flush()
                await self._finish(s, audit, jobs)
                return _handoff(row), True
        except IntegrityError:
            winner = await self.active_for(conversation_id)
            if winner is None:
                raise
            return winner, False

    async def move(
        self, handoff_id: str, move: Move, *, audit: Sequence[AuditEvent] = (), jobs: Sequence[JobSpec] = ()
    ) -> Handoff | None:
        """Apply ``move`` if the row is still where the caller saw it; ``None`` if it moved on."""
        async with self.db.sessions() as s, s.begin():
            res = await s.execute(
                update(HandoffRow)
                .where(
                    HandoffRow.id == handoff_id,
                    HandoffRow.version == move.version,
                    HandoffRow.state.in_(move.from_states),
                )
                .values(state=move.to, version=move.version + 1, **move.values)
            )
            if cast(CursorResult[Any], res).rowcount != 1:
                return None
            await self._finish(s, audit, jobs)
            row = await s.get(HandoffRow, handoff_id)
            assert row is not None
            return _handoff(row)

    async def add_work(self, *, audit: Sequence[AuditEvent] = (), jobs: Sequence[JobSpec] = ()) -> None:
        """Audit events and jobs of something that is not a transition, in one transaction."""
        async with self.db.sessions() as s, s.begin():
            await self._finish(s, audit, jobs)

    async def enqueue_once(self, job: JobSpec, *, audit: Sequence[AuditEvent] = ()) -> bool:
        """``job`` with its audit events, unless its dedup key was ever used (then nothing: False)."""
        async with self.db.sessions() as s, s.begin():
            queued = await self._jobs.enqueue(
                job.kind, job.payload, dedup_key=job.dedup_key, run_after=job.run_after, session=s
            )
            if queued is None:
                return False
            if audit:
                await append_audit_many(s, list(audit))
            return True

    async def _finish(self, s: AsyncSession, audit: Sequence[AuditEvent], jobs: Sequence[JobSpec]) -> None:
        if audit:
            await append_audit_many(s, list(audit))
        for job in jobs:
            await self._jobs.enqueue(job.kind, job.payload, dedup_key=job.dedup_key, run_after=job.run_after, session=s)

    async def set_surface(self, handoff_id: str, name: str, ref: dict[str, Any], *, thread: str | None = None) -> None:
        """Record where the staff surface ``name`` shows it, and the thread replies to it arrive
        in there (each surface its own: ``handoff_threads``; the first also in ``thread``)."""
        async with self.db.sessions() as s, s.begin():
            row = await s.get(HandoffRow, handoff_id, with_for_update=True)
            if row is None:
                return
            row.surfaces = {**(row.surfaces or {}), name: ref}
            if thread is None:
                return
            if row.thread is None:
                row.thread = thread[:255]
            if await s.get(HandoffThreadRow, (thread[:255], handoff_id)) is None:
                s.add(HandoffThreadRow(thread=thread[:255], handoff_id=handoff_id))

    async def get(self, handoff_id: str) -> Handoff | None:
        """The hand-off ``handoff_id``, if it exists."""
        async with self.db.reader() as s:
            row = await s.get(HandoffRow, handoff_id)
            return _handoff(row) if row is not None else None

    async def active_for(self, conversation_id: str) -> Handoff | None:
        """The conversation's waiting or taken hand-off, if any."""
        return await self.db.read(lambda conn: active_handoff(conn, conversation_id))

    async def in_thread(self, thread: str) -> Handoff | None:
        """The newest hand-off one of whose staff threads is ``thread``."""
        async with self.db.reader() as s:
            row = (
                await s.execute(
                    select(HandoffRow)
                    .join(HandoffThreadRow, HandoffThreadRow.handoff_id == HandoffRow.id)
                    .where(HandoffThreadRow.thread == thread)
                    .order_by(HandoffRow.opened_at.desc())
                    .limit(1)
                )
            ).scalar_one_or_none()
            return _handoff(row) if row is not None else None

    async def latest_for(self, conversation_id: str) -> Handoff | None:
        """The conversation's newest hand-off, whatever its state."""
        async with self.db.reader() as s:
            row = (
                await s.execute(
                    select(HandoffRow)
                    .where(HandoffRow.conversation_id == conversation_id)
                    .order_by(HandoffRow.opened_at.desc())
                    .limit(1)
                )
            ).scalar_one_or_none()
            return _handoff(row) if row is not None else None

    async def suggest(self, draft: Suggestion, *, audit: Sequence[AuditEvent] = ()) -> Suggestion:
        """Store ``draft`` with its audit events unless its id is stored already (then the stored one)."""
        try:
            async with self.db.sessions() as s, s.begin():
                if (found := await s.get(HandoffSuggestionRow, draft.id)) is not None:
                    return _suggestion(found)
                s.add(
                    HandoffSuggestionRow(
                        id=draft.id,
                        handoff_id=draft.handoff_id,
                        conversation_id=draft.conversation_id,
                        text=draft.text,
                        created_at=draft.created_at,
                    )
                )
                await s.flush()
                if audit:
                    await append_audit_many(s, list(audit))
                return draft
        except IntegrityError:
            stored = await self.suggestion(draft.id)
            if stored is None:
                raise
            return stored

    async def suggestion(self, suggestion_id: str) -> Suggestion | None:
        """The suggestion ``suggestion_id``, if it exists."""
        async with self.db.reader() as s:
            row = await s.get(HandoffSuggestionRow, suggestion_id)
            return _suggestion(row) if row is not None else None

    async def open_count(self) -> int:
        """Hand-offs waiting for a person or owned by one."""
        async with self.db.reader() as s:
            count = await s.scalar(select(func.count()).select_from(HandoffRow).where(HandoffRow.state.in_(ACTIVE)))
            return int(count or 0)


def _suggestion(r: HandoffSuggestionRow) -> Suggestion:
    return Suggestion(
        id=r.id, handoff_id=r.handoff_id, conversation_id=r.conversation_id, text=r.text, created_at=utc(r.created_at)
    )


_H: Any = HandoffRow.__table__
# Built once: every turn's opening runs it (storage.fastsql).
_ACTIVE = prepared(
    select(_H)
    .where(_H.c.conversation_id == bindparam("c"), one_of(_H.c.state, sorted(ACTIVE)))
    .order_by(_H.c.opened_at.desc())
    .limit(1)
)


def active_handoff(conn: Connection, conversation_id: str) -> Handoff | None:
    """The conversation's waiting or taken hand-off, if any (inside the caller's transaction)."""
    row = conn.execute(_ACTIVE, {"c": conversation_id}).first()
    return _handoff(row) if row is not None else None  # type: ignore[arg-type]


async def _active(s: AsyncSession, conversation_id: str) -> HandoffRow | None:
    return (
        await s.execute(
            select(HandoffRow)
            .where(HandoffRow.conversation_id == conversation_id, HandoffRow.state.in_(ACTIVE))
            .order_by(HandoffRow.opened_at.desc())
            .limit(1)
        )
    ).scalar_one_or_none()


__all__ = ["ACTIVE", "Handoff", "HandoffState", "Handoffs", "JobSpec", "Move", "Suggestion"]
