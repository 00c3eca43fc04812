"""The durable job queue behind resume and expiry work.

A job is ``queued`` until ``run_after``; a claim makes it ``running`` under a
lease that ends at ``run_after = now + lease_s``. A worker that dies leaves a
``running`` job whose lease expires, and the next claim takes it again, so
handlers must be idempotent (they are: every write goes through the ledger).
``complete`` makes it ``done``; ``fail`` requeues it with backoff or, after
``max_attempts`` claims, *quarantines* it: ``quarantined`` is terminal (no claim, no
restart runs it again) and listed for the operator (``quarantined``, ``signoff jobs``).
A job whose process died (or stalled past its lease) on its last attempt is quarantined
by the next claim.

Claims are race-free on both databases: PostgreSQL takes rows with
``SELECT … FOR UPDATE SKIP LOCKED`` and quarantines or claims them in the same statement
(:func:`_claim_pg`, in autocommit); SQLite (transactions already ``BEGIN IMMEDIATE``) marks
them with a single ``UPDATE … RETURNING``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, cast

from sqlalchemy import ColumnElement, Connection, CursorResult, Table, and_, bindparam, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from storage.audit import utc
from storage.db import Database, WriteContext
from storage.faults import rerunnable
from storage.models import JobRow
from storage.notify import JOBS
from storage.probe import probing
from storage.records import wall_clock

JobStatus = Literal["queued", "running", "done", "quarantined"]
Clock = Callable[[], datetime]

_JOBS = cast(Table, JobRow.__table__)
_ACTIVE = ("queued", "running")
#: Whether any job is due (the claim's condition; :meth:`JobQueue.hearing_others` on SQLite).
_DUE = select(_JOBS.c.id).where(_JOBS.c.status.in_(_ACTIVE), _JOBS.c.run_after <= bindparam("now")).limit(1)


@dataclass(frozen=True, kw_only=True)
class Job:
    """A unit of background work. While ``running``, ``run_after`` is when its lease ends."""

    id: int
    kind: str
    payload: dict[str, Any]
    attempts: int
    run_after: datetime
    dedup_key: str | None
    status: JobStatus = "queued"
    last_error: str | None = None
    #: When it was enqueued (how long it has waited in all).
    created_at: datetime | None = None


def default_backoff(attempts: int) -> float:
    """Seconds before retry number ``attempts``: 5 s doubling, capped at 15 min."""
    return float(min(5 * 2 ** max(attempts - 1, 0), 900))


def _job(row: Any) -> Job:
    return Job(
        id=row.id,
        kind=row.kind,
        payload=row.payload,
        attempts=row.attempts,
        run_after=utc(row.run_after),
        dedup_key=row.dedup_key,
        status=row.status,
        last_error=row.last_error,
        created_at=utc(row.created_at) if row.created_at is not None else None,
    )


class JobQueue:
    """Repository over ``jobs``. ``clock`` returns aware UTC now (tests pass a fake)."""

    def __init__(self, db: Database, *, clock: Clock | None = None) -> None:
        self._db = db
        self._clock = clock or wall_clock
        #: Set once a job this process queued has committed: the worker of this process claims
        #: it at once instead of at its next poll; within :meth:`hearing_others`, once another
        #: process's has (PostgreSQL).
        self.queued = asyncio.Event()

    def hearing_others(self, *, kinds: Sequence[str] | None = None) -> contextlib.AbstractContextManager[None]:
        """While the block lasts, a job another process commits sets :attr:`queued` too: on
        PostgreSQL when it is queued (:mod:`storage.notify`), on SQLite once one of ``kinds`` is
        due (:mod:`storage.probe`, within :data:`~storage.probe.EVERY_S`)."""
        if self._db.is_postgres:
            return self._db.heard(JOBS, lambda _payload: self.queued.set())
        due = _DUE if kinds is None else _DUE.where(_JOBS.c.kind.in_(list(kinds)))

        async def look() -> bool:
            if self.queued.is_set():
                return True  # the worker has yet to claim: nothing to ask
            now = {"now": self._now()}
            if await self._db.read(lambda conn: conn.execute(due, now).first()) is None:
                return False
            self.queued.set()
            return True

        return probing(look)

    def _now(self) -> datetime:
        return utc(self._clock())

    async def enqueue(
        self,
        kind: str,
        payload: dict[str, Any],
        *,
        dedup_key: str | None = None,
        run_after: datetime | None = None,
        session: AsyncSession | None = None,
    ) -> int | None:
        """Queue a job; return its id, or ``None`` if ``dedup_key`` was ever used before.

        With ``session`` the insert joins the caller's open transaction, so the
        job exists exactly when the state change that asked for it commits.
        """
        if session is not None:
            return await self._insert(session, kind, payload, dedup_key, run_after)
        async with self._db.sessions() as s, s.begin():
            job_id = await self._insert(s, kind, payload, dedup_key, run_after)
        self.queued.set()
        return job_id

    async def _insert(
        self,
        session: AsyncSession,
        kind: str,
        payload: dict[str, Any],
        dedup_key: str | None,
        run_after: datetime | None,
    ) -> int | None:
        stmt = self._insert_stmt(session.get_bind().dialect.name, kind, payload, dedup_key, run_after)
        return (await session.execute(stmt)).scalar_one_or_none()

    def insert(
        self,
        conn: Connection,
        kind: str,
        payload: dict[str, Any],
        *,
        dedup_key: str | None = None,
        run_after: datetime | None = None,
    ) -> int | None:
        """:meth:`enqueue` inside a :meth:`~storage.db.Database.write` transaction (``conn``)."""
        stmt = self._insert_stmt(conn.dialect.name, kind, payload, dedup_key, run_after)
        return conn.execute(stmt).scalar_one_or_none()

    def queued_values(
        self, kind: str, payload: dict[str, Any], *, dedup_key: str | None = None, run_after: datetime | None = None
    ) -> dict[str, Any]:
        """A new job's columns, queued: what :meth:`enqueue` inserts (and a statement that inserts
        one beside other rows, the inbox's acceptance on PostgreSQL)."""
        now = self._now()
        return {
            "kind": kind,
            "payload": payload,
            "dedup_key": dedup_key,
            "status": "queued",
            "attempts": 0,
            "run_after": now if run_after is None else utc(run_after),
            "created_at": now,
        }

    def _insert_stmt(
        self, dialect_name: str, kind: str, payload: dict[str, Any], dedup_key: str | None, run_after: datetime | None
    ) -> Any:
        dialect = postgresql if dialect_name == "postgresql" else sqlite
        return (
            dialect.insert(_JOBS)
            .values(**self.queued_values(kind, payload, dedup_key=dedup_key, run_after=run_after))
            .on_conflict_do_nothing(index_elements=["dedup_key"])
            .returning(_JOBS.c.id)
        )

    async def claim(
        self,
        worker_id: str,
        *,
        kinds: Sequence[str] | None = None,
        limit: int = 1,
        lease_s: float = 60,
        max_attempts: int = 5,
    ) -> list[Job]:
        """Take up to ``limit`` due jobs for ``worker_id``, longest-due first; returned by id.

        Due means queued with ``run_after <= now``, or running with an expired
        lease. Each claim counts as an attempt; a job whose lease expires after
        ``max_attempts`` claims is quarantined instead of being run again.
        """
        now = self._now()
        due = and_(_JOBS.c.status.in_(_ACTIVE), _JOBS.c.run_after <= now)
        if kinds is not None:
            due = and_(due, _JOBS.c.kind.in_(list(kinds)))
        claimed = {
            "status": "running",
            "locked_by": worker_id,
            "locked_at": now,
            "run_after": now + timedelta(seconds=lease_s),
            "attempts": _JOBS.c.attempts + 1,
        }
        if self._db.is_postgres:  # one statement, in autocommit: one round trip
            statement = _claim_pg(due, limit, max_attempts, claimed)
            rows = await self._db.write_statement(lambda conn, _ctx: list(conn.execute(statement).all()))
        else:

            def write(conn: Connection, _ctx: WriteContext) -> list[Any]:
                conn.execute(_exhausted(due, max_attempts))
                target = _JOBS.c.id.in_(_oldest(due, limit).scalar_subquery())
                return list(conn.execute(update(_JOBS).where(target).values(**claimed).returning(*_JOBS.c)).all())

            # One hop: the claim never holds SQLite's write lock across event-loop turns.
            rows = await self._db.write(write)
        return sorted((_job(r) for r in rows), key=lambda j: j.id)

    async def release_abandoned(self, is_dead: Callable[[str], bool]) -> int:
        """Make ``running`` jobs whose holder is known dead due now (a crashed process's
        claims are taken over at once, not when their lease ends). Returns how many."""
        async with self._db.reader() as s:
            rows = (await s.execute(select(_JOBS.c.id, _JOBS.c.locked_by).where(_JOBS.c.status == "running"))).all()
        dead = [r.id for r in rows if r.locked_by and is_dead(r.locked_by)]
        if not dead:
            return 0
        async with self._db.sessions() as s, s.begin():
            await s.execute(
                update(_JOBS).where(_JOBS.c.id.in_(dead), _JOBS.c.status == "running").values(run_after=self._now())
            )
        return len(dead)

    @rerunnable
    async def complete(self, job_id: int, *, worker_id: str | None = None) -> bool:
        """Mark a running job done; with ``worker_id``, only if that worker still holds it."""
        stmt = update(_JOBS).where(_JOBS.c.id == job_id, _JOBS.c.status == "running")
        if worker_id is not None:
            stmt = stmt.where(_JOBS.c.locked_by == worker_id)
        done = stmt.values(status="done", last_error=None)
        result = await self._db.write_statement(lambda conn, _ctx: conn.execute(done))
        return bool(cast(CursorResult[Any], result).rowcount)

    @rerunnable
    async def fail(
        self,
        job_id: int,
        error: str,
        *,
        retry_in_s: float | None = None,
        max_attempts: int = 5,
        worker_id: str | None = None,
        counted: bool = True,
    ) -> JobStatus | None:
        """Record a failed attempt: requeue after ``retry_in_s`` (default
        :func:`default_backoff`) or, once ``max_attempts`` claims are used,
        quarantine it. Returns the new status, or ``None`` if the job is
        not running (or, with ``worker_id``, not held by that worker).

        ``counted=False`` (the job met a database outage, not a fault of its own) gives the
        claim's attempt back and requeues it: an outage never quarantines a job."""
        now = self._now()
        find = select(_JOBS.c.attempts).where(_JOBS.c.id == job_id, _JOBS.c.status == "running")
        if worker_id is not None:
            find = find.where(_JOBS.c.locked_by == worker_id)

        def write(conn: Connection, _ctx: WriteContext) -> JobStatus | None:
            attempts = conn.execute(find.with_for_update()).scalar_one_or_none()
            if attempts is None:
                return None
            status: JobStatus = "quarantined" if counted and attempts >= max_attempts else "queued"
            values: dict[str, Any] = {"status": status, "last_error": error, "locked_by": None}
            if not counted:
                attempts = max(attempts - 1, 0)
                values["attempts"] = attempts
            if status == "queued":
                delay = default_backoff(attempts) if retry_in_s is None else retry_in_s
                values["run_after"] = now + timedelta(seconds=delay)
            conn.execute(update(_JOBS).where(_JOBS.c.id == job_id).values(**values))
            return status

        status = await self._db.write(write)
        return status

    async def pending_count(self, *, kinds: Sequence[str] | None = None) -> int:
        """Jobs not yet done or quarantined (queued or running)."""
        stmt = select(func.count()).select_from(_JOBS).where(_JOBS.c.status.in_(_ACTIVE))
        if kinds is not None:
            stmt = stmt.where(_JOBS.c.kind.in_(list(kinds)))
        async with self._db.sessions() as s, s.begin():
            return int((await s.execute(stmt)).scalar_one())

    async def quarantined(self, *, limit: int = 100) -> list[Job]:
        """Jobs given up on (newest first): what an operator looks at (``signoff jobs``)."""
        stmt = select(_JOBS).where(_JOBS.c.status == "quarantined").order_by(_JOBS.c.id.desc()).limit(limit)
        async with self._db.reader() as s:
            return [_job(r) for r in (await s.execute(stmt)).all()]

    async def requeue(self, job_id: int) -> bool:
        """An operator's retry of a quarantined job: queued now, its attempts counted afresh."""
        stmt = (
            update(_JOBS)
            .where(_JOBS.c.id == job_id, _JOBS.c.status == "quarantined")
            .values(status="queued", attempts=0, run_after=self._now())
        )
        result = await self._db.write(lambda conn, _ctx: conn.execute(stmt))
        return bool(cast(CursorResult[Any], result).rowcount)

    async def get(self, job_id: int) -> Job | None:
        """One job by id, whatever its status."""
        async with self._db.sessions() as s, s.begin():
            row = (await s.execute(select(_JOBS).where(_JOBS.c.id == job_id))).first()
        return None if row is None else _job(row)


def _claim_pg(due: ColumnElement[bool], limit: int, max_attempts: int, claimed: dict[str, Any]) -> Any:
    """Lock up to ``limit`` due rows other claimers are not holding (``SKIP LOCKED``), quarantine
    the exhausted ones among them and claim the rest: one statement, whose rows are the claimed."""
    picked = (
        _oldest(due, limit)
        .add_columns(_JOBS.c.status.label("was"), _JOBS.c.attempts.label("tries"))
        .with_for_update(skip_locked=True)
        .cte("picked")
    )
    spent = and_(picked.c.was == "running", picked.c.tries >= max_attempts)
    dead = _exhausted(_JOBS.c.id == picked.c.id, max_attempts).where(spent).returning(_JOBS.c.id).cte("dead")
    taken = update(_JOBS).where(_JOBS.c.id == picked.c.id, ~spent).values(**claimed).returning(*_JOBS.c).cte("taken")
    return select(taken).add_cte(dead)


def _oldest(due: ColumnElement[bool], limit: int) -> Any:
    return select(_JOBS.c.id).where(due).order_by(_JOBS.c.run_after, _JOBS.c.id).limit(limit)


def _exhausted(where: ColumnElement[bool], max_attempts: int) -> Any:
    """Quarantine running jobs whose lease expired after their last allowed attempt."""
    return (
        update(_JOBS)
        .where(where, _JOBS.c.status == "running", _JOBS.c.attempts >= max_attempts)
        .values(
            status="quarantined",
            locked_by=None,
            last_error="lease expired on the last attempt (its process died or stalled)",
        )
    )
