"""The append-only, hash-chained audit log, in partitions.

Every event belongs to one partition's chain: the events of a run go to the partition its
run id hashes to (:func:`partition_of`, ``PARTITIONS`` of them), events without a run to
the root partition (:data:`ROOT`, which also holds every event written before partitions
existed). An event's hash covers the previous event's hash in its partition and the
canonical JSON of all its own fields (including its position ``pseq`` and ``ts``); each
partition's chain starts from its own genesis hash. An edited, deleted, reordered or
inserted row breaks its partition's chain at a position :meth:`AuditLog.verify` names.

Each partition has one ``audit_head`` row (``id`` = the partition) holding its last
position and hash: locking it serialises that partition's appenders only, so writers of
different conversations (and replicas) no longer queue on one row. ``seq`` is the global
order, assigned by the database (``INTEGER PRIMARY KEY`` on SQLite, a sequence on
PostgreSQL); within a partition it must grow with the position.

The partitions are joined by ``audit.join`` events in the root partition, each recording
every partition's head (:meth:`AuditLog.join`, appended before each checkpoint). A signed
checkpoint of the root head therefore vouches, through the joins it covers, for every
partition up to the heads they name (:mod:`storage.checkpoints`).

Events are appended inside the caller's transaction so that an event commits
atomically with the state change it describes. On PostgreSQL a trigger refuses
UPDATE, DELETE and TRUNCATE of ``audit_events`` (:data:`PG_AUDIT_GUARD_SQL`).

The chain is unkeyed: by itself it proves integrity against edits that leave
the heads alone, not against someone who rewrites rows *and* heads, or
empties the table. Signed checkpoints kept outside the database
(:mod:`storage.checkpoints`, ``verify(anchors=...)``) close that gap; on
PostgreSQL the application's role also lacks the privileges to try
(:mod:`storage.roles`), and triggers refuse what privileges cannot (:mod:`storage.audit_guard`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, func, insert, select, union_all, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

import storage.audit_guard  # noqa: F401  (registers the PostgreSQL guards on the tables)
from storage.audit_chain import (  # re-exported: the records' and chains' home
    GENESIS_HASH,
    JOIN_KIND,
    PARTITIONS,
    ROOT,
    STR_FIELDS,
    AuditEvent,
    AuditRecord,
    VerifyResult,
    chain_hash,
    genesis,
    partition_of,
    row_values,
)
from storage.canonical import canonical_json, hash_personal, iso_utc, sha256_hex, utc
from storage.db import Database
from storage.fastsql import prepared
from storage.models import AuditEventRow, AuditHeadRow

# --------------------------------------------------------------------------- append

_EVENTS = cast(Table, AuditEventRow.__table__)
_HEAD = cast(Table, AuditHeadRow.__table__)
# SQLite ignores FOR UPDATE; there BEGIN IMMEDIATE already holds the write lock.
_READ_HEAD = prepared(select(_HEAD.c.seq, _HEAD.c.hash).where(_HEAD.c.id == bindparam("h_part")).with_for_update())
_WRITE_HEAD = prepared(
    update(_HEAD)
    .where(_HEAD.c.id == bindparam("h_part"))
    .values(seq=bindparam("h_seq", type_=_HEAD.c.seq.type), hash=bindparam("h_hash", type_=_HEAD.c.hash.type))
)
_GUARDED_WRITE_HEAD = prepared(
    _WRITE_HEAD.where(_HEAD.c.seq == bindparam("old_seq"), _HEAD.c.hash == bindparam("old_hash"))
)
_INSERT_EVENTS = prepared(insert(_EVENTS))
_OTHER_HEADS = prepared(select(_HEAD.c.id, _HEAD.c.seq, _HEAD.c.hash).where(_HEAD.c.id != ROOT, _HEAD.c.seq > 0))
_LAST_JOIN = prepared(
    select(_EVENTS.c.data)
    .where(_EVENTS.c.kind == JOIN_KIND, _EVENTS.c.part == ROOT)
    .order_by(_EVENTS.c.seq.desc())
    .limit(1)
)


@dataclass(frozen=True, kw_only=True)
class Appended:
    """Where an append put its events: positions ``first``..``last`` of partition ``part``."""

    part: int
    first: int
    last: int


def _lock_head(conn: Connection, part: int) -> tuple[int, str]:
    """Lock ``part``'s head row (creating it race-safely on first use); return (pseq, hash)."""
    head = conn.execute(_READ_HEAD, {"h_part": part}).first()
    if head is None:
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        conn.execute(
            dialect.insert(_HEAD)
            .values(id=part, seq=0, hash=genesis(part))
            .on_conflict_do_nothing(index_elements=["id"])
        )
        head = conn.execute(_READ_HEAD, {"h_part": part}).one()
    return int(head.seq), str(head.hash)


def _extend(conn: Connection, part: int, events: Sequence[AuditEvent], cached: Any) -> list[dict[str, Any]]:
    """Move ``part``'s head past ``events``; their rows. ``cached`` is this process's last
    (pseq, hash) there: a guarded UPDATE (``WHERE seq = ? AND hash = ?``) both validates it
    and takes the partition's lock in one statement; if anyone else moved the head, the head
    is read locked instead."""
    if cached:
        rows = chain_rows(part, cached[0], cached[1], events)
        params = {"h_part": part, "h_seq": rows[-1]["pseq"], "h_hash": rows[-1]["hash"]}
        if conn.execute(_GUARDED_WRITE_HEAD, {**params, "old_seq": cached[0], "old_hash": cached[1]}).rowcount == 1:
            return rows
    pseq, prev_hash = _lock_head(conn, part)
    rows = chain_rows(part, pseq, prev_hash, events)
    conn.execute(_WRITE_HEAD, {"h_part": part, "h_seq": rows[-1]["pseq"], "h_hash": rows[-1]["hash"]})
    return rows


#: The columns an append writes (``seq`` is the database's).
EVENT_COLUMNS = (*STR_FIELDS, "part", "pseq", "kind", "ts", "latency_ms", "data", "prev_hash", "hash")
#: Appends of at most this many events go in one statement on PostgreSQL.
ONE_STATEMENT_MAX = 8


def moved_head() -> Any:
    """PostgreSQL: the guarded ``UPDATE`` of a partition's head from the cached one as a CTE
    (``moved``: one row when it moved, none when another writer had moved it first)."""
    return (
        update(_HEAD)
        .where(
            _HEAD.c.id == bindparam("h_part"),
            _HEAD.c.seq == bindparam("old_seq"),
            _HEAD.c.hash == bindparam("old_hash"),
        )
        .values(seq=bindparam("h_seq", type_=_HEAD.c.seq.type), hash=bindparam("h_hash", type_=_HEAD.c.hash.type))
        .returning(_HEAD.c.id)
        .cte("moved")
    )


def inserted_if_moved(moved: Any, n: int) -> Any:
    """``INSERT INTO audit_events … SELECT`` of ``n`` events (parameters :func:`append_params`),
    one row per event from ``moved``: all of them when the head moved, none when it had not."""
    rows = [
        select(*(bindparam(f"e{i}_{name}", type_=_EVENTS.c[name].type) for name in EVENT_COLUMNS)).select_from(moved)
        for i in range(n)
    ]
    source = rows[0] if n == 1 else union_all(*rows)
    return insert(_EVENTS).from_select(list(EVENT_COLUMNS), source)


def append_params(part: int, cached: Any, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The parameters of :func:`moved_head` and :func:`inserted_if_moved` for ``rows`` chained
    after the ``cached`` head of ``part``."""
    params = {"h_part": part, "h_seq": rows[-1]["pseq"], "h_hash": rows[-1]["hash"]}
    params |= {"old_seq": cached[0], "old_hash": cached[1]}
    for i, row in enumerate(rows):
        params |= {f"e{i}_{name}": row[name] for name in EVENT_COLUMNS}
    return params


def cached_head(events: Sequence[AuditEvent], cache: dict[str, Any] | None) -> tuple[int, Any] | None:
    """``(partition, this process's head there)`` when ``events`` can be appended in one
    statement after it (a head cached, at most :data:`ONE_STATEMENT_MAX` events); else ``None``."""
    if not events or cache is None or len(events) > ONE_STATEMENT_MAX:
        return None
    part = partition_of(events[0].run_id)
    cached = cache.get(str(part))
    return (part, cached) if cached else None


def remember_head(cache: dict[str, Any], part: int, rows: Sequence[dict[str, Any]]) -> None:
    """Keep ``part``'s head after ``rows`` (just written) as this process's cached head."""
    cache[str(part)] = (rows[-1]["pseq"], rows[-1]["hash"])


@functools.cache
def _moved_and_inserted(n: int) -> Any:
    """``WITH moved AS (…) INSERT … SELECT … FROM moved``: the head moves from the cached one
    and the events are inserted in one statement (one round trip), or, when the head had
    moved, neither."""
    moved = moved_head()
    return prepared(inserted_if_moved(moved, n).add_cte(moved, nest_here=True))


def _append_in_one(
    conn: Connection, part: int, events: Sequence[AuditEvent], cached: Any
) -> list[dict[str, Any]] | None:
    """Append ``events`` after the cached head in one statement (PostgreSQL); their rows, or
    ``None`` when someone else moved the head (nothing was written)."""
    rows = chain_rows(part, cached[0], cached[1], events)
    inserted = conn.execute(_moved_and_inserted(len(rows)), append_params(part, cached, rows)).rowcount
    if inserted not in (0, len(rows)):
        raise RuntimeError(f"audit append wrote {inserted} of {len(rows)} events")
    return rows if inserted else None


def append_audit_sync(
    conn: Connection, events: Sequence[AuditEvent], cache: dict[str, Any] | None = None
) -> Appended | None:
    """Append ``events`` in order inside ``conn``'s open transaction, all to the partition of
    the first one's run (:func:`partition_of`); where they went (``None``: nothing to append).

    ``cache`` is the process's last-written head per partition, shared per Database (a
    rollback leaves it stale; the guarded UPDATE then falls back). One head statement, one
    bulk insert — on PostgreSQL, with the head cached, one statement for both
    (:func:`_moved_and_inserted`); the global ``seq`` is the database's.
    """
    if not events:
        return None
    part = partition_of(events[0].run_id)
    cached = cache.get(str(part)) if cache is not None else None
    held = cached_head(events, cache) if conn.dialect.name == "postgresql" else None
    rows = _append_in_one(conn, part, events, cached) if held else None
    if rows is None:
        rows = _extend(conn, part, events, None if held else cached)
        conn.execute(_INSERT_EVENTS, rows)
    if cache is not None:
        remember_head(cache, part, rows)
    return Appended(part=part, first=rows[0]["pseq"], last=rows[-1]["pseq"])


def append_join_sync(conn: Connection, cache: dict[str, Any] | None = None) -> Appended | None:
    """Append an ``audit.join`` event to the root recording every other partition's head,
    unless none moved since the last join (``None``). The root's lock is taken first, so
    joins record heads in the order they are appended."""
    _lock_head(conn, ROOT)
    heads = {str(r.id): [int(r.seq), str(r.hash)] for r in conn.execute(_OTHER_HEADS).all()}
    last = conn.execute(_LAST_JOIN).scalar_one_or_none()
    if not heads or (isinstance(last, dict) and last.get("heads") == heads):
        return None
    return append_audit_sync(conn, [AuditEvent(kind=JOIN_KIND, data={"heads": heads})], cache)


_SEQS = select(_EVENTS.c.seq).where(
    _EVENTS.c.part == bindparam("s_part"), _EVENTS.c.pseq.between(bindparam("s_first"), bindparam("s_last"))
)


async def append_audit_many(session: AsyncSession, events: Sequence[AuditEvent]) -> list[int]:
    """Append ``events`` inside the session's open transaction (see :func:`append_audit_sync`);
    their global seqs.

    The events commit or roll back together with whatever else the caller's
    transaction does; observers (metrics) hear about them after commit.
    """
    if not events:
        return []
    cache: dict[str, Any] | None = session.info.get("audit_head")

    def _append(ss: Any) -> list[int]:
        conn = ss.connection()
        at = append_audit_sync(conn, events, cache)
        assert at is not None
        params = {"s_part": at.part, "s_first": at.first, "s_last": at.last}
        return sorted(conn.execute(_SEQS.order_by(_EVENTS.c.pseq), params).scalars().all())

    seqs = await session.run_sync(_append)
    session.info.setdefault("audit_events", []).extend(events)
    return seqs


def chain_rows(part: int, pseq: int, prev_hash: str, events: Sequence[AuditEvent]) -> list[dict[str, Any]]:
    """The rows of ``events`` chained after position ``pseq`` (hash ``prev_hash``) of ``part``."""
    rows = []
    for event in events:
        pseq += 1
        row = row_values(part, pseq, prev_hash, event)
        rows.append(row)
        prev_hash = row["hash"]
    return rows


async def append_audit(session: AsyncSession, event: AuditEvent) -> int:
    """Append one event inside the caller's open transaction; return its seq."""
    (seq,) = await append_audit_many(session, [event])
    return seq


# --------------------------------------------------------------------------- reading


def record_of(row: Any) -> AuditRecord:
    """A stored row as an :class:`AuditRecord`."""
    values = dict(row._mapping)
    values["ts"] = utc(values["ts"])
    return AuditRecord(**values)


class AuditLog:
    """Repository over the audit log: append, join, list and verify."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def append(self, event: AuditEvent) -> int:
        """Append one event in its own transaction; return its seq."""
        async with self._db.sessions() as s, s.begin():
            return await append_audit(s, event)

    async def append_many(self, events: Sequence[AuditEvent]) -> list[int]:
        """Append several events in one transaction; return their seqs."""
        async with self._db.sessions() as s, s.begin():
            return await append_audit_many(s, events)

    async def join(self) -> Appended | None:
        """Record every partition's head in the root (:func:`append_join_sync`)."""
        return await self._db.write(lambda conn, ctx: append_join_sync(conn, ctx.audit_head))

    async def list(
        self,
        *,
        run_id: str | None = None,
        proposal_id: str | None = None,
        kind: str | None = None,
        after_seq: int = 0,
        limit: int = 1000,
    ) -> list[AuditRecord]:
        """Events in seq order, filtered by run, proposal and/or kind; page with ``after_seq``."""
        stmt = select(_EVENTS).where(_EVENTS.c.seq > after_seq).order_by(_EVENTS.c.seq).limit(limit)
        if run_id is not None:
            stmt = stmt.where(_EVENTS.c.run_id == run_id)
        if proposal_id is not None:
            stmt = stmt.where(_EVENTS.c.proposal_id == proposal_id)
        if kind is not None:
            stmt = stmt.where(_EVENTS.c.kind == kind)
        async with self._db.sessions() as s, s.begin():
            return [record_of(r) for r in (await s.execute(stmt)).all()]

    async def verify(
        self, *, batch: int = 1000, anchors: Mapping[int, str] | None = None, since: tuple[int, str] | None = None
    ) -> VerifyResult:
        """Walk every partition's chain in position order, ``batch`` rows per query, up to its
        head as it was when verify started (so it ends while appenders are busy): the root
        first, then each other partition.

        Fails at the first position that is missing (deleted row), whose ``prev_hash`` does
        not link to the row before (deleted, swapped or reordered rows), whose hash does not
        match its contents (edited row), whose global seq does not grow with its position
        (renumbered), or where a head disagrees with its rows (deleted tail, or a row
        inserted past the head).

        ``anchors`` maps root seqs to the hashes signed checkpoints hold for them
        (:mod:`storage.checkpoints`); the joins in the root do the same for every other
        partition. A row whose hash differs (history rewritten and re-chained) or an anchored
        position the log no longer reaches (wiped or truncated, the head rewritten to match)
        fails too, naming the root seq that vouched for it in :attr:`VerifyResult.checkpoint_seq`.
        ``since`` starts the root's walk after a trusted ``(seq, hash)``, and every other
        partition's after the heads of the last join up to there (checking only new rows).
        """
        from storage.audit_verify import verify_log

        return await verify_log(self._db, batch=batch, anchors=anchors or {}, since=since)

    async def row_intact(self, seq: int) -> bool:
        """Whether the row at global ``seq`` hashes to its stored hash and links to the row
        before it in its partition (the genesis for the first): an event relied on
        (``policy.applied``) was not forged in place."""
        from storage.audit_verify import row_intact

        return await row_intact(self._db, seq)

    async def head_seq(self) -> int:
        """How many events the partition heads account for (0: none yet); exported as a gauge,
        which an alert watches for going down (a truncated log with its heads rewritten)."""
        async with self._db.sessions() as s, s.begin():
            return int((await s.execute(select(func.coalesce(func.sum(_HEAD.c.seq), 0)))).scalar_one())


#: Re-exported: the hashing helpers' home is :mod:`storage.canonical`.
__all__ = [
    "ROOT", "PARTITIONS", "JOIN_KIND", "GENESIS_HASH",
    "AuditEvent", "AuditRecord", "AuditLog", "Appended", "VerifyResult",
    "append_audit", "append_audit_many", "append_audit_sync", "append_join_sync",
    "chain_hash", "chain_rows", "genesis", "partition_of", "record_of",
    "EVENT_COLUMNS", "ONE_STATEMENT_MAX", "append_params", "cached_head", "inserted_if_moved", "moved_head",
    "remember_head",
    "canonical_json", "hash_personal", "iso_utc", "sha256_hex", "utc",
]  # fmt: skip
