"""Durable inbound: what a face accepted, before it answered 200, and what was done with it.

``accept`` writes, in one transaction, the message's delivery keys (``processed_events``:
a Slack ``event_id`` and the message's (team, channel, ts), a Teams activity id, an email's
sender + Message-ID), the message itself (``inbound``) and the job that will run its turn.
A redelivery with any known key writes nothing. The worker then runs the turn, stores the
result (``answered``), posts it and marks it ``delivered``; a crash between any two of
those steps is resumed from what is stored.

``Deliveries`` makes each outbound message happen once per key: ``begin`` claims the key
(or says it was sent, or that a live process is sending it), ``sent`` records where it
went. A process that died between Slack's answer and ``sent`` leaves a claim whose holder
is dead: the next attempt posts again (at least once, never lost).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

from sqlalchemy import (
    ColumnElement,
    Connection,
    Table,
    bindparam,
    exists,
    func,
    insert,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from storage.db import Database, WriteContext
from storage.fastsql import prepared
from storage.holders import is_dead, process_id
from storage.jobs import JobQueue
from storage.models import DeliveryRow, InboundRow, JobRow, ProcessedEventRow
from storage.records import aware, wall_clock

InboundStatus = Literal["queued", "answered", "delivered", "ignored", "failed"]
Clock = Callable[[], datetime]
INBOUND_JOB = "inbound"
_KEYS = cast(Table, ProcessedEventRow.__table__)
_DELIVERIES = cast(Table, DeliveryRow.__table__)
_INBOUND = cast(Table, InboundRow.__table__)
_JOBS = cast(Table, JobRow.__table__)
MAX_KEY = 255


@dataclass(frozen=True, kw_only=True)
class Inbound:
    """One accepted message: the face's normalised ``payload`` and, once answered, ``result``."""

    id: str
    face: str
    status: InboundStatus
    payload: dict[str, Any]
    result: dict[str, Any] | None
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class Accepted:
    """What ``accept`` did: ``fresh`` is false for a redelivery (``id`` is then ``None``);
    ``full`` is true when nothing was stored because the queue is at its cap (retry later)."""

    id: str | None
    fresh: bool
    full: bool = False


_GET_INBOUND = prepared(select(_INBOUND).where(_INBOUND.c.id == bindparam("i")))
_SET_INBOUND = prepared(
    update(_INBOUND)
    .where(_INBOUND.c.id == bindparam("i"))
    .values(status=bindparam("status"), updated_at=bindparam("now", type_=_INBOUND.c.updated_at.type))
)
_SET_INBOUND_RESULT = prepared(
    update(_INBOUND)
    .where(_INBOUND.c.id == bindparam("i"))
    .values(
        status=bindparam("status"),
        result=bindparam("result", type_=_INBOUND.c.result.type),
        updated_at=bindparam("now", type_=_INBOUND.c.updated_at.type),
    )
)


def _inbound(row: InboundRow) -> Inbound:
    return Inbound(
        id=row.id,
        face=row.face,
        status=cast(InboundStatus, row.status),
        payload=dict(row.payload),
        result=dict(row.result) if row.result is not None else None,
        created_at=aware(row.created_at) or row.created_at,
    )


def _dialect(session: AsyncSession) -> Any:
    return postgresql if session.get_bind().dialect.name == "postgresql" else sqlite


def _dialect_of(conn: Connection) -> Any:
    return postgresql if conn.dialect.name == "postgresql" else sqlite


def _queued(conn: Connection, cap: int) -> int:
    """Inbound messages waiting for the worker, counted up to ``cap`` (bounded work at any depth)."""
    waiting = select(_INBOUND.c.id).where(_INBOUND.c.status == "queued").limit(cap).subquery()
    return int(conn.execute(select(func.count()).select_from(waiting)).scalar_one())


def _any_known(keys: Sequence[str]) -> Any:
    return select(_KEYS.c.event_id).where(_KEYS.c.event_id.in_(list(keys))).limit(1)


#: The columns the acceptance binds, of the message and of its turn's job.
_MESSAGE = ("id", "face", "status", "payload", "result", "created_at", "updated_at")
_TURN = ("kind", "payload", "dedup_key", "status", "attempts", "run_after", "created_at")


@functools.lru_cache(maxsize=16)
def _acceptance(keys: int, capped: bool) -> Any:
    """The PostgreSQL acceptance (:meth:`Inbox._accept_pg`) of a message with ``keys`` distinct
    keys (``k0``…), a row ``(known, room, id)``; built once per shape, its values all bound."""
    given = [bindparam(f"k{n}", type_=_KEYS.c.event_id.type) for n in range(keys)]
    room: ColumnElement[bool] = true()
    if capped:
        waiting = select(_INBOUND.c.id).where(_INBOUND.c.status == "queued").limit(bindparam("cap")).subquery()
        room = select(func.count()).select_from(waiting).scalar_subquery() < bindparam("cap")
    # Read once (a CTE is evaluated once), then each insert asks it.
    known = exists(select(_KEYS.c.event_id).where(_KEYS.c.event_id.in_(given)))
    gate = select(known.label("known"), room.label("room")).cte("gate")
    go = select(gate.c.known).where(~gate.c.known, gate.c.room).exists()
    source = bindparam("source", type_=_KEYS.c.source.type)
    now = bindparam("now", type_=_KEYS.c.received_at.type)
    recorded = [
        insert(_KEYS)
        .from_select(["event_id", "source", "received_at"], select(key, source, now).where(go))
        .returning(_KEYS.c.event_id)
        .cte(f"recorded{n}")
        for n, key in enumerate(given)
    ]
    message = _insert_if(_INBOUND, "m_", _MESSAGE, go).returning(_INBOUND.c.id).cte("message")
    turn = _insert_if(_JOBS, "j_", _TURN, go).returning(_JOBS.c.id).cte("turn")
    accepted = select(message.c.id).scalar_subquery()
    return prepared(select(gate.c.known, gate.c.room, accepted.label("id")).add_cte(*recorded, turn))


def _insert_if(table: Table, prefix: str, names: tuple[str, ...], go: ColumnElement[bool]) -> Any:
    """``INSERT INTO table SELECT <bound columns> WHERE go``, each bound as ``prefix + name``."""
    typed = [bindparam(prefix + name, type_=table.c[name].type).label(name) for name in names]
    return insert(table).from_select(list(names), select(*typed).where(go))


class _Known(Exception):
    """A key was recorded by a concurrent delivery: roll the whole acceptance back."""


class Inbox:
    """Repository over ``inbound`` (with ``processed_events`` for its keys and ``jobs``)."""

    def __init__(self, db: Database, jobs: JobQueue, *, clock: Clock | None = None) -> None:
        self._db = db
        self._jobs = jobs
        self._clock = clock or wall_clock

    async def accept(
        self, face: str, keys: Sequence[str], payload: dict[str, Any], *, max_queued: int | None = None
    ) -> Accepted:
        """Record the message under all its ``keys`` and queue its turn, in one transaction;
        nothing is written when any key was recorded before, nor (``full``) when ``max_queued``
        messages already wait for the worker (its keys stay unknown, so a retry is accepted)."""
        if not keys or any(not k or len(k) > MAX_KEY for k in keys):
            raise ValueError(f"inbound keys must be 1..{MAX_KEY} characters")
        now = self._clock()
        inbound_id = f"in_{uuid.uuid4().hex[:20]}"
        jobs = self._jobs

        def write(conn: Connection, _ctx: WriteContext) -> Accepted:
            # One transaction in one hop (the writer's thread on SQLite): the ack never waits on a
            # busy event loop between its statements while it holds SQLite's write lock.
            known = conn.execute(select(_KEYS.c.event_id).where(_KEYS.c.event_id.in_(list(keys)))).first()
            if known is not None:
                return Accepted(id=None, fresh=False)
            if max_queued is not None and _queued(conn, max_queued) >= max_queued:
                return Accepted(id=None, fresh=False, full=True)
            insert = _dialect_of(conn).insert
            for key in dict.fromkeys(keys):
                stmt = (
                    insert(_KEYS)
                    .values(event_id=key, source=face[:16], received_at=now)
                    .on_conflict_do_nothing(index_elements=["event_id"])
                    .returning(_KEYS.c.event_id)
                )
                if conn.execute(stmt).scalar_one_or_none() is None:
                    # A concurrent delivery recorded it first: let ours leave no trace.
                    raise _Known
            conn.execute(
                insert(_INBOUND).values(
                    id=inbound_id,
                    face=face,
                    status="queued",
                    payload=payload,
                    result=None,
                    created_at=now,
                    updated_at=now,
                )
            )
            jobs.insert(conn, INBOUND_JOB, {"inbound_id": inbound_id}, dedup_key=f"inbound:{inbound_id}")
            return Accepted(id=inbound_id, fresh=True)

        try:
            if self._db.is_postgres:
                accepted = await self._accept_pg(face, keys, payload, now, inbound_id, max_queued)
            else:
                accepted = await self._db.write(write)
        except _Known:
            return Accepted(id=None, fresh=False)
        if accepted.fresh:
            self._jobs.queued.set()  # committed: this process's worker takes it now
        return accepted

    async def _accept_pg(
        self,
        face: str,
        keys: Sequence[str],
        payload: dict[str, Any],
        now: datetime,
        inbound_id: str,
        max_queued: int | None,
    ) -> Accepted:
        """:meth:`accept` on PostgreSQL: one statement in autocommit, one round trip (it was
        eight: ``BEGIN``, the key check, the queue count, each key, the message, the job,
        ``COMMIT``). Its inserts are CTEs gated on "no key known, room in the queue", read in
        the statement's one snapshot, so they all happen or none does. A concurrent delivery that
        records a key first makes ours violate the key's primary key, and the whole statement
        is undone: that is the redelivery answer, as the key check's would have been."""
        row = {
            "id": inbound_id,
            "face": face,
            "status": "queued",
            "payload": payload,
            "result": None,
            "created_at": now,
            "updated_at": now,
        }
        job = self._jobs.queued_values(INBOUND_JOB, {"inbound_id": inbound_id}, dedup_key=f"inbound:{inbound_id}")
        distinct = list(dict.fromkeys(keys))
        statement = _acceptance(len(distinct), max_queued is not None)
        params: dict[str, Any] = {f"k{n}": key for n, key in enumerate(distinct)}
        params.update(source=face[:16], now=now)
        if max_queued is not None:
            params["cap"] = max_queued
        params.update({f"m_{name}": row[name] for name in _MESSAGE})
        params.update({f"j_{name}": job[name] for name in _TURN})
        try:
            known, room, accepted_id = await self._db.write_statement(
                lambda conn, _ctx: conn.execute(statement, params).one()
            )
        except IntegrityError:
            if await self._db.read(lambda conn: conn.execute(_any_known(keys)).first()) is None:
                raise  # not a key recorded meanwhile: a real fault
            raise _Known from None
        if known:
            return Accepted(id=None, fresh=False)
        if not room:
            return Accepted(id=None, fresh=False, full=True)
        return Accepted(id=str(accepted_id), fresh=True)

    async def get(self, inbound_id: str) -> Inbound | None:
        """The inbound item ``inbound_id``, if it exists."""
        row = await self._db.read(lambda conn: conn.execute(_GET_INBOUND, {"i": inbound_id}).first())
        return _inbound(row) if row is not None else None  # type: ignore[arg-type]

    async def answered(self, inbound_id: str, result: dict[str, Any]) -> None:
        """The turn's result is stored: from now on only its delivery is owed."""
        await self._set(inbound_id, status="answered", result=result)

    async def finish(self, inbound_id: str, status: InboundStatus) -> None:
        """``delivered``, ``ignored`` or ``failed``: nothing more is owed."""
        await self._set(inbound_id, status=status)

    async def _set(self, inbound_id: str, status: InboundStatus, result: dict[str, Any] | None = None) -> None:
        # Once or twice per turn of every durable face: a prepared statement (storage.fastsql).
        params: dict[str, Any] = {"i": inbound_id, "status": status, "now": self._clock()}
        stmt = _SET_INBOUND
        if result is not None:
            params["result"] = result
            stmt = _SET_INBOUND_RESULT
        await self._db.write_statement(lambda conn, _ctx: conn.execute(stmt, params))

    async def owed(self, *, limit: int = 100) -> list[Inbound]:
        """Accepted messages not yet delivered (operators, tests)."""
        async with self._db.reader() as s:
            rows = (
                await s.execute(
                    select(InboundRow)
                    .where(InboundRow.status.in_(("queued", "answered")))
                    .order_by(InboundRow.created_at)
                    .limit(limit)
                )
            ).scalars()
            return [_inbound(r) for r in rows]


DeliveryState = Literal["go", "sent", "busy"]


class Deliveries:
    """Repository over ``deliveries``: each outbound message posted once per key."""

    def __init__(self, db: Database, *, clock: Clock | None = None) -> None:
        self._db = db
        self._clock = clock or wall_clock

    async def begin(self, key: str) -> DeliveryState:
        """``go``: this process now sends it; ``sent``: it went out before; ``busy``: a live
        process is sending it right now."""
        if not key or len(key) > 200:
            raise ValueError("delivery key must be 1..200 characters")
        now, me = self._clock(), process_id()
        async with self._db.sessions() as s, s.begin():
            stmt = (
                _dialect(s)
                .insert(_DELIVERIES)
                .values(key=key, status="sending", holder=me, ref=None, created_at=now, updated_at=now)
                .on_conflict_do_nothing(index_elements=["key"])
                .returning(_DELIVERIES.c.key)
            )
            if (await s.execute(stmt)).scalar_one_or_none() is not None:
                return "go"
            row = await s.get(DeliveryRow, key)
            if row is None or row.status == "sent":
                return "sent"
            if row.holder is not None and row.holder != me and not is_dead(row.holder):
                return "busy"
            taken = await s.execute(
                update(DeliveryRow)
                .where(DeliveryRow.key == key, DeliveryRow.status == "sending", DeliveryRow.holder == row.holder)
                .values(holder=me, updated_at=now)
            )
            return "go" if cast(Any, taken).rowcount == 1 else "busy"

    async def sent(self, key: str, ref: dict[str, Any] | None = None) -> None:
        """It went out (``ref``: where, e.g. the Slack channel and message ts)."""
        async with self._db.sessions() as s, s.begin():
            await s.execute(
                update(DeliveryRow)
                .where(DeliveryRow.key == key)
                .values(status="sent", ref=ref, updated_at=self._clock())
            )

    async def release(self, key: str) -> None:
        """Sending failed before anything went out: the next attempt may try again."""
        async with self._db.sessions() as s, s.begin():
            row = await s.get(DeliveryRow, key)
            if row is not None and row.status == "sending":
                await s.delete(row)

    async def ref(self, key: str) -> dict[str, Any] | None:
        """Where the message sent under ``key`` went, once sent."""
        async with self._db.reader() as s:
            row = await s.get(DeliveryRow, key)
            return dict(row.ref) if row is not None and row.ref is not None else None


__all__ = [
    "INBOUND_JOB",
    "Accepted",
    "Deliveries",
    "DeliveryState",
    "Inbound",
    "Inbox",
    "InboundStatus",
]
