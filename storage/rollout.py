"""What ``signoff rollout report`` compares: the shadow stage's recorded proposals and what
staff actually executed, read from ``proposals`` with their conversations (read-only).

A shadow proposal is one the gate decided ``record`` (everything checked out; recorded, not
executed). A staff action is a proposal a rep or supervisor's run executed without error
(``execute``), whether the model proposed it or the runtime did after a confirmation, or an
action staff made outside signoff that the shop told us about (:class:`OutsideActions`: a
refund in the Shopify admin, learnt from its webhook).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, case, func, literal, null, or_, select
from sqlalchemy.dialects import postgresql, sqlite

from storage.audit import utc
from storage.db import Database
from storage.models import ConversationRow, MessageRow, OutsideStaffActionRow, ProposalRow, RunRow

_P = cast(Table, ProposalRow.__table__)
_C = cast(Table, ConversationRow.__table__)
_M = cast(Table, MessageRow.__table__)
_O = cast(Table, OutsideStaffActionRow.__table__)
_R = cast(Table, RunRow.__table__)


@dataclass(frozen=True, kw_only=True)
class ShadowProposal:
    """An action the agent proposed in the shadow stage (recorded, not executed)."""

    id: str
    conversation_id: str
    tool: str
    arguments: Any
    created_at: datetime
    channel: str
    principal_kind: str
    customer_id: str | None
    policy_version: str
    #: What the gate answered (``would_need``: ``approval`` or ``execute`` had it not been shadow).
    result: Any = None


@dataclass(frozen=True, kw_only=True)
class StaffAction:
    """An action a rep or supervisor executed (it succeeded)."""

    proposal_id: str
    tool: str
    arguments: Any
    created_at: datetime
    principal: str
    customer_id: str | None
    #: ``signoff`` (assist, approvals, the CLI), or where the shop told us: ``shopify`` (its
    #: webhooks), ``sandbox`` (``signoff store admin``).
    source: str = "signoff"
    #: The signoff conversation it was taken in (``None``: outside signoff).
    conversation_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class ConversationFacts:
    """A conversation active in the window: its unit, customer, start, whether it escalated."""

    id: str
    channel: str
    principal_kind: str
    customer_id: str | None
    started_at: datetime
    escalated: bool


class RolloutFacts:
    """Read-only queries over proposals for the rollout report."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def shadow_proposals(self, *, since: datetime, until: datetime) -> list[ShadowProposal]:
        """Every ``record`` decision in ``[since, until]``, oldest first."""
        stmt = (
            select(
                _P.c.id,
                _P.c.conversation_id,
                _P.c.tool,
                _P.c.arguments,
                _P.c.created_at,
                _P.c.policy_version,
                _P.c.result,
                _C.c.channel,
                _C.c.principal_kind,
                _C.c.customer_id,
            )  # fmt: skip
            .join(_C, _C.c.id == _P.c.conversation_id)
            .where(_P.c.decision == "record", _P.c.created_at >= since, _P.c.created_at <= until)
            .order_by(_P.c.created_at, _P.c.id)
        )
        async with self._db.reader() as s:
            rows = (await s.execute(stmt)).all()
        return [ShadowProposal(**{**r._mapping, "created_at": utc(r.created_at)}) for r in rows]

    async def staff_actions(self, tools: Iterable[str], *, since: datetime, until: datetime) -> list[StaffAction]:
        """Every action of ``tools`` a rep or supervisor executed without error in ``[since, until]``, oldest first."""
        names = sorted(set(tools))
        if not names:
            return []
        stmt = (
            select(
                _P.c.id.label("proposal_id"),
                _P.c.tool,
                _P.c.arguments,
                _P.c.created_at,
                _P.c.principal,
                _C.c.customer_id,
                literal("signoff").label("source"),
                _P.c.conversation_id,
            )
            .join(_C, _C.c.id == _P.c.conversation_id)
            .where(
                _P.c.decision == "execute",
                _P.c.is_error.is_(False),
                _P.c.tool.in_(names),
                or_(_P.c.principal.like("rep:%"), _P.c.principal.like("supervisor:%")),
                _P.c.created_at >= since,
                _P.c.created_at <= until,
            )
            .order_by(_P.c.created_at, _P.c.id)
        )
        outside = select(
            _O.c.id.label("proposal_id"), _O.c.tool, _O.c.arguments, _O.c.created_at, _O.c.principal,
            _O.c.customer_id, _O.c.source, null().label("conversation_id"),
        ).where(_O.c.tool.in_(names), _O.c.created_at >= since, _O.c.created_at <= until)  # fmt: skip
        async with self._db.reader() as s:
            rows = [*(await s.execute(stmt)).all(), *(await s.execute(outside)).all()]
        actions = [StaffAction(**{**r._mapping, "created_at": utc(r.created_at)}) for r in rows]
        return sorted(actions, key=lambda a: (a.created_at, a.proposal_id))

    async def conversations(self, *, since: datetime, until: datetime) -> list[ConversationFacts]:
        """Every conversation with a run started in ``[since, until]``: its first run's start, and
        whether any of its runs escalated (oldest first)."""
        escalated = func.max(case((_R.c.status == "escalated", 1), else_=0))
        stmt = (
            select(
                _C.c.id,
                _C.c.channel,
                _C.c.principal_kind,
                _C.c.customer_id,
                func.min(_R.c.created_at).label("started_at"),
                escalated.label("escalated"),
            )
            .join(_R, _R.c.conversation_id == _C.c.id)
            .where(_R.c.created_at >= since, _R.c.created_at <= until)
            .group_by(_C.c.id, _C.c.channel, _C.c.principal_kind, _C.c.customer_id)
            .order_by("started_at", _C.c.id)
        )
        async with self._db.reader() as s:
            rows = (await s.execute(stmt)).all()
        return [
            ConversationFacts(**{**r._mapping, "started_at": utc(r.started_at), "escalated": bool(r.escalated)})
            for r in rows
        ]

    async def outside_counts(self, *, since: datetime, until: datetime) -> dict[str, int]:
        """Staff actions made outside signoff (the shop's admin) in ``[since, until]``, by tool."""
        stmt = (
            select(_O.c.tool, func.count())
            .where(_O.c.created_at >= since, _O.c.created_at <= until)
            .group_by(_O.c.tool)
        )
        async with self._db.reader() as s:
            return {str(tool): int(n) for tool, n in (await s.execute(stmt)).all()}

    async def opening_messages(self, conversation_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """Each conversation's first user message (its content blocks), by conversation id."""
        ids = sorted(set(conversation_ids))
        out: dict[str, list[dict[str, Any]]] = {}
        for at in range(0, len(ids), 500):
            chunk = ids[at : at + 500]
            first = (
                select(_M.c.conversation_id, func.min(_M.c.seq).label("seq"))
                .where(_M.c.conversation_id.in_(chunk), _M.c.role == "user")
                .group_by(_M.c.conversation_id)
                .subquery()
            )
            stmt = select(_M.c.conversation_id, _M.c.content).join(
                first, (first.c.conversation_id == _M.c.conversation_id) & (first.c.seq == _M.c.seq)
            )
            async with self._db.reader() as s:
                for r in (await s.execute(stmt)).all():
                    out[r.conversation_id] = r.content if isinstance(r.content, list) else []
        return out


__all__ = ["ConversationFacts", "RolloutFacts", "ShadowProposal", "StaffAction"]


class OutsideActions:
    """Staff actions made outside signoff, one per webhook event (a redelivery adds nothing)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def record(self, action: StaffAction, *, source: str) -> bool:
        """Store ``action`` under its id (``proposal_id``: the event's id); ``False`` if known."""
        values = {
            "id": action.proposal_id,
            "source": source,
            "tool": action.tool,
            "arguments": action.arguments,
            "customer_id": action.customer_id,
            "principal": action.principal,
            "created_at": action.created_at,
        }

        def write(conn: Connection, _ctx: object) -> bool:
            dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
            stmt = dialect.insert(_O).values(**values).on_conflict_do_nothing(index_elements=["id"]).returning(_O.c.id)
            return conn.execute(stmt).scalar_one_or_none() is not None

        return await self._db.write(write)

    async def count(self, *, source: str | None = None) -> int:
        """How many are stored (of one ``source``)."""
        stmt = select(func.count()).select_from(_O)
        if source is not None:
            stmt = stmt.where(_O.c.source == source)
        async with self._db.reader() as s:
            return int((await s.execute(stmt)).scalar_one())
