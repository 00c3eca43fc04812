"""Policy versions (``policy_versions``) and the audit events that put them in force.

Each ``signoff policy apply`` adds one row holding the YAML exactly as given, its SHA-256,
who applied it and the version in force before, and appends its audit event in the same
transaction: ``policy.applied`` (in force now) or ``policy.proposed`` (a change to approvers,
ceilings or rollout, in force once a second supervisor's ``policy.applied`` names it). A row
is in force only through such an event carrying its id and sha256: a row inserted straight
into the table is ignored. Rows are never updated or deleted: a rollback applies the older
text again as a new row.

Writes are serialised by the newest ``policy.applied`` event: each names the seq it read, so
of two concurrent applies one commits and the other is refused with :class:`PolicyMoved` (nothing of it is stored).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, func, insert, select
from sqlalchemy.exc import IntegrityError

from storage.audit import AuditEvent, append_audit_sync, sha256_hex, utc
from storage.db import Database, WriteContext
from storage.models import AuditEventRow, PolicyVersionRow
from storage.records import wall_clock

_VERSIONS = cast(Table, PolicyVersionRow.__table__)
_EVENTS = cast(Table, AuditEventRow.__table__)
#: A row comes into force only with this event (its row id and sha256) in the audit chain.
APPLIED = "policy.applied"
#: A change one supervisor made that waits for a second (approvers, ceilings, rollout).
PROPOSED = "policy.proposed"
#: The version a process started with (the policy file or the bundled default) seen for the first
#: time: its row records that text under that version string, never in force through this event.
RECORDED = "policy.recorded"
POLICY_EVENTS = (APPLIED, PROPOSED, RECORDED)
#: ``applied_by`` of a row :meth:`PolicyVersions.record_seen` stored.
AT_START = "(start-up)"


@dataclass(frozen=True, kw_only=True)
class NewPolicyVersion:
    """A policy to apply: its version and the YAML text as given, and who applies it."""

    version: str
    yaml: str
    applied_by: str
    operator: str

    @property
    def sha256(self) -> str:
        """Hex SHA-256 of the YAML text (UTF-8)."""
        return sha256_hex(self.yaml)


@dataclass(frozen=True, kw_only=True)
class PolicyVersion:
    """An applied policy version (a stored row)."""

    id: int
    version: str
    yaml: str
    sha256: str
    applied_at: datetime
    applied_by: str
    operator: str
    previous_version: str | None


@dataclass(frozen=True, kw_only=True)
class PolicyEvent:
    """A ``policy.proposed`` or ``policy.applied`` audit event: which row, with which sha256."""

    seq: int
    kind: str
    row: int
    sha256: str
    data: dict[str, Any]


class PolicyMoved(Exception):
    """Another apply committed first: the active version is no longer the one this apply followed."""


def _record(row: Any) -> PolicyVersion:
    values = dict(row._mapping)
    values["applied_at"] = utc(values["applied_at"])
    return PolicyVersion(**values)


class PolicyVersions:
    """Repository over ``policy_versions``."""

    def __init__(self, db: Database, *, clock: Callable[[], datetime] | None = None) -> None:
        self._db = db
        self._clock = clock or wall_clock

    @property
    def db(self) -> Database:
        """The database the versions (and their audit events) live in."""
        return self._db

    async def latest(self) -> PolicyVersion | None:
        """The newest row stored (in force or not: see ``agent.policy_store.active_policy``)."""
        async with self._db.reader() as s:
            row = (await s.execute(select(_VERSIONS).order_by(_VERSIONS.c.id.desc()).limit(1))).first()
        return _record(row) if row is not None else None

    async def latest_id(self) -> int | None:
        """The newest row's id only: the cheap check a running process polls."""
        async with self._db.reader() as s:
            return cast(int | None, (await s.execute(select(func.max(_VERSIONS.c.id)))).scalar())

    async def with_version(self, version: str) -> list[PolicyVersion]:
        """Every applied row that carried ``version`` (oldest first)."""
        async with self._db.reader() as s:
            rows = (
                await s.execute(select(_VERSIONS).where(_VERSIONS.c.version == version).order_by(_VERSIONS.c.id))
            ).all()
        return [_record(r) for r in rows]

    async def history(self, limit: int = 20) -> list[PolicyVersion]:
        """The newest ``limit`` applied versions, newest first."""
        async with self._db.reader() as s:
            rows = (await s.execute(select(_VERSIONS).order_by(_VERSIONS.c.id.desc()).limit(limit))).all()
        return [_record(r) for r in rows]

    async def get(self, row_id: int) -> PolicyVersion | None:
        """The row ``row_id``, if it exists."""
        async with self._db.reader() as s:
            row = (await s.execute(select(_VERSIONS).where(_VERSIONS.c.id == row_id))).first()
        return _record(row) if row is not None else None

    async def ids(self) -> list[int]:
        """Every row id (a handful: one per apply)."""
        async with self._db.reader() as s:
            return [int(i) for i in (await s.execute(select(_VERSIONS.c.id).order_by(_VERSIONS.c.id))).scalars()]

    async def events(self) -> list[PolicyEvent]:
        """Every ``policy.proposed`` and ``policy.applied`` audit event, in seq order."""
        stmt = select(_EVENTS.c.seq, _EVENTS.c.kind, _EVENTS.c.data).where(_EVENTS.c.kind.in_(POLICY_EVENTS))
        async with self._db.reader() as s:
            rows = (await s.execute(stmt.order_by(_EVENTS.c.seq))).all()
        return [e for e in (_event(seq, kind, data) for seq, kind, data in rows) if e is not None]

    async def latest_event_seq(self) -> int | None:
        """The newest policy event's seq: the cheap check a running process polls (an index)."""
        stmt = select(func.max(_EVENTS.c.seq)).where(_EVENTS.c.kind.in_(POLICY_EVENTS))
        async with self._db.reader() as s:
            return cast(int | None, (await s.execute(stmt)).scalar())

    async def add(
        self,
        new: NewPolicyVersion,
        *,
        in_force: PolicyVersion | None,
        audit: Callable[[int, datetime], AuditEvent],
        after_seq: int | None = None,
    ) -> PolicyVersion:
        """Store ``new`` (proposed over ``in_force``) with the audit event ``audit(id, at)`` builds
        (``policy.applied`` puts it in force; ``policy.proposed`` waits for a second supervisor),
        in one transaction. Raises :class:`PolicyMoved` (storing nothing) when a ``policy.applied``
        event was appended after seq ``after_seq`` (the newest one the caller read) meanwhile."""
        try:
            return await self._insert(new, in_force, audit, check=True, after_seq=after_seq)
        except IntegrityError:  # a concurrent apply took the same id first
            raise PolicyMoved("another policy version was applied meanwhile; run it again") from None

    async def _insert(
        self,
        new: NewPolicyVersion,
        in_force: PolicyVersion | None,
        audit: Callable[[int, datetime], AuditEvent],
        *,
        check: bool = False,
        after_seq: int | None = None,
    ) -> PolicyVersion:
        now = self._clock()
        values: dict[str, object] = {
            "version": new.version,
            "yaml": new.yaml,
            "sha256": new.sha256,
            "applied_at": now,
            "applied_by": new.applied_by,
            "operator": new.operator,
            "previous_version": in_force.version if in_force is not None else None,
        }

        def _add(conn: Connection, ctx: WriteContext) -> int:
            if check:
                _check_in_force(conn, after_seq)
            row_id = int(conn.execute(select(func.max(_VERSIONS.c.id))).scalar() or 0) + 1
            conn.execute(insert(_VERSIONS), {**values, "id": row_id})
            _append(conn, ctx, audit(row_id, now))
            return row_id

        row_id = await self._db.write(_add)
        return PolicyVersion(id=row_id, **{**values, "applied_at": utc(now)})  # type: ignore[arg-type]

    async def record_seen(self, version: str, text: str, *, source: str) -> PolicyVersion:
        """The row holding ``version``: the one stored (whatever its text: the caller compares the
        sha256), else a new row for ``text`` with its ``policy.recorded`` audit event, in one
        transaction (two processes starting at once store it once)."""
        new = NewPolicyVersion(version=version, yaml=text, applied_by=AT_START, operator=source[-64:])

        def event(row_id: int, at: datetime) -> AuditEvent:
            data = {"row": row_id, "sha256": new.sha256, "version": version, "source": source}
            return AuditEvent(kind=RECORDED, principal="system", policy_version=version, ts=at, data=data)

        for _ in range(3):
            rows = await self.with_version(version)
            if rows:
                return rows[-1]
            try:
                return await self._insert(new, None, event)
            except IntegrityError:  # another process stored a row first: read it
                continue
        raise PolicyMoved("policy_versions kept moving while recording the start-up version")

    async def record(self, *, event: AuditEvent, after_seq: int | None) -> None:
        """Append ``event`` (a second supervisor's ``policy.applied`` of a proposed row) if no
        ``policy.applied`` came after seq ``after_seq``; else :class:`PolicyMoved`, nothing stored."""

        def _record_event(conn: Connection, ctx: WriteContext) -> None:
            _check_in_force(conn, after_seq)
            _append(conn, ctx, event)

        await self._db.write(_record_event)


def _append(conn: Connection, ctx: WriteContext, event: AuditEvent) -> None:
    append_audit_sync(conn, [event], ctx.audit_head)
    ctx.audit_events.append(event)


def _check_in_force(conn: Connection, expected: int | None) -> None:
    """Raise :class:`PolicyMoved` unless the newest ``policy.applied`` event is at seq ``expected``
    (its seq, not the row it names: an event written outside ``signoff policy`` that is not in
    force must not block every later apply)."""
    current = conn.execute(select(func.max(_EVENTS.c.seq)).where(_EVENTS.c.kind == APPLIED)).scalar()
    if current != expected:
        raise PolicyMoved(f"another policy.applied event was appended meanwhile (seq {current}); run it again")


def _event(seq: int, kind: str, data: Any) -> PolicyEvent | None:
    if not isinstance(data, dict) or not isinstance(data.get("row"), int) or not isinstance(data.get("sha256"), str):
        return None
    return PolicyEvent(seq=seq, kind=kind, row=data["row"], sha256=data["sha256"], data=data)


__all__ = [
    "APPLIED",
    "AT_START",
    "PROPOSED",
    "RECORDED",
    "NewPolicyVersion",
    "PolicyEvent",
    "PolicyMoved",
    "PolicyVersion",
    "PolicyVersions",
]
