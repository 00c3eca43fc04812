"""Alembic migrations (STYLE: revisions only, tested from a blank database and from the
previous schema) on SQLite and on a freshly created PostgreSQL database: up, down, up
again; rows survive an upgrade; the migrated schema is exactly the ORM models; the
PostgreSQL audit guard is in place."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine

import sandbox.models  # noqa: F401  (registers the store tables)
import storage.models  # noqa: F401  (registers the runtime tables)
from sandbox.schema import downgrade, heads, upgrade
from sandbox.search import include_object
from storage.audit import GENESIS_HASH, ROOT, AuditEvent, AuditLog, VerifyResult, chain_hash
from storage.db import Base, create_database
from storage.jobs import JobQueue
from storage.limits import UsageCounts
from tests.conftest import PG_URL

RUNTIME_TABLES = {
    "conversations",
    "messages",
    "runs",
    "proposals",
    "confirmations",
    "approvals",
    "tool_executions",
    "audit_events",
    "audit_head",
    "jobs",
    "token_usage",
    "case_notes",
}


@pytest.fixture(params=["sqlite", "postgresql"])
async def blank_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The URL of an empty database: a new SQLite file, or ``CREATE DATABASE signoff_mig_…``
    through an admin connection to the test server (dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"
        return
    if not PG_URL:
        pytest.skip("SIGNOFF_TEST_PG_URL not set")
    name = f"signoff_mig_{uuid.uuid4().hex[:10]}"
    admin = create_async_engine(PG_URL, isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


async def _tables(url: str) -> set[str]:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
    finally:
        await engine.dispose()


async def _version(url: str) -> list[str]:
    """The database's current revisions, one per branch (runtime, sandbox)."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return sorted(await conn.run_sync(lambda c: MigrationContext.configure(c).get_current_heads()))
    finally:
        await engine.dispose()


async def _diff(url: str) -> list[Any]:
    engine = create_async_engine(url)
    opts = {"compare_type": True, "include_object": include_object}
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(
                lambda c: compare_metadata(MigrationContext.configure(c, opts=opts), Base.metadata)
            )
    finally:
        await engine.dispose()


async def test_blank_to_head_down_to_base_and_up_again(blank_url: str) -> None:
    """From an empty database to head (every model table exists), down to base (none left),
    and up to head again."""
    head = heads()
    assert len(head) == 2  # the runtime's chain and the sandbox store's branch
    await upgrade(blank_url)
    assert await _version(blank_url) == head
    assert set(Base.metadata.tables) <= await _tables(blank_url)
    await downgrade(blank_url, "base")
    assert await _version(blank_url) == []
    assert await _tables(blank_url) - {"alembic_version"} == set()
    await upgrade(blank_url)
    assert await _version(blank_url) == head
    assert set(Base.metadata.tables) <= await _tables(blank_url)


async def test_upgrade_from_the_previous_schema_keeps_the_rows(blank_url: str) -> None:
    """A database at ``0001_runtime`` with a conversation and an audit event in it: upgraded to
    head, the row is still there and the audit chain still verifies; the store tables exist."""
    await upgrade(blank_url, "0001_runtime")
    tables = await _tables(blank_url)
    assert RUNTIME_TABLES <= tables and not any(t.startswith("store_") for t in tables)
    db = create_database(blank_url)
    now = datetime.now(UTC)
    async with db.engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO conversations (id, channel, external_ref, principal_kind, principal_id, "
                "customer_id, status, loaded_groups, model, prompt_version, next_seq, meta, created_at, "
                "updated_at) VALUES ('conv_old', 'api', NULL, 'customer', 'C-7', 'C-7', 'open', :groups, "
                "'m', 'p', 0, :meta, :now, :now)"
            ),
            {"groups": "[]", "meta": "{}", "now": now},
        )
        old_hash = await _single_chain(conn, 3)
    await db.dispose()
    await upgrade(blank_url)
    db = create_database(blank_url)
    try:
        async with db.engine.connect() as conn:
            row = (await conn.execute(text("SELECT principal_id FROM conversations WHERE id = 'conv_old'"))).one()
        assert row[0] == "C-7"
        log = AuditLog(db)
        # The old chain is the root partition, each row where it was, hashing as before.
        assert await log.verify() == VerifyResult(ok=True, count=3, head_hash=old_hash, head_seq=3)
        assert [(r.seq, r.part, r.pseq) for r in await log.list()] == [(1, ROOT, 1), (2, ROOT, 2), (3, ROOT, 3)]
        new = await log.append(AuditEvent(kind="run.started", run_id="run_new", principal="customer:C-7"))
        await log.append(AuditEvent(kind="policy.applied"))
        assert new == 4  # the global seq carries on past the old rows (a sequence on PostgreSQL)
        result = await log.verify()
        assert result.ok and result.count == 5 and result.head_seq == 4
        assert any(t.startswith("store_") for t in await _tables(blank_url))
    finally:
        await db.dispose()


_OLD_STR_FIELDS = (
    "run_id", "proposal_id", "trace_id", "principal", "tool", "args_hash",
    "idempotency_key", "model", "prompt_version", "policy_version",
)  # fmt: skip


async def _single_chain(conn: Any, n: int) -> str:
    """``n`` events written the way the single chain wrote them (``seq`` = position, one head
    row); the head's hash."""
    prev = GENESIS_HASH
    for seq in range(1, n + 1):
        values: dict[str, Any] = dict.fromkeys(_OLD_STR_FIELDS)
        values.update(seq=seq, pseq=seq, ts=datetime(2026, 1, 1, 12, seq, tzinfo=UTC), kind="proposal")
        values.update(latency_ms=None, data={"i": seq}, run_id=f"run_{seq}")
        values["hash"] = chain_hash(prev, values)
        values["prev_hash"] = prev
        del values["pseq"]
        values["data"] = json.dumps(values["data"])
        cols = ", ".join(values)
        await conn.execute(text(f"INSERT INTO audit_events ({cols}) VALUES (:{', :'.join(values)})"), values)
        prev = values["hash"]
    await conn.execute(text("INSERT INTO audit_head (id, seq, hash) VALUES (1, :n, :h)"), {"n": n, "h": prev})
    return prev


@pytest.mark.filterwarnings("ignore:.*expression-based index")  # SQLite cannot reflect lower(email)
async def test_migrated_schema_matches_the_orm_models(blank_url: str) -> None:
    """Autogenerate finds nothing to change between the migrated database and the models
    (the full-text search DDL, which lives only in the database, is ignored)."""
    await upgrade(blank_url)
    assert await _diff(blank_url) == []


async def test_postgres_audit_guard_refuses_update_and_delete_after_migration(blank_url: str) -> None:
    """On PostgreSQL the migration installs the guard: UPDATE, DELETE and TRUNCATE of
    audit_events are refused and the chain is unchanged."""
    if not blank_url.startswith("postgresql"):
        pytest.skip("the guard is PostgreSQL's")
    await upgrade(blank_url)
    db = create_database(blank_url)
    try:
        log = AuditLog(db)
        await log.append_many([AuditEvent(kind="proposal", run_id="r1"), AuditEvent(kind="gate.execute", run_id="r1")])
        for sql in (
            "UPDATE audit_events SET kind = 'forged' WHERE seq = 1",
            "DELETE FROM audit_events WHERE seq = 2",
            "TRUNCATE audit_events",
        ):
            with pytest.raises(DBAPIError, match="append-only"):
                async with db.engine.begin() as conn:
                    await conn.execute(text(sql))
        result = await log.verify()
        assert result.ok and result.count == 2
    finally:
        await db.dispose()


async def test_upgrade_to_0004_moves_runtime_origins_out_of_tool_use_ids(blank_url: str) -> None:
    """Proposals the runtime made before 0004 named their origin inside ``tool_use_id``
    (``runtime:cnf_…``); after the upgrade the origin is a column the recovery reads."""
    await upgrade(blank_url, "0003_locks")
    db = create_database(blank_url)
    now = datetime.now(UTC)
    async with db.engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO conversations (id, channel, external_ref, principal_kind, principal_id, "
                "customer_id, status, loaded_groups, model, prompt_version, next_seq, meta, created_at, "
                "updated_at) VALUES ('conv_old', 'api', NULL, 'customer', 'C-7', 'C-7', 'open', '[]', "
                "'m', 'p', 0, '{}', :now, :now)"
            ),
            {"now": now},
        )
        await conn.execute(
            text(
                "INSERT INTO runs (id, conversation_id, status, steps, model, prompt_version, policy_version, "
                "trace_id, pending_ids, state, created_at, updated_at) VALUES ('run_old', 'conv_old', "
                "'waiting', 0, 'm', 'p', 'v', 't', '[]', '{}', :now, :now)"
            ),
            {"now": now},
        )
        for pid, use in (("p1", "runtime:cnf_abc"), ("p2", "runtime:apr_def"), ("p3", "toolu_1")):
            await conn.execute(
                text(
                    "INSERT INTO proposals (id, run_id, conversation_id, tool_use_id, tool, arguments, args_hash, "
                    "principal, step, is_error, policy_version, created_at) VALUES (:id, 'run_old', 'conv_old', "
                    ":use, 'issue_refund', :args, 'h', 'customer:C-7', 1, :f, 'v', :now)"
                ),
                {"id": pid, "use": use, "args": "{}", "now": now, "f": False},
            )
    await db.dispose()
    await upgrade(blank_url)
    db = create_database(blank_url)
    try:
        async with db.engine.connect() as conn:
            rows = dict((await conn.execute(text("SELECT id, origin FROM proposals"))).all())
        assert rows == {"p1": "confirmation:cnf_abc", "p2": "approval:apr_def", "p3": None}
    finally:
        await db.dispose()


async def test_a_database_of_the_previous_release_joins_the_sandbox_branch(blank_url: str) -> None:
    """The previous release made the store's tables inside the runtime's chain (one version row,
    ``0003_locks``). Upgraded now, the store's branch finds its tables and adds only what is new;
    both branches end at their heads and the store's rows are kept."""
    await upgrade(blank_url, "0003_locks")
    await upgrade(blank_url, "0002_store")
    engine = create_async_engine(blank_url)
    async with engine.begin() as conn:
        await conn.execute(text("DELETE FROM alembic_version"))
        await conn.execute(text("INSERT INTO alembic_version (version_num) VALUES ('0003_locks')"))
        await conn.execute(text("INSERT INTO store_customers (id, name, email) VALUES ('C-1', 'Ann', 'a@x.example')"))
    await engine.dispose()
    await upgrade(blank_url)
    assert await _version(blank_url) == heads()
    engine = create_async_engine(blank_url)
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT name FROM store_customers"))).scalar_one() == "Ann"
            cols = await conn.run_sync(lambda c: {col["name"] for col in inspect(c).get_columns("store_refunds")})
        assert "kind" in cols
    finally:
        await engine.dispose()


async def test_0021_keeps_the_newest_active_handoff_of_a_conversation_and_closes_the_rest(blank_url: str) -> None:
    """A database of 0017 may hold two active hand-offs of one conversation (the rule was only
    code): upgraded, the newest stays active, the older is closed, and the index is in place;
    each hand-off's staff thread is in ``handoff_threads``."""
    await upgrade(blank_url, "0017_handoff")
    db = create_database(blank_url)
    insert = text(
        "INSERT INTO handoffs (id, conversation_id, state, reason, opened_by, surfaces, version, opened_at, thread) "
        "VALUES (:id, 'conv_1', :state, 'r', 'x', '{}', 1, :at, :thread)"
    )
    at = datetime(2026, 12, 1, tzinfo=UTC)
    async with db.engine.begin() as conn:
        for id, state, minute in (("hof_a", "waiting", 1), ("hof_b", "taken", 2), ("hof_c", "closed", 3)):
            row = {"id": id, "state": state, "at": at.replace(minute=minute), "thread": f"{id}:thread"}
            await conn.execute(insert, row)
    await db.dispose()
    await upgrade(blank_url)
    db = create_database(blank_url)
    try:
        async with db.engine.connect() as conn:
            rows = {r[0]: r[1] for r in await conn.execute(text("SELECT id, state FROM handoffs"))}
        assert rows == {"hof_a": "closed", "hof_b": "taken", "hof_c": "closed"}
        async with db.engine.connect() as conn:
            threads = {r[0]: r[1] for r in await conn.execute(text("SELECT thread, handoff_id FROM handoff_threads"))}
        assert threads == {f"{h}:thread": h for h in rows}  # every hand-off's thread is found again
        with pytest.raises(DBAPIError):
            async with db.engine.begin() as conn:
                await conn.execute(insert, {"id": "hof_d", "state": "waiting", "at": at, "thread": None})
    finally:
        await db.dispose()


async def test_0022_installs_the_wake_up_triggers_on_postgresql_and_downgrade_removes_them(blank_url: str) -> None:
    """Upgraded, a job inserted notifies ``signoff_jobs`` with its schema (heard on a listening
    connection); downgraded to 0021, the triggers and their functions are gone. SQLite has no
    ``NOTIFY``: there the migration adds no trigger and a job is heard by no one."""
    if not blank_url.startswith("postgresql"):
        await upgrade(blank_url)
        db = create_database(blank_url)
        heard: list[Any] = []
        try:
            assert db.notifications is None
            with db.heard("signoff_jobs", heard.append):
                await JobQueue(db).enqueue("other", {})
            async with db.engine.connect() as conn:
                triggers = (await conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'trigger'"))).all()
        finally:
            await db.dispose()
        assert heard == [] and not [t for t in triggers if "notify" in t[0]], triggers
        await downgrade(blank_url, "0021_handoff_once")
        return
    await upgrade(blank_url)
    db = create_database(blank_url)
    heard: list[Any] = []
    try:
        with db.heard("signoff_jobs", heard.append):
            assert db.notifications is not None
            await asyncio.wait_for(db.notifications.listening.wait(), 10)
            await JobQueue(db).enqueue("other", {})
            for _ in range(250):
                if heard:
                    break
                await asyncio.sleep(0.02)
        assert heard == [[]]
    finally:
        await db.dispose()
    await downgrade(blank_url, "0021_handoff_once")
    engine = create_async_engine(blank_url)
    try:
        async with engine.connect() as conn:
            names = "('jobs_notify', 'widget_events_notify', 'signoff_jobs_notify', 'signoff_widget_notify')"
            triggers = (await conn.execute(text(f"SELECT count(*) FROM pg_trigger WHERE tgname IN {names}"))).scalar()
            functions = (await conn.execute(text(f"SELECT count(*) FROM pg_proc WHERE proname IN {names}"))).scalar()
        assert (triggers, functions) == (0, 0)
    finally:
        await engine.dispose()


async def test_0023_keeps_each_groups_token_count_and_leaves_bound_conversations_out(blank_url: str) -> None:
    """At 0022 a group's tokens were those of its conversations bound to no customer; upgraded,
    every usage row names that group (or none), and each group's count is what it was."""
    await upgrade(blank_url, "0022_notify")
    now = datetime.now(UTC)
    conversation = text(
        "INSERT INTO conversations (id, channel, principal_kind, principal_id, customer_id, principal_group, "
        "status, loaded_groups, model, prompt_version, next_seq, meta, created_at, updated_at) "
        "VALUES (:id, 'slack', 'customer', :id, :customer, :g, 'open', '[]', 'm', 'p', 0, '{}', :at, :at)"
    )
    usage = text(
        "INSERT INTO token_usage (conversation_id, run_id, model, input_tokens, output_tokens, "
        "cache_creation_tokens, cache_read_tokens, created_at) VALUES (:c, 'r', 'm', :n, 1, 0, 0, :at)"
    )
    db = create_database(blank_url)
    try:
        async with db.engine.begin() as conn:
            for id, customer, group in (
                ("c1", None, "T1"),
                ("c2", None, "T1"),
                ("c3", "C-7", "T1"),
                ("c4", None, "T2"),
            ):
                await conn.execute(conversation, {"id": id, "customer": customer, "g": group, "at": now})
            for c, n in (("c1", 10), ("c1", 20), ("c2", 5), ("c3", 1000), ("c4", 7)):
                await conn.execute(usage, {"c": c, "n": n, "at": now})
    finally:
        await db.dispose()
    await upgrade(blank_url)
    db = create_database(blank_url)
    try:
        usage_counts = UsageCounts(db)
        day = timedelta(days=1)
        assert await usage_counts.group_tokens("T1", day) == 10 + 20 + 5 + 3  # c3 is bound: not the group's
        assert await usage_counts.group_tokens("T2", day) == 7 + 1
        async with db.engine.connect() as conn:
            rows = sorted((await conn.execute(text("SELECT conversation_id, principal_group FROM token_usage"))).all())
        assert [tuple(r) for r in rows] == [("c1", "T1"), ("c1", "T1"), ("c2", "T1"), ("c3", None), ("c4", "T2")]
    finally:
        await db.dispose()
