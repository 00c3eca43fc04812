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

import contextlib
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Table, bindparam, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from storage.db import Database
from storage.fastsql import prepared
from storage.models import WidgetEventRow, WidgetSessionRow
from storage.notify import WIDGET, parse_widget
from storage.probe import Look, probing
from storage.records import aware, wall_clock

#: How often an insert that lost the race for a ``seq`` is tried again.
_SEQ_TRIES = 8

# Every statement of a widget request is built once and prepared (``storage.fastsql``): a
# burst of 200 widgets opening at once is 600 requests, and the loop answers ``/healthz``
# between them.
_S: Table = WidgetSessionRow.__table__  # type: ignore[assignment]
_E: Table = WidgetEventRow.__table__  # type: ignore[assignment]
_SESSION_BY_SECRET = prepared(select(_S).where(_S.c.secret_hash == bindparam("h")))
_SESSION_BY_ID = prepared(select(_S).where(_S.c.id == bindparam("id")))
_SESSIONS_OF_CONV = prepared(select(_S).where(_S.c.conversation_id == bindparam("c")))
_LATEST_FOR = prepared(
    select(_S)
    .where(
        _S.c.shop == bindparam("shop"),
        _S.c.customer_id == bindparam("customer"),
        _S.c.verified_via == bindparam("via"),
        _S.c.created_at >= bindparam("since"),
    )
    .order_by(_S.c.created_at.desc())
    .limit(1)
)
_OPENED_FROM = prepared(
    select(func.count()).select_from(_S).where(_S.c.ip_hash == bindparam("ip"), _S.c.created_at >= bindparam("since"))
)
_INSERT_SESSION = prepared(insert(_S))
_SET_CONVERSATION = prepared(update(_S).where(_S.c.id == bindparam("sid")).values(conversation_id=bindparam("c")))
_EVENT_BY_KEY = prepared(select(_E.c.id).where(_E.c.key == bindparam("key")))


def _append_statement(dialect: Any) -> Any:
    """An event under a new key, numbered one past the session's last: one statement (no row
    back when the key was written already; a ``seq`` another append took meanwhile raises)."""
    numbered = select(
        bindparam("sid", type_=_E.c.session_id.type),
        func.coalesce(func.max(_E.c.seq), 0) + 1,
        bindparam("key", type_=_E.c.key.type),
        bindparam("kind", type_=_E.c.kind.type),
        bindparam("data", type_=_E.c.data.type),
        bindparam("now", type_=_E.c.created_at.type),
    ).where(_E.c.session_id == bindparam("sid"))
    columns = ["session_id", "seq", "key", "kind", "data", "created_at"]
    stmt = dialect.insert(_E).from_select(columns, numbered).on_conflict_do_nothing(index_elements=["key"])
    return prepared(stmt.returning(_E.c.seq))


_APPEND = {"postgresql": _append_statement(postgresql), "sqlite": _append_statement(sqlite)}
_EVENTS_AFTER = prepared(
    select(_E)
    .where(_E.c.session_id == bindparam("sid"), _E.c.seq > bindparam("seq"))
    .order_by(_E.c.seq)
    .limit(bindparam("limit"))
)
#: Events one SQLite probe reads at most (:meth:`WidgetStore.hearing`); more: everything is polled.
PROBE_ROWS = 500
_TOP_ID = prepared(select(func.max(_E.c.id)))
_EVENTS_SINCE = prepared(
    select(_E.c.id, _E.c.session_id, _E.c.seq)
    .where(_E.c.id > bindparam("id"))
    .order_by(_E.c.id)
    .limit(bindparam("limit"))
)
_COUNT_KIND = prepared(
    select(
        func.count().filter(_E.c.created_at >= bindparam("short")),
        func.count().filter(_E.c.created_at >= bindparam("long")),
    )
    .select_from(_E)
    .where(_E.c.session_id == bindparam("sid"), _E.c.kind == bindparam("kind"))
)


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


def _session(row: Any) -> WidgetSession:
    return WidgetSession(
        id=row.id,
        shop=row.shop,
        customer_id=row.customer_id,
        verified_via=row.verified_via,
        conversation_id=row.conversation_id,
        created_at=aware(row.created_at) or row.created_at,
    )


def _event(row: Any) -> WidgetEvent:
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
        now = self._clock()
        values: dict[str, Any] = {
            "id": id,
            "secret_hash": secret_hash(secret),
            "shop": shop,
            "customer_id": customer_id,
            "verified_via": verified_via,
            "ip_hash": ip_hash,
            "conversation_id": None,
            "created_at": now,
        }
        await self._db.write(lambda conn, _ctx: conn.execute(_INSERT_SESSION, values))
        return WidgetSession(
            id=id,
            shop=shop,
            customer_id=customer_id,
            verified_via=verified_via,
            conversation_id=None,
            created_at=now,
        )

    async def _one_session(self, stmt: Any, params: dict[str, Any]) -> WidgetSession | None:
        row = await self._db.read(lambda conn: conn.execute(stmt, params).first())
        return _session(row) if row is not None else None

    async def by_secret(self, secret: str) -> WidgetSession | None:
        """The session this secret opens, if any."""
        return await self._one_session(_SESSION_BY_SECRET, {"h": secret_hash(secret)})

    async def get(self, session_id: str) -> WidgetSession | None:
        """A session by its id (the worker's look-up)."""
        return await self._one_session(_SESSION_BY_ID, {"id": session_id})

    async def latest_for(self, shop: str, customer_id: str, *, via: str, window: timedelta) -> WidgetSession | None:
        """The newest session of an identified customer on ``shop`` established the same way
        (a logged-in customer's conversation continues on the next page without a cookie)."""
        params = {"shop": shop, "customer": customer_id, "via": via, "since": self._clock() - window}
        return await self._one_session(_LATEST_FOR, params)

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
        params = {"sid": session_id, "c": conversation_id}
        await self._db.write_statement(lambda conn, _ctx: conn.execute(_SET_CONVERSATION, params))

    async def for_conversation(self, conversation_id: str) -> list[WidgetSession]:
        """The sessions whose current conversation this is (normally one)."""
        rows = await self._db.read(lambda conn: conn.execute(_SESSIONS_OF_CONV, {"c": conversation_id}).all())
        return [_session(r) for r in rows]

    async def opened_from(self, ip_hash: str, window: timedelta) -> int:
        """Sessions opened from one address within ``window`` (the per-address guest limit)."""
        params = {"ip": ip_hash, "since": self._clock() - window}
        return int(await self._db.read(lambda conn: conn.execute(_OPENED_FROM, params).scalar_one()))

    # -- events -----------------------------------------------------------------------------
    async def append(self, session_id: str, *, key: str, kind: str, data: dict[str, Any]) -> WidgetEvent | None:
        """Write one event under ``key``; ``None`` when that key was written already."""
        statement = _APPEND["postgresql" if self._db.is_postgres else "sqlite"]
        now = self._clock()
        params = {"sid": session_id, "key": key, "kind": kind, "data": data, "now": now}

        def write(conn: Connection, _ctx: object) -> Any:
            return conn.execute(statement, params).scalar()

        for _ in range(_SEQ_TRIES):
            try:
                seq = await self._db.write_statement(write)
            except IntegrityError:  # another append took the seq: number it again
                if await self._has_key(key):
                    return None
                continue
            if seq is None:
                return None
            return WidgetEvent(session_id=session_id, seq=int(seq), key=key, kind=kind, data=dict(data), created_at=now)
        raise RuntimeError(f"widget event {key!r}: no free seq after {_SEQ_TRIES} tries")

    async def _has_key(self, key: str) -> bool:
        return await self._db.read(lambda conn: conn.execute(_EVENT_BY_KEY, {"key": key}).first()) is not None

    async def after(self, session_id: str, seq: int, *, limit: int = 200) -> list[WidgetEvent]:
        """The session's events after ``seq``, in order."""
        params = {"sid": session_id, "seq": seq, "limit": limit}
        rows = await self._db.read(lambda conn: conn.execute(_EVENTS_AFTER, params).all())
        return [_event(r) for r in rows]

    def hearing(self, handler: Callable[[str | None, int], None]) -> contextlib.AbstractContextManager[None]:
        """While the block lasts, ``handler(session_id, seq)`` hears of each event any process
        stores: on PostgreSQL when it commits (:mod:`storage.notify`), on SQLite within
        :data:`~storage.probe.EVERY_S` (:mod:`storage.probe`); ``(None, 0)`` when anything may have
        been missed (the listener has just reconnected, or more events came than one probe reads)."""
        if not self._db.is_postgres:
            return probing(self._prober(handler))

        def heard(payload: list[Any] | None) -> None:
            if payload is None:
                handler(None, 0)
            elif (parsed := parse_widget(payload)) is not None:
                handler(*parsed)

        return self._db.heard(WIDGET, heard)

    def _prober(self, handler: Callable[[str | None, int], None]) -> Look:
        """One probe of :meth:`hearing` on SQLite: the events stored since the last one it saw."""
        last: int | None = None

        async def look() -> bool:
            nonlocal last
            if last is None:  # the first look: from here on
                last = int(await self._db.read(lambda conn: conn.execute(_TOP_ID).scalar()) or 0)
                return False
            params = {"id": last, "limit": PROBE_ROWS}
            rows = await self._db.read(lambda conn: conn.execute(_EVENTS_SINCE, params).all())
            if not rows:
                return False
            last = int(rows[-1][0])
            if len(rows) == PROBE_ROWS:
                handler(None, 0)  # a burst: the caller looks at everything
                return True
            for _id, session_id, seq in rows:
                handler(str(session_id), int(seq))
            return True

        return look

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

    async def counts(self, session_id: str, kind: str, short: timedelta, long: timedelta) -> tuple[int, int]:
        """The session's events of ``kind`` within ``short`` and within ``long`` (the per-session
        message limits), in one query."""
        now = self._clock()
        params = {"sid": session_id, "kind": kind, "short": now - short, "long": now - long}
        row = await self._db.read(lambda conn: conn.execute(_COUNT_KIND, params).one())
        return int(row[0]), int(row[1])


__all__ = ["WidgetEvent", "WidgetSession", "WidgetStore", "secret_hash"]
