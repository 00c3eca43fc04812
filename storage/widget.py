"""The chat widget's sessions and event streams (``widget_sessions``, ``widget_events``).

A session is found by the hash of its opaque secret (the cookie or the page-held id), never by
the secret itself. Each session has one ordered stream of events: ``seq`` counts 1, 2, 3… per
session and is the server-sent event id a reconnecting browser resumes after. An event is
written once per ``key``: the worker, a retry after a crash and the hand-off relay may all try
to deliver the same answer, and only the first write happens. ``seq`` is taken as the
session's largest plus one inside the inserting transaction, and the unique (session, seq)
pair makes a concurrent writer try again, so a reader that has seen ``seq`` n never later
finds a smaller one appear.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from storage.db import Database
from storage.models import WidgetEventRow, WidgetSessionRow
from storage.records import aware, wall_clock

#: How often an insert that lost the race for a ``seq`` is tried again.
_SEQ_TRIES = 8


def secret_hash(secret: str) -> str:
    """How a session secret is kept: its SHA-256 (the secret never reaches the database)."""
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class WidgetSession:
    """A widget session: its shop, the customer it is bound to (``None``: a guest), and how."""

    id: str
    shop: str
    customer_id: str | None
    verified_via: str | None
    conversation_id: str | None
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class WidgetEvent:
    """One event of a session's stream."""

    session_id: str
    seq: int
    key: str
    kind: str
    data: dict[str, Any]
    created_at: datetime


def _session(row: WidgetSessionRow) -> WidgetSession:
    return WidgetSession(
        id=row.id,
        shop=row.shop,
        customer_id=row.customer_id,
        verified_via=row.verified_via,
        conversation_id=row.conversation_id,
        created_at=aware(row.created_at) or row.created_at,
    )


def _event(row: WidgetEventRow) -> WidgetEvent:
    return WidgetEvent(
        session_id=row.session_id,
        seq=row.seq,
        key=row.key,
        kind=row.kind,
        data=dict(row.data or {}),
        created_at=aware(row.created_at) or row.created_at,
    )


class WidgetStore:
    """Repository over the widget's two tables."""

    def __init__(self, db: Database, *, clock: Callable[[], datetime] | None = None) -> None:
        self._db = db
        self._clock = clock or wall_clock

    # -- sessions ---------------------------------------------------------------------------
    async def create(
        self,
        *,
        id: str,
        secret: str,
        shop: str,
        ip_hash: str,
        customer_id: str | None = None,
        verified_via: str | None = None,
    ) -> WidgetSession:
        """A new session; only the hash of ``secret`` is kept."""
        row = WidgetSessionRow(
            id=id,
            secret_hash=secret_hash(secret),
            shop=shop,
            customer_id=customer_id,
            verified_via=verified_via,
            ip_hash=ip_hash,
            created_at=self._clock(),
        )
        async with self._db.sessions() as s, s.begin():
            s.add(row)
        return _session(row)

    async def by_secret(self, secret: str) -> WidgetSession | None:
        """The session this secret opens, if any."""
        async with self._db.reader() as s:
            row = (
                await s.execute(select(WidgetSessionRow).where(WidgetSessionRow.secret_hash == secret_hash(secret)))
            ).scalar_one_or_none()
        return _session(row) if row is not None else None

    async def get(self, session_id: str) -> WidgetSession | None:
        """A session by its id (the worker's look-up)."""
        async with self._db.reader() as s:
            row = await s.get(WidgetSessionRow, session_id)
        return _session(row) if row is not None else None

    async def latest_for(self, shop: str, customer_id: str, *, via: str, window: timedelta) -> WidgetSession | None:
        """The newest session of an identified customer on ``shop`` established the same way
        (a logged-in customer's conversation continues on the next page without a cookie)."""
        stmt = (
            select(WidgetSessionRow)
            .where(
                WidgetSessionRow.shop == shop,
                WidgetSessionRow.customer_id == customer_id,
                WidgetSessionRow.verified_via == via,
                WidgetSessionRow.created_at >= self._clock() - window,
            )
            .order_by(WidgetSessionRow.created_at.desc())
            .limit(1)
        )
        async with self._db.reader() as s:
            row = (await s.execute(stmt)).scalar_one_or_none()
        return _session(row) if row is not None else None

    async def bind(self, session_id: str, *, customer_id: str, via: str) -> bool:
        """Bind a guest session to one customer; a session bound already stays as it is (False)."""
        stmt = (
            update(WidgetSessionRow)
            .where(WidgetSessionRow.id == session_id, WidgetSessionRow.customer_id.is_(None))
            .values(customer_id=customer_id, verified_via=via, conversation_id=None)
        )
        async with self._db.sessions() as s, s.begin():
            done = await s.execute(stmt)
        return bool(getattr(done, "rowcount", 0))

    async def rotate(self, session_id: str, secret: str) -> None:
        """A new secret for the session (a logged-in customer's next page): the old one stops working."""
        stmt = update(WidgetSessionRow).where(WidgetSessionRow.id == session_id).values(secret_hash=secret_hash(secret))
        async with self._db.sessions() as s, s.begin():
            await s.execute(stmt)

    async def set_conversation(self, session_id: str, conversation_id: str) -> None:
        """The conversation the session's messages now go to (follow-ups find the session by it)."""
        stmt = update(WidgetSessionRow).where(WidgetSessionRow.id == session_id).values(conversation_id=conversation_id)
        async with self._db.sessions() as s, s.begin():
            await s.execute(stmt)

    async def for_conversation(self, conversation_id: str) -> list[WidgetSession]:
        """The sessions whose current conversation this is (normally one)."""
        async with self._db.reader() as s:
            rows = (
                (await s.execute(select(WidgetSessionRow).where(WidgetSessionRow.conversation_id == conversation_id)))
                .scalars()
                .all()
            )
        return [_session(r) for r in rows]

    async def opened_from(self, ip_hash: str, window: timedelta) -> int:
        """Sessions opened from one address within ``window`` (the per-address guest limit)."""
        since = self._clock() - window
        stmt = select(func.count(WidgetSessionRow.id)).where(
            WidgetSessionRow.ip_hash == ip_hash, WidgetSessionRow.created_at >= since
        )
        async with self._db.reader() as s:
            return int((await s.execute(stmt)).scalar_one())

    # -- events -----------------------------------------------------------------------------
    async def append(self, session_id: str, *, key: str, kind: str, data: dict[str, Any]) -> WidgetEvent | None:
        """Write one event under ``key``; ``None`` when that key was written already."""
        for _ in range(_SEQ_TRIES):
            try:
                return await self._append(session_id, key=key, kind=kind, data=data)
            except IntegrityError:
                if await self._has_key(key):
                    return None
        raise RuntimeError(f"widget event {key!r}: no free seq after {_SEQ_TRIES} tries")

    async def _append(self, session_id: str, *, key: str, kind: str, data: dict[str, Any]) -> WidgetEvent | None:
        async with self._db.sessions() as s, s.begin():
            if (await s.execute(select(WidgetEventRow.id).where(WidgetEventRow.key == key))).first() is not None:
                return None
            top = (
                await s.execute(select(func.max(WidgetEventRow.seq)).where(WidgetEventRow.session_id == session_id))
            ).scalar_one()
            row = WidgetEventRow(
                session_id=session_id,
                seq=int(top or 0) + 1,
                key=key,
                kind=kind,
                data=data,
                created_at=self._clock(),
            )
            s.add(row)
        return _event(row)

    async def _has_key(self, key: str) -> bool:
        async with self._db.reader() as s:
            return (await s.execute(select(WidgetEventRow.id).where(WidgetEventRow.key == key))).first() is not None

    async def after(self, session_id: str, seq: int, *, limit: int = 200) -> list[WidgetEvent]:
        """The session's events after ``seq``, in order."""
        stmt = (
            select(WidgetEventRow)
            .where(WidgetEventRow.session_id == session_id, WidgetEventRow.seq > seq)
            .order_by(WidgetEventRow.seq)
            .limit(limit)
        )
        async with self._db.reader() as s:
            rows = (await s.execute(stmt)).scalars().all()
        return [_event(r) for r in rows]

    async def latest(self, session_ids: Sequence[str]) -> dict[str, int]:
        """The largest ``seq`` of each of these sessions that has events (one query: the widget's
        poller asks it for every session with an open stream at once)."""
        if not session_ids:
            return {}
        stmt = (
            select(WidgetEventRow.session_id, func.max(WidgetEventRow.seq))
            .where(WidgetEventRow.session_id.in_(list(session_ids)))
            .group_by(WidgetEventRow.session_id)
        )
        async with self._db.reader() as s:
            rows = (await s.execute(stmt)).all()
        return {str(sid): int(top) for sid, top in rows}

    async def count(self, session_id: str, kinds: Sequence[str], window: timedelta) -> int:
        """The session's events of ``kinds`` within ``window`` (the per-session message limit)."""
        since = self._clock() - window
        stmt = select(func.count(WidgetEventRow.id)).where(
            WidgetEventRow.session_id == session_id,
            WidgetEventRow.kind.in_(list(kinds)),
            WidgetEventRow.created_at >= since,
        )
        async with self._db.reader() as s:
            return int((await s.execute(stmt)).scalar_one())


__all__ = ["WidgetEvent", "WidgetSession", "WidgetStore", "secret_hash"]
