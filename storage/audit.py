"""The append-only, hash-chained audit log.

Every event's hash covers the previous event's hash and the canonical JSON of
all its own fields (including ``seq`` and ``ts``), so an edited, deleted,
reordered or inserted row breaks the chain at a seq that :meth:`AuditLog.verify`
names. The single ``audit_head`` row holds the last seq and hash: locking it
serialises appenders, and comparing it with the last row catches a deleted tail.

Events are appended inside the caller's transaction so that an event commits
atomically with the state change it describes. On PostgreSQL a trigger refuses
UPDATE, DELETE and TRUNCATE of ``audit_events`` (:data:`PG_AUDIT_GUARD_SQL`).

The chain is unkeyed: by itself it proves integrity against edits that leave
the head alone, not against someone who rewrites rows *and* the head, or
empties the table. Signed checkpoints kept outside the database
(:mod:`storage.checkpoints`, ``verify(anchors=...)``) close that gap; on
PostgreSQL the application's role also lacks the privileges to try
(:mod:`storage.roles`).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, cast

from sqlalchemy import DDL, Connection, Table, bindparam, func, insert, select, update
from sqlalchemy import event as sa_event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from storage.db import Database
from storage.fastsql import prepared
from storage.models import AuditEventRow, AuditHeadRow
from storage.records import wall_clock

GENESIS_HASH = "0" * 64
_HEAD_ID = 1
_PERSONAL_PREFIX = "signoff/personal/v1\x00"
_STR_FIELDS = (
    "run_id", "proposal_id", "trace_id", "principal", "tool", "args_hash",
    "idempotency_key", "model", "prompt_version", "policy_version",
)  # fmt: skip


# --------------------------------------------------------------------------- helpers


def utc(dt: datetime) -> datetime:
    """``dt`` as an aware UTC datetime; a naive value is taken to already be UTC.

    (SQLite hands ``DateTime(timezone=True)`` columns back naive.)
    """
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def iso_utc(dt: datetime) -> str:
    """Fixed-width ISO-8601 in UTC with microseconds: ``2024-05-01T12:00:00.000000Z``."""
    return utc(dt).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _jsonable(obj: Any) -> Any:
    """Reduce ``obj`` to plain JSON values whose text survives a database round trip."""
    if obj is None or isinstance(obj, str | bool | int):
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"non-finite float {obj!r} is not JSON")
        if obj == 0.0:
            return 0.0  # JSONB numeric has no negative zero
        if abs(obj) >= 1e16:
            # Python writes these with an exponent; JSONB reads them back as integers.
            return int(Decimal(repr(obj)))
        return obj
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys must be str, got {type(key).__name__}")
            out[key] = _jsonable(value)
        return out
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, datetime):
        return iso_utc(obj)
    if isinstance(obj, date):
        return obj.isoformat()
    if isinstance(obj, Decimal | uuid.UUID):
        return str(obj)
    if isinstance(obj, enum.Enum):
        return _jsonable(obj.value)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _jsonable({f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)})
    raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")


def canonical_json(obj: Any) -> str:
    """Deterministic JSON text for hashing.

    Sorted keys, compact separators, UTF-8 kept (``ensure_ascii=False``);
    datetimes become ISO-8601 UTC (naive ones are taken as UTC), dates ISO,
    ``Decimal``/``UUID`` their ``str``, enums their value, dataclasses a dict,
    tuples lists. Floats are normalised so the text is the same before and
    after a trip through a JSON/JSONB column (``-0.0`` → ``0.0``, floats ≥ 1e16
    → integers). NaN/infinity and non-``str`` keys raise.
    """
    return json.dumps(_jsonable(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(text: str) -> str:
    """Hex SHA-256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def hash_personal(value: str) -> str:
    """Reference personal data (email, name, address) by hash, never by value.

    Domain-separated SHA-256; the same value always gives the same reference,
    so events about one customer can be joined without storing who they are.
    """
    return sha256_hex(_PERSONAL_PREFIX + value)


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
    """A stored audit event with its place in the chain (``ts`` in UTC)."""

    seq: int
    prev_hash: str
    hash: str


@dataclass(frozen=True, kw_only=True)
class VerifyResult:
    """Outcome of :meth:`AuditLog.verify`.

    ``count`` is the number of rows verified (all when ``ok``, else those
    before ``broken_seq``, the first seq at which the chain is wrong);
    ``head_hash`` is the verified chain's last hash, for anchoring elsewhere.
    """

    ok: bool
    count: int
    broken_seq: int | None = None
    reason: str | None = None
    head_hash: str | None = None
    #: The checkpointed seq the log failed to match, when a checkpoint caught it.
    checkpoint_seq: int | None = None


# --------------------------------------------------------------------------- hashing

_HASHED_FIELDS = ("seq", "ts", "kind", *_STR_FIELDS, "latency_ms", "data")


def _row_values(seq: int, prev_hash: str, event: AuditEvent) -> dict[str, Any]:
    """Column values for ``event`` at ``seq``, normalised so they hash identically
    before insert and after reading back on either database."""
    values: dict[str, Any] = {name: getattr(event, name) for name in _STR_FIELDS}
    values["seq"] = seq
    values["kind"] = event.kind
    values["ts"] = utc(event.ts)
    values["latency_ms"] = None if event.latency_ms is None else float(event.latency_ms)
    values["data"] = _jsonable(event.data)
    values["prev_hash"] = prev_hash
    values["hash"] = chain_hash(prev_hash, values)
    return values


def chain_hash(prev_hash: str, fields: dict[str, Any]) -> str:
    """``sha256(prev_hash + canonical_json(event fields incl. seq and ts))``.

    ``fields`` may hold extra keys (``prev_hash``, ``hash``); only the event's
    own fields are hashed.
    """
    body = {name: fields[name] for name in _HASHED_FIELDS}
    body["ts"] = iso_utc(body["ts"])
    return sha256_hex(prev_hash + canonical_json(body))


# --------------------------------------------------------------------------- append

_EVENTS = cast(Table, AuditEventRow.__table__)
_HEAD = cast(Table, AuditHeadRow.__table__)
# SQLite ignores FOR UPDATE; there BEGIN IMMEDIATE already holds the write lock.
_READ_HEAD = prepared(select(_HEAD.c.seq, _HEAD.c.hash).where(_HEAD.c.id == _HEAD_ID).with_for_update())
_WRITE_HEAD = prepared(update(_HEAD).where(_HEAD.c.id == _HEAD_ID))
_GUARDED_WRITE_HEAD = prepared(
    _WRITE_HEAD.where(_HEAD.c.seq == bindparam("old_seq"), _HEAD.c.hash == bindparam("old_hash"))
)
_INSERT_EVENTS = prepared(insert(_EVENTS))


def _lock_head(conn: Connection) -> tuple[int, str]:
    """Lock the head row (creating it race-safely on first use); return (seq, hash)."""
    head = conn.execute(_READ_HEAD).first()
    if head is None:
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        conn.execute(
            dialect.insert(_HEAD)
            .values(id=_HEAD_ID, seq=0, hash=GENESIS_HASH)
            .on_conflict_do_nothing(index_elements=["id"])
        )
        head = conn.execute(_READ_HEAD).one()
    return int(head.seq), str(head.hash)


def append_audit_sync(conn: Connection, events: Sequence[AuditEvent], cache: dict[str, Any] | None = None) -> list[int]:
    """Append ``events`` in order inside ``conn``'s open transaction; return their seqs.

    ``cache`` is the process's last-written head, shared per Database: a guarded
    UPDATE (``WHERE seq = ? AND hash = ?``) both validates it and takes the
    chain lock in one round trip; if anyone else moved the head, the head is
    read locked instead. One head statement, one bulk insert.
    """
    if not events:
        return []
    rows: list[dict[str, Any]] = []
    if cache and "seq" in cache:
        rows = _chain(cache["seq"], cache["hash"], events)
        moved = conn.execute(
            _GUARDED_WRITE_HEAD,
            {"seq": rows[-1]["seq"], "hash": rows[-1]["hash"], "old_seq": cache["seq"], "old_hash": cache["hash"]},
        )
        if moved.rowcount != 1:
            rows = []
    if not rows:
        seq, prev_hash = _lock_head(conn)
        rows = _chain(seq, prev_hash, events)
        conn.execute(_WRITE_HEAD, {"seq": rows[-1]["seq"], "hash": rows[-1]["hash"]})
    conn.execute(_INSERT_EVENTS, rows)
    if cache is not None:
        # A rollback leaves this stale; the guarded UPDATE above then falls back.
        cache.update(seq=rows[-1]["seq"], hash=rows[-1]["hash"])
    return [row["seq"] for row in rows]


async def append_audit_many(session: AsyncSession, events: Sequence[AuditEvent]) -> list[int]:
    """Append ``events`` inside the session's open transaction (see :func:`append_audit_sync`).

    The events commit or roll back together with whatever else the caller's
    transaction does; observers (metrics) hear about them after commit.
    """
    if not events:
        return []
    cache: dict[str, Any] | None = session.info.get("audit_head")
    seqs = await session.run_sync(lambda ss: append_audit_sync(ss.connection(), events, cache))
    session.info.setdefault("audit_events", []).extend(events)
    return seqs


def _chain(seq: int, prev_hash: str, events: Sequence[AuditEvent]) -> list[dict[str, Any]]:
    rows = []
    for event in events:
        seq += 1
        row = _row_values(seq, prev_hash, event)
        rows.append(row)
        prev_hash = row["hash"]
    return rows


async def append_audit(session: AsyncSession, event: AuditEvent) -> int:
    """Append one event inside the caller's open transaction; return its seq."""
    (seq,) = await append_audit_many(session, [event])
    return seq


# --------------------------------------------------------------------------- reading


def _record(row: Any) -> AuditRecord:
    values = dict(row._mapping)
    values["ts"] = utc(values["ts"])
    return AuditRecord(**values)


class AuditLog:
    """Repository over the audit chain: append, list and verify."""

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
            return [_record(r) for r in (await s.execute(stmt)).all()]

    async def verify(
        self, *, batch: int = 1000, anchors: Mapping[int, str] | None = None, since: tuple[int, str] | None = None
    ) -> VerifyResult:
        """Walk the chain in seq order, ``batch`` rows per query, up to the head
        as it was when verify started (so it ends while appenders are busy).

        Fails at the first seq that is missing (deleted row), whose
        ``prev_hash`` does not link to the row before (deleted, swapped or
        reordered rows), whose hash does not match its contents (edited row),
        or where the head disagrees with the rows (deleted tail, or a row
        inserted past the head).

        ``anchors`` maps seqs to the hashes signed checkpoints hold for them
        (:mod:`storage.checkpoints`): a row whose hash differs (history rewritten
        and re-chained) or an anchored seq the log no longer reaches (wiped or
        truncated, the head rewritten to match) fails too, naming the checkpoint
        in :attr:`VerifyResult.checkpoint_seq`. ``since`` starts the walk after a
        trusted ``(seq, hash)`` instead of at the genesis (checking only new rows).
        """
        anchors = anchors or {}
        head = await self._snapshot()
        bound = head.seq if head.seq is not None else head.max_seq
        last_seq, last_hash = since or (0, GENESIS_HASH)
        if bound < last_seq:
            return _broken(
                bound + 1,
                f"the log ends at seq {bound}, before the checkpointed seq {last_seq}: rows deleted or the log wiped",
                checkpoint_seq=last_seq,
            )
        walked = await self._walk(_Walked(seq=last_seq, hash=last_hash), bound, batch, anchors)
        if isinstance(walked, VerifyResult):
            return walked
        return _check_end(head, anchors, walked)

    async def _walk(self, start: _Walked, bound: int, batch: int, anchors: Mapping[int, str]) -> VerifyResult | _Walked:
        """Check every row after ``start`` up to ``bound``: the first broken one, or where the walk ended."""
        last, matched = start, start.seq
        while last.seq < bound:
            try:
                rows = await self._batch(last.seq, bound, batch)
            except (ValueError, TypeError):  # a column the driver cannot decode (garbled JSON, time)
                return await self._garbled(last.seq, min(bound, last.seq + batch))
            if not rows:
                return _broken(last.seq + 1, f"deleted tail: the head is at seq {bound}")
            for row in rows:
                values = dict(row._mapping)
                broken = _check_row(values, last, anchors.get(values["seq"]), matched)
                if broken is not None:
                    return broken
                if values["seq"] in anchors:
                    matched = values["seq"]
                last = _Walked(seq=values["seq"], hash=values["hash"])
        return last

    async def _garbled(self, after_seq: int, upto_seq: int) -> VerifyResult:
        """The first row after ``after_seq`` that cannot be read (one batch failed to decode)."""
        for seq in range(after_seq + 1, upto_seq + 1):
            try:
                await self._batch(seq - 1, seq, 1)
            except (ValueError, TypeError) as exc:
                return _broken(seq, f"the row cannot be read (garbled: {type(exc).__name__})")
        return _broken(after_seq + 1, "a row cannot be read (garbled)")

    async def row_intact(self, seq: int) -> bool:
        """Whether row ``seq`` hashes to its stored hash and links to the row before it (the
        genesis for seq 1): an event relied on (``policy.applied``) was not forged in place."""
        rows = await self._batch(max(seq - 2, 0), seq, 2)
        by_seq = {r._mapping["seq"]: dict(r._mapping) for r in rows}
        row = by_seq.get(seq)
        if row is None:
            return False
        prev_hash = by_seq[seq - 1]["hash"] if seq > 1 and seq - 1 in by_seq else GENESIS_HASH
        if seq > 1 and seq - 1 not in by_seq:
            return False
        return _check_row(row, _Walked(seq=seq - 1, hash=prev_hash), None, seq - 1) is None

    async def head_seq(self) -> int:
        """The audit head's seq as stored (0: none yet); exported as a gauge, which an alert
        watches for going down (a truncated log with its head rewritten)."""
        return (await self._snapshot()).seq or 0

    async def _snapshot(self) -> _Snapshot:
        """Head and highest stored seq, read in one statement (one snapshot)."""
        stmt = select(
            select(_HEAD.c.seq).where(_HEAD.c.id == _HEAD_ID).scalar_subquery(),
            select(_HEAD.c.hash).where(_HEAD.c.id == _HEAD_ID).scalar_subquery(),
            select(func.coalesce(func.max(_EVENTS.c.seq), 0)).scalar_subquery(),
        )
        async with self._db.sessions() as s, s.begin():
            seq, hash_, max_seq = (await s.execute(stmt)).one()
        return _Snapshot(seq=seq, hash=hash_, max_seq=int(max_seq))

    async def _batch(self, after_seq: int, upto_seq: int, limit: int) -> Sequence[Any]:
        where = (_EVENTS.c.seq > after_seq) & (_EVENTS.c.seq <= upto_seq)
        stmt = select(_EVENTS).where(where).order_by(_EVENTS.c.seq).limit(limit)
        async with self._db.sessions() as s, s.begin():
            return (await s.execute(stmt)).all()


@dataclass(frozen=True, kw_only=True)
class _Snapshot:
    seq: int | None  # None: no head row
    hash: str | None
    max_seq: int


@dataclass(frozen=True, kw_only=True)
class _Walked:
    """The last row a walk checked (or the trusted start): its seq and hash."""

    seq: int
    hash: str


def _check_row(values: dict[str, Any], last: _Walked, signed: str | None, matched: int) -> VerifyResult | None:
    """The row after ``last``: linked, intact and, when checkpointed, the row the checkpoint signed."""
    seq = values["seq"]
    if seq != last.seq + 1:
        return _broken(last.seq + 1, f"missing row: next row is seq {seq}")
    if values["prev_hash"] != last.hash:
        return _broken(seq, "prev_hash does not link to the previous row")
    if chain_hash(last.hash, values) != values["hash"]:
        return _broken(seq, "hash does not match the row's contents")
    if signed is not None and signed != values["hash"]:
        return _broken(
            seq,
            f"seq {seq} is not the row its checkpoint signed: history between "
            f"seq {matched + 1} and {seq} was rewritten and re-chained",
            checkpoint_seq=seq,
        )
    return None


def _check_end(head: _Snapshot, anchors: Mapping[int, str], last: _Walked) -> VerifyResult:
    """Where the walk ended against the checkpoints and the head row."""
    beyond = [seq for seq in anchors if seq > last.seq]
    if beyond:
        top = max(beyond)
        return _broken(
            last.seq + 1,
            f"checkpointed seq {top} is gone: the log ends at seq {last.seq} "
            "(rows deleted or the log wiped, the head rewritten to match)",
            checkpoint_seq=top,
        )
    if head.seq is None:
        if last.seq == 0:
            return _ok(0, GENESIS_HASH)
        return _broken(last.seq, "the audit head row is missing")
    if head.hash != last.hash:
        return _broken(last.seq, "the head hash does not match the last row")
    if head.max_seq > head.seq:
        return _broken(head.seq + 1, f"row beyond the head (seq {head.seq}): inserted")
    return _ok(last.seq, last.hash)


def _ok(count: int, head_hash: str) -> VerifyResult:
    return VerifyResult(ok=True, count=count, head_hash=head_hash)


def _broken(seq: int, reason: str, *, checkpoint_seq: int | None = None) -> VerifyResult:
    return VerifyResult(ok=False, count=seq - 1, broken_seq=seq, reason=reason, checkpoint_seq=checkpoint_seq)


# --------------------------------------------------------------------------- PostgreSQL guard

#: DDL that makes ``audit_events`` append-only on PostgreSQL (run by migration 0001).
PG_AUDIT_GUARD_SQL: list[str] = [
    """
    CREATE OR REPLACE FUNCTION audit_events_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION USING
            MESSAGE = 'audit_events is append-only; ' || TG_OP || ' refused',
            ERRCODE = 'insufficient_privilege';
    END;
    $$
    """,
    """
    CREATE TRIGGER audit_events_no_update_delete
    BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only()
    """,
    """
    CREATE TRIGGER audit_events_no_truncate
    BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only()
    """,
]

#: Reverses :data:`PG_AUDIT_GUARD_SQL` (migration downgrade).
PG_AUDIT_GUARD_DROP_SQL: list[str] = [
    "DROP TRIGGER IF EXISTS audit_events_no_truncate ON audit_events",
    "DROP TRIGGER IF EXISTS audit_events_no_update_delete ON audit_events",
    "DROP FUNCTION IF EXISTS audit_events_append_only()",
]

#: DDL that makes ``audit_head`` move only forward, and only to a row that exists (migration 0004).
#: The application must update the head to append, so privileges alone cannot stop it rewinding
#: the head or pointing it past the rows; these triggers do. The row check is deferred to commit
#: (the head is written before the events it names) and names the table by its own schema, so a
#: temporary table called ``audit_events`` cannot stand in for the real one.
PG_AUDIT_HEAD_GUARD_SQL: list[str] = [
    """
    CREATE OR REPLACE FUNCTION audit_head_forward_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP <> 'UPDATE' THEN
            RAISE EXCEPTION USING
                MESSAGE = 'audit_head is append-only; ' || TG_OP || ' refused',
                ERRCODE = 'insufficient_privilege';
        END IF;
        IF NEW.id <> OLD.id OR NEW.seq <= OLD.seq THEN
            RAISE EXCEPTION USING
                MESSAGE = 'audit_head only moves forward (seq ' || OLD.seq || ' to ' || NEW.seq || ' refused)',
                ERRCODE = 'insufficient_privilege';
        END IF;
        RETURN NEW;
    END;
    $$
    """,
    """
    CREATE OR REPLACE FUNCTION audit_head_names_a_row() RETURNS trigger
    LANGUAGE plpgsql AS $$
    DECLARE
        found boolean;
    BEGIN
        IF NEW.seq = 0 THEN
            RETURN NULL;
        END IF;
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.audit_events WHERE seq = $1 AND hash = $2)',
                       TG_TABLE_SCHEMA)
            INTO found USING NEW.seq, NEW.hash;
        IF NOT found THEN
            RAISE EXCEPTION USING
                MESSAGE = 'audit_head names seq ' || NEW.seq || ', which is not in audit_events with that hash',
                ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NULL;
    END;
    $$
    """,
    """
    CREATE TRIGGER audit_head_forward_only
    BEFORE UPDATE OR DELETE ON audit_head
    FOR EACH ROW EXECUTE FUNCTION audit_head_forward_only()
    """,
    """
    CREATE TRIGGER audit_head_no_truncate
    BEFORE TRUNCATE ON audit_head
    FOR EACH STATEMENT EXECUTE FUNCTION audit_head_forward_only()
    """,
    """
    CREATE CONSTRAINT TRIGGER audit_head_names_a_row
    AFTER INSERT OR UPDATE ON audit_head
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION audit_head_names_a_row()
    """,
]

#: Reverses :data:`PG_AUDIT_HEAD_GUARD_SQL` (migration downgrade).
PG_AUDIT_HEAD_GUARD_DROP_SQL: list[str] = [
    "DROP TRIGGER IF EXISTS audit_head_names_a_row ON audit_head",
    "DROP TRIGGER IF EXISTS audit_head_no_truncate ON audit_head",
    "DROP TRIGGER IF EXISTS audit_head_forward_only ON audit_head",
    "DROP FUNCTION IF EXISTS audit_head_names_a_row()",
    "DROP FUNCTION IF EXISTS audit_head_forward_only()",
]

# Databases built with ``create_all`` (tests) get the guards too.
for _statement in PG_AUDIT_GUARD_SQL:
    sa_event.listen(_EVENTS, "after_create", DDL(_statement).execute_if(dialect="postgresql"))
for _statement in PG_AUDIT_HEAD_GUARD_SQL:
    # DDL %-formats its text; format()'s %I must survive that.
    sa_event.listen(_HEAD, "after_create", DDL(_statement.replace("%", "%%")).execute_if(dialect="postgresql"))
