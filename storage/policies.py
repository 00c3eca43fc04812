"""Applied policy versions (``policy_versions``): the versioned, audited policy.

Each ``signoff policy apply`` adds one row holding the YAML exactly as applied, its
SHA-256, who applied it and the version it replaced, and appends its audit event in
the same transaction. The newest row is the active policy. Rows are never updated or
deleted: a rollback applies the older text again as a new row.

Applies are serialised by the row id: an apply names the id it expects to follow
(:meth:`PolicyVersions.apply`'s ``after_id``) and takes the next one, so of two
concurrent applies over the same active version one commits and the other is
refused with :class:`PolicyMoved` (nothing of it is stored).
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
from storage.models import PolicyVersionRow
from storage.records import wall_clock

_VERSIONS = cast(Table, PolicyVersionRow.__table__)


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

    async def latest(self) -> PolicyVersion | None:
        """The active (newest) applied version, or ``None`` when none was ever applied."""
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

    async def apply(
        self, new: NewPolicyVersion, *, after: PolicyVersion | None, audit: Callable[[int, datetime], AuditEvent]
    ) -> PolicyVersion:
        """Store ``new`` as the version following ``after`` (``None``: the first) and append the
        audit event ``audit(id, applied_at)`` builds, in one transaction.

        Raises :class:`PolicyMoved` (and stores nothing) when ``after`` is no longer the newest row.
        """
        after_id = after.id if after is not None else 0
        now = self._clock()
        values: dict[str, object] = {
            "id": after_id + 1,
            "version": new.version,
            "yaml": new.yaml,
            "sha256": new.sha256,
            "applied_at": now,
            "applied_by": new.applied_by,
            "operator": new.operator,
            "previous_version": after.version if after is not None else None,
        }

        def _apply(conn: Connection, ctx: WriteContext) -> None:
            newest = conn.execute(select(func.max(_VERSIONS.c.id))).scalar() or 0
            if newest != after_id:
                raise PolicyMoved(f"another policy version was applied meanwhile (row {newest}); run it again")
            conn.execute(insert(_VERSIONS), values)
            event = audit(after_id + 1, now)
            append_audit_sync(conn, [event], ctx.audit_head)
            ctx.audit_events.append(event)

        try:
            await self._db.write(_apply)
        except IntegrityError:  # a concurrent apply took the same id first
            raise PolicyMoved("another policy version was applied meanwhile; run it again") from None
        return PolicyVersion(
            id=after_id + 1,
            version=new.version,
            yaml=new.yaml,
            sha256=new.sha256,
            applied_at=utc(now),
            applied_by=new.applied_by,
            operator=new.operator,
            previous_version=after.version if after is not None else None,
        )


__all__ = ["NewPolicyVersion", "PolicyMoved", "PolicyVersion", "PolicyVersions"]
