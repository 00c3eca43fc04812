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
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, func, insert, select, union_all, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

import storage.audit_guard  # noqa: F401  (registers the PostgreSQL guards on the tables)
from storage.canonical import canonical_json, hash_personal, iso_utc, jsonable, sha256_hex, utc
from storage.db import Database
from storage.fastsql import prepared
from storage.models import AuditEventRow, AuditHeadRow
from storage.records import wall_clock

GENESIS_HASH = "0" * 64
_STR_FIELDS = (
    "run_id", "proposal_id", "trace_id", "principal", "tool", "args_hash",
    "idempotency_key", "model", "prompt_version", "policy_version",
)  # fmt: skip


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, kw_only=True)
class AuditEvent:
    """One thing that happened: a proposal, gate decision, confirmation, approval
    transition or execution. ``data`` must be JSON-safe and carry personal data
    only as :func:`hash_personal` references."""

    kind: str
    run_id: str | None = None
    proposal_id: str | None = None
    trace_id: str | None = None
    principal: str | None = None
    tool: str | None = None
    args_hash: str | None = None
    idempotency_key: str | None = None
    model: str | None = None
    prompt_version: str | None = None
    policy_version: str | None = None
    latency_ms: float | None = None
    data: dict[str, Any] = field(default_factory=dict)
    #: When it happened: the injected clock's time (``Services.clock``); the real time if none is given.
    ts: datetime = field(default_factory=wall_clock)

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not self.kind:
            raise ValueError("AuditEvent.kind must be a non-empty str")
        for name in _STR_FIELDS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"AuditEvent.{name} must be str or None, got {type(value).__name__}")


@dataclass(frozen=True, kw_only=True)
class AuditRecord(AuditEvent):
    """A stored audit event: its global ``seq``, its partition ``part`` and position ``pseq``
    there, and its link in that partition's chain (``ts`` in UTC)."""

    seq: int
    part: int
    pseq: int
    prev_hash: str
    hash: str


@dataclass(frozen=True, kw_only=True)
class VerifyResult:
    """Outcome of :meth:`AuditLog.verify`.

    ``count`` is the number of rows verified (all when ``ok``, else those
    before the break); ``broken_seq`` is the position in partition ``part``
    at which a chain is wrong. ``head_seq`` and ``head_hash`` are the root
    partition's verified head: what a checkpoint signs.
    """

    ok: bool
    count: int
    broken_seq: int | None = None
    reason: str | None = None
    head_hash: str | None = None
    #: The checkpointed root seq that vouched for what the log failed to match, when one did.
    checkpoint_seq: int | None = None
    #: The partition of the break (``None`` when ``ok``).
    part: int | None = None
    head_seq: int = 0


# --------------------------------------------------------------------------- partitions and hashing

#: The partition of events without a run, of the joins and of every event from before partitions.
ROOT = 1
#: How many partitions runs are spread over (ids ``ROOT + 1`` .. ``ROOT + PARTITIONS``; the
#: migration creates their head rows, so changing it needs a migration).
PARTITIONS = 16
#: The root event that records every other partition's head.
JOIN_KIND = "audit.join"
_GENESIS_PREFIX = "signoff/audit-partition/v1\x00"
_HASHED_FIELDS = ("ts", "kind", *_STR_FIELDS, "latency_ms", "data")


def partition_of(run_id: str | None) -> int:
    """The partition a run's events go to (the root for events without a run)."""
    if run_id is None:
        return ROOT
    return ROOT + 1 + zlib.crc32(run_id.encode("utf-8")) % PARTITIONS


def genesis(part: int) -> str:
    """The hash a partition's first event links to (the root's is :data:`GENESIS_HASH`, as
    the single chain's always was)."""
    return GENESIS_HASH if part == ROOT else sha256_hex(f"{_GENESIS_PREFIX}{part}")


def _row_values(part: int, pseq: int, prev_hash: str, event: AuditEvent) -> dict[str, Any]:
    """Column values for ``event`` at position ``pseq`` of ``part``, normalised so they hash
    identically before insert and after reading back on either database (``seq`` is the
    database's)."""
    values: dict[str, Any] = {name: getattr(event, name) for name in _STR_FIELDS}
    values["part"] = part
    values["pseq"] = pseq
    values["kind"] = event.kind
    values["ts"] = utc(event.ts)
    values["latency_ms"] = None if event.latency_ms is None else float(event.latency_ms)
    values["data"] = jsonable(event.data)
    values["prev_hash"] = prev_hash
    values["hash"] = chain_hash(prev_hash, values)
    return values


def chain_hash(prev_hash: str, fields: dict[str, Any]) -> str:
    """``sha256(prev_hash + canonical_json(event fields incl. its position and ts))``.

    The position is hashed under the name ``seq`` (``fields["pseq"]``): a row written before
    partitions hashes exactly as it did. ``fields`` may hold extra keys (``prev_hash``,
    ``hash``, the global ``seq``); only the event's own fields are hashed.
    """
    body = {name: fields[name] for name in _HASHED_FIELDS}
    body["seq"] = fields["pseq"]
    body["ts"] = iso_utc(body["ts"])
    return sha256_hex(prev_hash + canonical_json(body))


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
        rows = _chain(part, cached[0], cached[1], events)
        params = {"h_part": part, "h_seq": rows[-1]["pseq"], "h_hash": rows[-1]["hash"]}
        if conn.execute(_GUARDED_WRITE_HEAD, {**params, "old_seq": cached[0], "old_hash": cached[1]}).rowcount == 1:
            return rows
    pseq, prev_hash = _lock_head(conn, part)
    rows = _chain(part, pseq, prev_hash, events)
    conn.execute(_WRITE_HEAD, {"h_part": part, "h_seq": rows[-1]["pseq"], "h_hash": rows[-1]["hash"]})
    return rows


#: The columns an append writes (``seq`` is the database's).
_COLUMNS = (*_STR_FIELDS, "part", "pseq", "kind", "ts", "latency_ms", "data", "prev_hash", "hash")
#: Appends of at most this many events go in one statement on PostgreSQL.
_ONE_STATEMENT_MAX = 8


@functools.cache
def _moved_and_inserted(n: int) -> Any:
    """PostgreSQL: ``WITH moved AS (guarded UPDATE of the head … RETURNING) INSERT … SELECT``
    of ``n`` events from ``moved``: the head moves from the cached one and the events are
    inserted in one statement (one round trip), or, when the head had moved, neither."""
    moved = (
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
    rows = [
        select(*(bindparam(f"{name}_{i}", type_=_EVENTS.c[name].type) for name in _COLUMNS)).select_from(moved)
        for i in range(n)
    ]
    source = rows[0] if n == 1 else union_all(*rows)
    return prepared(insert(_EVENTS).from_select(list(_COLUMNS), source).add_cte(moved, nest_here=True))


def _append_in_one(
    conn: Connection, part: int, events: Sequence[AuditEvent], cached: Any
) -> list[dict[str, Any]] | None:
    """Append ``events`` after the cached head in one statement (PostgreSQL); their rows, or
    ``None`` when someone else moved the head (nothing was written)."""
    rows = _chain(part, cached[0], cached[1], events)
    params = {"h_part": part, "h_seq": rows[-1]["pseq"], "h_hash": rows[-1]["hash"]}
    params |= {"old_seq": cached[0], "old_hash": cached[1]}
    for i, row in enumerate(rows):
        params |= {f"{name}_{i}": row[name] for name in _COLUMNS}
    inserted = conn.execute(_moved_and_inserted(len(rows)), params).rowcount
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
    key = str(part)
    cached = cache.get(key) if cache is not None else None
    one = cached and conn.dialect.name == "postgresql" and len(events) <= _ONE_STATEMENT_MAX
    rows = _append_in_one(conn, part, events, cached) if one else None
    if rows is None:
        rows = _extend(conn, part, events, None if one else cached)
        conn.execute(_INSERT_EVENTS, rows)
    if cache is not None:
        cache[key] = (rows[-1]["pseq"], rows[-1]["hash"])
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


def _chain(part: int, pseq: int, prev_hash: str, events: Sequence[AuditEvent]) -> list[dict[str, Any]]:
    rows = []
    for event in events:
        pseq += 1
        row = _row_values(part, pseq, prev_hash, event)
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
    "chain_hash", "genesis", "partition_of", "record_of",
    "canonical_json", "hash_personal", "iso_utc", "sha256_hex", "utc",
]  # fmt: skip
