"""Confirmations (approvals: ``storage/approvals.py``): durable human gates with compare-and-set.

Every status change is ``UPDATE … WHERE id = ? AND version = ? AND status = ?``;
a writer that loses the race changes nothing and learns it from the row count.
The audit events (and any resume job) for a transition commit in the same
transaction as the transition itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from types import SimpleNamespace
from typing import Any, cast

from sqlalchemy import Connection, CursorResult, Table, bindparam, insert, select, update

from storage.audit import AuditEvent, append_audit_many, append_audit_sync, utc
from storage.db import Database, WriteContext
from storage.fastsql import prepared
from storage.models import ApprovalRow, ConfirmationRow
from storage.records import (
    Confirmation,
    ConfirmationStatus,
    NewApproval,
    NewConfirmation,
    aware,
)

_CONF: Table = ConfirmationRow.__table__  # type: ignore[assignment]
# What a step that asks for a confirmation runs, built once (storage.fastsql).
_INSERT_CONF = prepared(insert(_CONF))
_SUPERSEDE = prepared(
    update(_CONF)
    .where(
        _CONF.c.conversation_id == bindparam("s_conv"),
        _CONF.c.status == "pending",
        _CONF.c.principal == bindparam("s_principal"),
        _CONF.c.tool == bindparam("s_tool"),
        _CONF.c.target.is_not_distinct_from(bindparam("s_target")),
        _CONF.c.args_hash != bindparam("s_hash"),
    )
    .values(
        status="superseded", version=_CONF.c.version + 1, decided_at=bindparam("s_at", type_=_CONF.c.decided_at.type)
    )
    .returning(_CONF.c.id, _CONF.c.tool, _CONF.c.args_hash)
)
_MARK_SHOWN = prepared(
    update(_CONF)
    .where(_CONF.c.id == bindparam("cid"), _CONF.c.shown_at.is_(None))
    .values(shown_at=bindparam("shown", type_=_CONF.c.shown_at.type))
)
_PENDING_CONFS = prepared(
    select(_CONF).where(_CONF.c.conversation_id == bindparam("conv"), _CONF.c.status == "pending")
)
_CONFIRMED = prepared(
    select(_CONF)
    .where(
        _CONF.c.conversation_id == bindparam("conv"),
        _CONF.c.principal == bindparam("principal"),
        _CONF.c.tool == bindparam("tool"),
        _CONF.c.args_hash == bindparam("hash"),
        _CONF.c.status == "confirmed",
    )
    .limit(1)
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConfirmationCreated:
    """A new pending confirmation, and the ids of the older ones it replaced."""

    confirmation: Confirmation
    superseded: tuple[str, ...]


def at_utc(ts: datetime) -> datetime:
    """A NOT NULL timestamp, made aware."""
    return utc(ts)


def drafted(new: NewConfirmation) -> Confirmation:
    """The record of ``new`` once stored (pending, version 1)."""
    values = {**record_fields(new), "status": "pending", "version": 1}
    row = SimpleNamespace(**{**dict.fromkeys(_CONF.c.keys()), **values})
    return to_confirmation(row)  # type: ignore[arg-type]


def supersedes(new: NewConfirmation, old: Confirmation) -> bool:
    """Whether asking ``new`` supersedes the pending ``old``: the same principal, tool and target
    (same order, same account field) with other arguments — what ``_SUPERSEDE`` selects, for a
    confirmation not yet written (``agent.gates``; ``tests/test_supersede.py`` holds them equal)."""
    return (
        old.status == "pending"
        and old.conversation_id == new.conversation_id
        and old.principal == new.principal
        and old.tool == new.tool
        and old.target == new.target
        and old.args_hash != new.args_hash
    )


def create_confirmation(
    conn: Connection, ctx: WriteContext, new: NewConfirmation, audit: Sequence[AuditEvent]
) -> tuple[str, ...]:
    """Insert a pending confirmation, in the caller's transaction; the ids it superseded. A
    pending one of the same principal for the same tool on the same target (same order, same
    account field) is superseded and that transition audited; confirmations of anything else
    stay pending beside it."""
    match = {
        "s_conv": new.conversation_id,
        "s_principal": new.principal,
        "s_tool": new.tool,
        "s_target": new.target,
        "s_hash": new.args_hash,
        "s_at": new.created_at,
    }
    superseded = conn.execute(_SUPERSEDE, match).all()
    conn.execute(_INSERT_CONF, {**record_fields(new), "status": "pending", "version": 1})
    events = list(audit)
    if events:
        events += [
            dataclasses.replace(
                events[0],
                kind="confirmation.superseded",
                tool=tool,
                args_hash=h,
                data={"confirmation_id": cid, "superseded_by": new.id},
            )
            for cid, tool, h in superseded
        ]
        append_audit_sync(conn, events, ctx.audit_head)
        ctx.audit_events.extend(events)
    return tuple(c for c, _t, _h in superseded)


def pending_confirmations(conn: Connection, conversation_id: str) -> list[Confirmation]:
    """The conversation's pending confirmations (inside the caller's transaction)."""
    return [to_confirmation(r) for r in conn.execute(_PENDING_CONFS, {"conv": conversation_id}).all()]  # type: ignore[arg-type]


def to_confirmation(r: ConfirmationRow) -> Confirmation:
    """The frozen record of a confirmation row."""
    return Confirmation(
        id=r.id,
        conversation_id=r.conversation_id,
        run_id=r.run_id,
        proposal_id=r.proposal_id,
        tool=r.tool,
        arguments=r.arguments,
        args_hash=r.args_hash,
        principal=r.principal,
        code=r.code,
        summary=r.summary,
        status=cast(ConfirmationStatus, r.status),
        version=r.version,
        created_at=at_utc(r.created_at),
        decided_at=aware(r.decided_at),
        target=r.target,
        idempotency_key=r.idempotency_key,
        shown_at=aware(r.shown_at),
        outcome=r.outcome,
        surfaces=dict(r.surfaces or {}),
    )


class ConfirmationRepo:
    """Confirmations: pending, answered, superseded and consumed, each move compare-and-set."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(self, new: NewConfirmation, *, audit: Sequence[AuditEvent] = ()) -> ConfirmationCreated:
        """Insert a pending confirmation (see :func:`create_confirmation`)."""
        superseded = await self.db.write(lambda conn, ctx: create_confirmation(conn, ctx, new, audit))
        return ConfirmationCreated(confirmation=drafted(new), superseded=superseded)

    async def mark_shown(self, ids: Sequence[str], at: datetime) -> None:
        """Record that the runtime's own text of these confirmations reached their principal."""
        if not ids:
            return
        params = [{"cid": i, "shown": at} for i in ids]
        await self.db.write(lambda conn, _ctx: conn.execute(_MARK_SHOWN, params))

    async def set_surface(self, confirmation_id: str, surface: str, ref: dict[str, Any] | None) -> None:
        """Record where ``surface`` shows this confirmation's card (``None`` forgets it)."""
        await set_surface(self.db, ConfirmationRow, confirmation_id, surface, ref)

    async def get(self, confirmation_id: str) -> Confirmation | None:
        """The confirmation ``confirmation_id``, if it exists."""
        async with self.db.reader() as s:
            r = await s.get(ConfirmationRow, confirmation_id)
            return to_confirmation(r) if r else None

    async def pending(self, conversation_id: str) -> list[Confirmation]:
        """The conversation's pending confirmations."""
        return await self.db.read(lambda conn: pending_confirmations(conn, conversation_id))

    async def pending_by_code(self, conversation_id: str, code: str) -> Confirmation | None:
        """The pending confirmation in this conversation whose code is ``code`` (email replies)."""
        async with self.db.reader() as s:
            r = (
                await s.execute(
                    select(ConfirmationRow)
                    .where(
                        ConfirmationRow.conversation_id == conversation_id,
                        ConfirmationRow.code == code.upper(),
                        ConfirmationRow.status == "pending",
                    )
                    .limit(1)
                )
            ).scalar_one_or_none()
            return to_confirmation(r) if r else None

    async def find_confirmed(
        self, conversation_id: str, principal: str, tool: str, args_hash: str
    ) -> Confirmation | None:
        """A confirmed, not yet consumed confirmation of exactly these arguments."""
        params = {"conv": conversation_id, "principal": principal, "tool": tool, "hash": args_hash}
        r = await self.db.read(lambda conn: conn.execute(_CONFIRMED, params).first())
        return to_confirmation(r) if r else None  # type: ignore[arg-type]

    async def transition(
        self,
        confirmation_id: str,
        *,
        expected_version: int,
        from_status: str,
        to_status: str,
        at: datetime,
        audit: Sequence[AuditEvent] = (),
    ) -> Confirmation | None:
        """Compare-and-set; ``None`` when another writer got there first."""
        async with self.db.sessions() as s, s.begin():
            res = await s.execute(
                update(ConfirmationRow)
                .where(
                    ConfirmationRow.id == confirmation_id,
                    ConfirmationRow.version == expected_version,
                    ConfirmationRow.status == from_status,
                )
                .values(status=to_status, version=expected_version + 1, decided_at=at)
            )
            if cast(CursorResult[Any], res).rowcount != 1:
                return None
            if audit:
                await append_audit_many(s, list(audit))
            r = await s.get(ConfirmationRow, confirmation_id)
            assert r is not None
            return to_confirmation(r)


async def set_surface(
    db: Database,
    row_type: type[ApprovalRow] | type[ConfirmationRow],
    row_id: str,
    surface: str,
    ref: dict[str, Any] | None,
) -> None:
    """Record where ``surface`` shows a confirmation or an approval (``None`` forgets it)."""
    async with db.sessions() as s, s.begin():
        row: ApprovalRow | ConfirmationRow | None = await s.get(row_type, row_id, with_for_update=True)
        if row is None:
            return
        surfaces = dict(row.surfaces or {})
        if ref is None:
            surfaces.pop(surface, None)
        else:
            surfaces[surface] = ref
        row.surfaces = surfaces


def record_fields(new: NewConfirmation | NewApproval) -> dict[str, Any]:
    """A new record's fields as column values (shallow: JSON values are stored as given)."""
    return {f.name: getattr(new, f.name) for f in dataclasses.fields(new)}
