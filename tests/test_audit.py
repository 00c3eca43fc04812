"""The audit chain: canonical hashing, atomic appends, a busy chain that verifies,
every single kind of tampering caught at the right seq, and the PostgreSQL guard."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast

import pytest
from sqlalchemy import Table, delete, insert, select, text, update
from sqlalchemy import event as sa_event
from sqlalchemy.exc import DBAPIError

from storage import fastsql
from storage.audit import (
    GENESIS_HASH,
    ROOT,
    AuditEvent,
    AuditLog,
    VerifyResult,
    append_audit,
    append_audit_many,
    append_audit_sync,
    canonical_json,
    chain_hash,
    genesis,
    hash_personal,
    partition_of,
    sha256_hex,
)
from storage.audit_guard import PG_AUDIT_GUARD_DROP_SQL
from storage.db import Database
from storage.models import AuditEventRow, AuditHeadRow

EVENTS = cast(Table, AuditEventRow.__table__)
HEAD = cast(Table, AuditHeadRow.__table__)
N = 40  # chain length for the tampering tests
BATCH = 7  # small verify batches so breaks land on and across batch edges


def ev(i: int, **over: Any) -> AuditEvent:
    fields: dict[str, Any] = {
        "kind": "proposal",
        "run_id": f"run_{i % 4}",
        "proposal_id": f"prop_{i}",
        "trace_id": "trace_1",
        "principal": "rep:U1",
        "tool": "issue_refund",
        "args_hash": sha256_hex(str(i)),
        "idempotency_key": f"refund:o{i}",
        "model": "claude-x",
        "prompt_version": "p1",
        "policy_version": "pol1",
        "latency_ms": 1.25 * i,
        "data": {"i": i, "note": "café ☕", "amounts": [12.5, 0.1]},
    }
    fields.update(over)
    return AuditEvent(**fields)


#: Every event of the tampering chain belongs to one run, so to one partition (not the root):
#: with nothing else written, its positions are the global seqs.
ONE_RUN = "run_tampered"
PART = partition_of(ONE_RUN)


async def build_chain(db: Database, n: int = N, run_id: str | None = ONE_RUN) -> None:
    log = AuditLog(db)
    for i in range(1, n + 1, 2):
        await log.append_many([ev(i, run_id=run_id), ev(i + 1, run_id=run_id)] if i < n else [ev(i, run_id=run_id)])


# ------------------------------------------------------------------ helpers


def test_canonical_json_is_sorted_compact_utf8_with_utc_times() -> None:
    """Keys sorted, no spaces, non-ASCII kept, datetimes as fixed-width UTC."""
    paris = timezone(timedelta(hours=2))
    value = {"b": 1, "a": {"z": "é", "y": (1, 2)}, "t": datetime(2024, 5, 1, 14, 0, tzinfo=paris)}
    assert canonical_json(value) == ('{"a":{"y":[1,2],"z":"é"},"b":1,"t":"2024-05-01T12:00:00.000000Z"}')
    assert canonical_json({"t": datetime(2024, 5, 1, 12, 0)}) == '{"t":"2024-05-01T12:00:00.000000Z"}'


def test_canonical_json_normalises_floats_the_database_would_change() -> None:
    """-0.0 and floats ≥ 1e16 are written the way they come back from JSONB."""
    assert canonical_json([-0.0, 1e20, 0.1, 1.5e-7]) == "[0.0,100000000000000000000,0.1,1.5e-07]"
    assert canonical_json([1e20]) == canonical_json([100000000000000000000])


def test_canonical_json_refuses_nan_and_non_string_keys() -> None:
    """What JSON cannot represent exactly is an error, not a silent coercion."""
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})
    with pytest.raises(TypeError):
        canonical_json({1: "a"})
    with pytest.raises(TypeError):
        canonical_json({"s": {1, 2}})


def test_hash_personal_is_stable_and_domain_separated() -> None:
    """Personal references are deterministic but differ from a bare sha256."""
    assert hash_personal("ann@example.com") == hash_personal("ann@example.com")
    assert hash_personal("ann@example.com") != sha256_hex("ann@example.com")
    assert len(hash_personal("x")) == 64


def test_audit_event_rejects_bad_fields() -> None:
    """kind is required; id-like fields must be strings."""
    with pytest.raises(ValueError):
        AuditEvent(kind="")
    with pytest.raises(TypeError):
        AuditEvent(kind="x", run_id=123)  # type: ignore[arg-type]


# ------------------------------------------------------------------ appending


async def test_busy_chain_from_20_concurrent_appenders_verifies(any_db: Database) -> None:
    """500 events from 20 concurrent writers (single and 3-event appends) form one
    gap-free chain with each writer's events in its own order."""
    log = AuditLog(any_db)

    async def singles(w: int) -> None:
        for i in range(26):
            async with any_db.sessions() as s, s.begin():
                await append_audit(s, ev(i, run_id=f"w{w}", data={"w": w, "i": i}))

    async def triples(w: int) -> None:
        for i in range(8):
            batch = [ev(i, run_id=f"w{w}", data={"w": w, "i": 3 * i + j}) for j in range(3)]
            async with any_db.sessions() as s, s.begin():
                await append_audit_many(s, batch)

    await asyncio.gather(*(singles(w) for w in range(10)), *(triples(w) for w in range(10, 20)))

    result = await log.verify(batch=64)
    assert result.ok and result.count == 500 and result.broken_seq is None
    records = await log.list(limit=1000)
    assert [r.seq for r in records] == list(range(1, 501))
    parts = {r.part for r in records}
    assert len(parts) > 1 and ROOT not in parts  # runs spread over partitions; none in the root
    for part in parts:
        chain = [r for r in records if r.part == part]
        assert [r.pseq for r in chain] == list(range(1, len(chain) + 1))
        assert chain[0].prev_hash == genesis(part) != GENESIS_HASH
        assert all(b.prev_hash == a.hash for a, b in zip(chain, chain[1:], strict=False))
    assert result.head_hash == GENESIS_HASH and result.head_seq == 0  # the root: nothing yet
    for w in range(20):
        mine = [r.data["i"] for r in records if r.run_id == f"w{w}"]
        assert mine == sorted(mine) and len(mine) in (24, 26)


async def test_event_commits_or_rolls_back_with_the_callers_transaction(any_db: Database) -> None:
    """An audit event never outlives the state change it describes."""
    log = AuditLog(any_db)
    with pytest.raises(RuntimeError):
        async with any_db.sessions() as s, s.begin():
            await append_audit(s, ev(1))
            raise RuntimeError("state change failed")
    assert (await log.verify()).count == 0
    seq = await log.append(ev(2))
    (record,) = await log.list()
    # The position in the partition has no gap; the global seq may skip one (a PostgreSQL sequence).
    assert record.seq == seq and record.pseq == 1
    assert (await log.verify()).count == 1


async def test_append_many_returns_consecutive_seqs_and_empty_is_a_noop(any_db: Database) -> None:
    """Seqs are handed out in order; appending nothing touches nothing."""
    log = AuditLog(any_db)
    assert await log.append_many([]) == []
    assert await log.append_many([ev(1), ev(2), ev(3)]) == [1, 2, 3]
    assert await log.append(ev(4)) == 4


async def test_stored_values_hash_the_same_after_a_round_trip(any_db: Database) -> None:
    """Awkward floats, unicode, an int latency and a non-UTC time still verify."""
    tokyo = timezone(timedelta(hours=9))
    event = AuditEvent(
        kind="execution",
        latency_ms=12,
        ts=datetime(2024, 5, 1, 21, 0, 0, 123456, tzinfo=tokyo),
        data={"f": [1e20, -0.0, 0.1, 1.5e-7, 2.5], "s": "ünï ✓", "n": None, "deep": {"b": [True]}},
    )
    log = AuditLog(any_db)
    await log.append(event)
    assert (await log.verify()).ok
    (record,) = await log.list()
    assert record.ts == datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    assert record.ts.tzinfo is not None and record.latency_ms == 12.0
    assert record.data["s"] == "ünï ✓"


async def test_list_filters_by_run_proposal_kind_and_pages(any_db: Database) -> None:
    """list() narrows by run, proposal and kind, in seq order, with after_seq paging."""
    log = AuditLog(any_db)
    for i in range(1, 13):
        await log.append(ev(i))
    await log.append(ev(99, kind="approval.decided", proposal_id="prop_3"))
    assert [r.seq for r in await log.list(run_id="run_1")] == [1, 5, 9]
    assert [r.kind for r in await log.list(proposal_id="prop_3")] == [
        "proposal",
        "approval.decided",
    ]
    assert [r.seq for r in await log.list(kind="approval.decided")] == [13]
    assert [r.seq for r in await log.list(after_seq=10, limit=2)] == [11, 12]


async def test_verify_of_an_empty_log_is_ok(any_db: Database) -> None:
    """No rows and no head is a valid (empty) chain."""
    assert await AuditLog(any_db).verify() == VerifyResult(ok=True, count=0, head_hash=GENESIS_HASH)


async def test_verify_is_ok_while_appenders_are_busy(any_db: Database) -> None:
    """A verify racing with appends ends, and never reports a false break."""
    log = AuditLog(any_db)
    await build_chain(any_db, 10)
    results: list[VerifyResult] = []

    async def writer() -> None:
        for i in range(40):
            await log.append_many([ev(i), ev(i + 1)])

    async def verifier() -> None:
        for _ in range(5):
            results.append(await log.verify(batch=3))
            await asyncio.sleep(0)

    await asyncio.gather(writer(), verifier())
    assert all(r.ok and r.count >= 10 for r in results), results
    final = await log.verify()
    assert final.ok and final.count == 90


# ------------------------------------------------------------------ tampering


async def as_dba(db: Database, work: Callable[[Any], Awaitable[None]]) -> None:
    """Run ``work(session)`` as a privileged session that switches the guard off."""
    async with db.sessions() as s, s.begin():
        if db.is_postgres:
            await s.execute(text("ALTER TABLE audit_events DISABLE TRIGGER USER"))
        await work(s)
        if db.is_postgres:
            await s.execute(text("ALTER TABLE audit_events ENABLE TRIGGER USER"))


async def row(s: Any, seq: int) -> dict[str, Any]:
    return dict((await s.execute(select(EVENTS).where(EVENTS.c.seq == seq))).one()._mapping)


def edit(column: str, change: Callable[[Any], Any]) -> Callable[[Any], Awaitable[None]]:
    async def work(s: Any) -> None:
        old = (await row(s, 17))[column]
        await s.execute(update(EVENTS).where(EVENTS.c.seq == 17).values({column: change(old)}))

    return work


@pytest.mark.parametrize(
    ("column", "change"),
    [
        ("kind", lambda v: "forged"),
        ("principal", lambda v: "rep:U2"),
        ("run_id", lambda v: None),
        ("ts", lambda v: v + timedelta(seconds=1)),
        ("latency_ms", lambda v: v + 0.001),
        ("data", lambda v: {**v, "i": 999}),
        ("hash", lambda v: "f" * 64),
        ("prev_hash", lambda v: "0" * 64),
    ],
)
async def test_verify_names_an_edited_row(any_db: Database, column: str, change: Any) -> None:
    """Changing any one column of row 17 breaks the chain at seq 17."""
    await build_chain(any_db)
    await as_dba(any_db, edit(column, change))
    result = await AuditLog(any_db).verify(batch=BATCH)
    assert (result.ok, result.broken_seq, result.count) == (False, 17, 16)


@pytest.mark.parametrize("k", [1, 14, 15, N - 1])
async def test_verify_names_a_deleted_row(any_db: Database, k: int) -> None:
    """A row deleted from the start, a batch edge or the middle is reported by its seq."""
    await build_chain(any_db)

    async def work(s: Any) -> None:
        await s.execute(delete(EVENTS).where(EVENTS.c.seq == k))

    await as_dba(any_db, work)
    result = await AuditLog(any_db).verify(batch=BATCH)
    assert (result.ok, result.broken_seq) == (False, k)
    assert "missing" in (result.reason or "")


@pytest.mark.parametrize("removed", [1, 3, N])
async def test_verify_names_a_deleted_tail(any_db: Database, removed: int) -> None:
    """Deleting the last rows (or all of them) is caught by the head."""
    await build_chain(any_db)

    async def work(s: Any) -> None:
        await s.execute(delete(EVENTS).where(EVENTS.c.seq > N - removed))

    await as_dba(any_db, work)
    result = await AuditLog(any_db).verify(batch=BATCH)
    assert (result.ok, result.broken_seq, result.count) == (False, N - removed + 1, N - removed)
    assert "tail" in (result.reason or "")


@pytest.mark.parametrize("with_hashes", [True, False])
async def test_verify_names_swapped_rows(any_db: Database, with_hashes: bool) -> None:
    """Swapping two rows' contents (with or without their hash columns) breaks at the first."""
    await build_chain(any_db)
    keep = {"seq", "part", "pseq"} if with_hashes else {"seq", "part", "pseq", "hash", "prev_hash"}

    async def work(s: Any) -> None:
        a, b = await row(s, 10), await row(s, 20)
        for seq, src in ((10, b), (20, a)):
            values = {c: v for c, v in src.items() if c not in keep}
            await s.execute(update(EVENTS).where(EVENTS.c.seq == seq).values(values))

    await as_dba(any_db, work)
    result = await AuditLog(any_db).verify(batch=BATCH)
    assert (result.ok, result.broken_seq) == (False, 10)


@pytest.mark.parametrize(("column", "broken"), [("pseq", 21), ("seq", 22)])
async def test_verify_names_reordered_rows(any_db: Database, column: str, broken: int) -> None:
    """Renumbering two rows (swapping their positions, or their global seqs) breaks the chain
    at the lower position, or where the global order goes backwards."""
    await build_chain(any_db)

    async def work(s: Any) -> None:
        for old, new in ((21, -1), (22, 21), (-1, 22)):
            await s.execute(update(EVENTS).where(EVENTS.c[column] == old).values({column: new}))

    await as_dba(any_db, work)
    result = await AuditLog(any_db).verify(batch=BATCH)
    assert (result.ok, result.broken_seq, result.part) == (False, broken, PART)


@pytest.mark.parametrize("valid_hash", [True, False])
async def test_verify_names_an_inserted_row(any_db: Database, valid_hash: bool) -> None:
    """A forged row past the head is caught, even one whose hash links correctly."""
    await build_chain(any_db)

    async def work(s: Any) -> None:
        last = await row(s, N)
        forged = {**last, "seq": N + 1, "pseq": N + 1, "kind": "forged", "prev_hash": last["hash"]}
        forged["hash"] = chain_hash(last["hash"], forged) if valid_hash else "e" * 64
        await s.execute(insert(EVENTS).values(forged))

    await as_dba(any_db, work)
    result = await AuditLog(any_db).verify(batch=BATCH)
    assert (result.ok, result.broken_seq, result.count) == (False, N + 1, N)


@pytest.mark.parametrize("garble", ["data = '{not json'", "ts = 'not a time'"])
async def test_verify_names_a_garbled_row_of_a_partition(db: Database, garble: str) -> None:
    """A row its driver cannot decode (SQLite only: PostgreSQL's types refuse such a value) is
    broken at its position in its partition, not a traceback."""
    await build_chain(db)
    await as_dba(db, lambda s: s.execute(text(f"UPDATE audit_events SET {garble} WHERE part = {PART} AND pseq = 17")))
    result = await AuditLog(db).verify(batch=BATCH)
    assert (result.ok, result.part, result.broken_seq, result.count) == (False, PART, 17, 16)
    assert "garbled" in (result.reason or "")


async def as_dba_on_head(db: Database, work: Callable[[Any], Awaitable[None]]) -> None:
    """Run ``work(session)`` with the PostgreSQL head guard switched off."""
    async with db.sessions() as s, s.begin():
        if db.is_postgres:
            await s.execute(text("ALTER TABLE audit_head DISABLE TRIGGER USER"))
        await work(s)
        if db.is_postgres:
            await s.execute(text("ALTER TABLE audit_head ENABLE TRIGGER USER"))


async def test_verify_notices_a_missing_or_rewound_head(any_db: Database) -> None:
    """Removing the head row, or rewinding it, does not hide anything."""
    await build_chain(any_db)

    async def forge(s: Any) -> None:
        await s.execute(update(HEAD).values(hash="a" * 64))

    async def rewind(s: Any) -> None:
        (prev,) = (await s.execute(select(EVENTS.c.hash).where(EVENTS.c.pseq == N - 1))).one()
        await s.execute(update(HEAD).values(seq=N - 1, hash=prev))

    async def drop(s: Any) -> None:
        await s.execute(delete(HEAD))

    await as_dba_on_head(any_db, forge)
    assert (await AuditLog(any_db).verify()).broken_seq == N
    await as_dba_on_head(any_db, rewind)
    assert (await AuditLog(any_db).verify()).broken_seq == N
    await as_dba_on_head(any_db, drop)
    result = await AuditLog(any_db).verify()
    assert not result.ok and "head" in (result.reason or "")


# ------------------------------------------------------------------ PostgreSQL guard


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE audit_events SET kind = 'forged' WHERE seq = 1",
        "DELETE FROM audit_events WHERE seq = 1",
        "TRUNCATE audit_events",
    ],
)
async def test_pg_guard_refuses_update_delete_and_truncate(pg_db: Database, sql: str) -> None:
    """On PostgreSQL the table is append-only for ordinary sessions."""
    await build_chain(pg_db, 3)
    with pytest.raises(DBAPIError, match="append-only"):
        async with pg_db.sessions() as s, s.begin():
            await s.execute(text(sql))
    assert (await AuditLog(pg_db).verify()).count == 3


async def test_pg_guard_drop_sql_removes_the_guard(pg_db: Database) -> None:
    """The downgrade DDL really undoes the guard (migration round trip)."""
    await build_chain(pg_db, 3)
    async with pg_db.sessions() as s, s.begin():
        for statement in PG_AUDIT_GUARD_DROP_SQL:
            await s.execute(text(statement))
        await s.execute(text("DELETE FROM audit_events WHERE seq = 3"))
    assert (await AuditLog(pg_db).verify()).broken_seq == 3


@pytest.mark.parametrize(
    ("sql", "match"),
    [
        ("UPDATE audit_head SET seq = 1, hash = (SELECT hash FROM audit_events WHERE seq = 1)", "only moves forward"),
        ("UPDATE audit_head SET seq = 99, hash = repeat('a', 64)", "not in audit_events"),
        ("DELETE FROM audit_head", "append-only"),
        ("TRUNCATE audit_head", "append-only"),
    ],
)
async def test_pg_head_guard_refuses_rewinding_forging_and_removing_the_head(
    pg_db: Database, sql: str, match: str
) -> None:
    """The application must update the head to append, so the guard lets it move only forward,
    only to a row that exists (checked at commit), and never away."""
    await build_chain(pg_db, 3)
    with pytest.raises(DBAPIError, match=match):
        async with pg_db.sessions() as s, s.begin():
            await s.execute(text(sql))
    assert (await AuditLog(pg_db).verify()).count == 3
    assert await AuditLog(pg_db).append(ev(4)) == 4


# ------------------------------------------------------------------ no single hot row


def _runs_in_other_partitions(n: int) -> list[str]:
    """``n`` run ids whose events land in ``n`` different partitions."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < n:
        found.setdefault(partition_of(f"run_{i}"), f"run_{i}")
        i += 1
    return list(found.values())


async def test_pg_writers_of_different_partitions_never_wait_for_each_other(pg_db: Database) -> None:
    """A transaction holding its partition's head (uncommitted) does not block an append to
    another partition (with one head row for the whole log, the second waited until the first
    committed: here it would hit its lock timeout). Both commit and the log verifies."""
    first, second = _runs_in_other_partitions(2)
    async with pg_db.sessions() as holder, holder.begin():
        await append_audit(holder, ev(1, run_id=first))  # holds first's head row until commit
        async with pg_db.sessions() as other, other.begin():
            await other.execute(text("SET LOCAL lock_timeout = '5s'"))
            await append_audit_many(other, [ev(2, run_id=second), ev(3, run_id=second)])
    result = await AuditLog(pg_db).verify()
    assert result.ok and result.count == 3


async def test_an_append_with_its_partition_head_cached_is_one_round_trip(any_db: Database) -> None:
    """The hot path, once this process wrote the partition's head, whatever the number of
    events: on SQLite one guarded head UPDATE and one bulk INSERT (no round trips there); on
    PostgreSQL both in one statement (the UPDATE a data-modifying CTE of the INSERT)."""
    seen: list[str] = []
    engine = any_db.engine.sync_engine
    writer = any_db.sync_writer

    def count(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        seen.append(statement)

    async def step(i: int) -> None:
        events = [ev(i, run_id="run_hot"), ev(i + 1, run_id="run_hot"), ev(i + 2, run_id="run_hot")]
        await any_db.write(lambda conn, ctx: append_audit_sync(conn, events, ctx.audit_head))

    await step(1)  # the first append reads and locks the head
    engines = [engine, *(writer.engines if writer is not None else [])]
    for e in engines:
        sa_event.listen(e, "before_cursor_execute", count)
    fastsql.TRACE.append(seen.append)
    try:
        await step(4)
    finally:
        fastsql.TRACE.remove(seen.append)
        for e in engines:
            sa_event.remove(e, "before_cursor_execute", count)
    work = [s for s in seen if s.split()[0].upper() in ("UPDATE", "INSERT", "SELECT", "WITH")]
    if any_db.is_postgres:
        assert len(work) == 1, seen
        assert work[0].startswith("WITH moved AS") and "UPDATE audit_head" in work[0], seen
        assert "INSERT INTO audit_events" in work[0], seen
    else:
        assert [s.split()[0].upper() for s in work] == ["UPDATE", "INSERT"], seen
    assert (await AuditLog(any_db).verify()).count == 6


async def test_an_append_from_a_stale_head_writes_nothing_of_itself_and_then_chains_on(any_db: Database) -> None:
    """Two writers of one partition (two replicas' caches): each append after the other's
    finds its cached head moved. On PostgreSQL the one-statement append then inserts none of
    its events (the CTE's UPDATE matched no row) and the append goes the locked way; the chain
    stays whole, positions consecutive, whatever the batch size (beyond 8 events, always the
    locked way)."""
    mine: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    sizes = [1, 3, 1, 9, 2, 1]
    for i, n in enumerate(sizes):
        cache = mine if i % 2 == 0 else theirs
        events = [ev(100 * i + k, run_id="run_shared") for k in range(n)]
        at = await any_db.write(lambda conn, ctx, e=events, c=cache: append_audit_sync(conn, e, c))
        assert at is not None and (at.first, at.last) == (sum(sizes[:i]) + 1, sum(sizes[: i + 1]))
    result = await AuditLog(any_db).verify()
    assert result.ok and result.count == sum(sizes)
    rows = await AuditLog(any_db).list(run_id="run_shared")
    assert [r.data for r in rows] == [ev(100 * i + k).data for i, n in enumerate(sizes) for k in range(n)]
