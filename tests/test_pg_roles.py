"""PostgreSQL with two roles: `signoff db upgrade` migrates as the owner
(SIGNOFF_MIGRATION_DATABASE_URL) and grants the application's role (SIGNOFF_DATABASE_URL)
only what it needs. As the application: appending audit events, moving the head, loading and
reading the store all work; UPDATE, DELETE, TRUNCATE, ALTER (disabling the guard), dropping
the trigger, rewinding or removing the head, and writing Alembic's version are all refused."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine

from bot.app import demo_dataset_path
from bot.cli import main
from storage.audit import AuditEvent, AuditLog
from storage.db import create_database
from storage.roles import app_role_grants
from tests.conftest import PG_URL
from tests.support import app_setting


async def _admin(*statements: str) -> None:
    assert PG_URL
    engine = create_async_engine(PG_URL, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            for sql in statements:
                await conn.execute(text(sql))
    finally:
        await engine.dispose()


@pytest.fixture
def two_roles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A fresh database owned by a fresh owner role, and a fresh application role (unique names,
    dropped afterwards: roles are cluster-wide). Yields (owner URL, application URL)."""
    if not PG_URL:
        pytest.skip("SIGNOFF_TEST_PG_URL not set")
    tag = uuid.uuid4().hex[:10]
    owner, app, name = f"signoff_owner_{tag}", f"signoff_app_{tag}", f"signoff_roles_{tag}"
    asyncio.run(
        _admin(
            f'CREATE ROLE "{owner}" LOGIN', f'CREATE ROLE "{app}" LOGIN', f'CREATE DATABASE "{name}" OWNER "{owner}"'
        )
    )
    base = make_url(PG_URL).set(database=name)
    urls = (
        base.set(username=owner).render_as_string(hide_password=False),
        base.set(username=app).render_as_string(hide_password=False),
    )
    for key in list(os.environ):
        if app_setting(key):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    try:
        yield urls
    finally:
        asyncio.run(
            _admin(
                f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
                f'DROP ROLE IF EXISTS "{app}"',
                f'DROP ROLE IF EXISTS "{owner}"',
            )
        )


REFUSED = [
    ("UPDATE audit_events SET kind = 'forged' WHERE seq = 1", "permission denied"),
    ("DELETE FROM audit_events WHERE seq = 1", "permission denied"),
    ("TRUNCATE audit_events", "permission denied"),
    ("ALTER TABLE audit_events DISABLE TRIGGER USER", "must be owner"),
    ("DROP TRIGGER audit_events_no_update_delete ON audit_events", "must be owner"),
    ("SET session_replication_role = replica", "permission denied"),
    ("UPDATE audit_head SET seq = 0, hash = repeat('0', 64)", "only moves forward"),
    ("UPDATE audit_head SET id = 2", "permission denied"),
    ("DELETE FROM audit_head", "permission denied"),
    ("TRUNCATE audit_head", "permission denied"),
    ("ALTER TABLE audit_head DISABLE TRIGGER USER", "must be owner"),
    ("INSERT INTO audit_head (id, seq, hash) VALUES (2, 0, repeat('0', 64))", "permission denied"),
    ("UPDATE alembic_version SET version_num = 'x'", "permission denied"),
    ("CREATE TABLE audit_shadow (x int)", "permission denied"),
]


def test_the_application_role_appends_but_cannot_rewrite_the_audit_log(
    two_roles: tuple[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    owner_url, app_url = two_roles
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", app_url)
    monkeypatch.setenv("SIGNOFF_MIGRATION_DATABASE_URL", owner_url)
    assert main(["db", "upgrade"]) == 0
    assert "granted signoff_app_" in capsys.readouterr().out
    # The application's normal writes, as the application: store load, audit appends, head moves.
    assert main(["store", "load", str(demo_dataset_path())]) == 0
    assert main(["audit", "verify", "--allow-empty"]) == 0

    async def as_app() -> None:
        db = create_database(app_url)
        try:
            async with db.engine.connect() as conn:
                assert (await conn.execute(text("SELECT current_user"))).scalar_one().startswith("signoff_app_")
            log = AuditLog(db)
            assert await log.append_many(
                [AuditEvent(kind="proposal", run_id="r1"), AuditEvent(kind="gate.execute", run_id="r1")]
            ) == [1, 2]
            assert await log.append(AuditEvent(kind="execution", run_id="r1")) == 3
            for sql, why in REFUSED:
                with pytest.raises(DBAPIError, match=why):
                    async with db.engine.begin() as conn:
                        await conn.execute(text(sql))
            result = await log.verify()
            assert result.ok and result.count == 3
            assert await log.append(AuditEvent(kind="execution", run_id="r2")) == 4
        finally:
            await db.dispose()

    asyncio.run(as_app())
    assert main(["audit", "verify"]) == 0


def test_db_upgrade_warns_when_the_application_would_own_the_audit_tables(
    two_roles: tuple[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without SIGNOFF_MIGRATION_DATABASE_URL on PostgreSQL, upgrade works and says why it is unsafe."""
    owner_url, _ = two_roles
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", owner_url)
    assert main(["db", "upgrade"]) == 0
    assert "owns the audit tables" in capsys.readouterr().err


def test_the_grants_are_the_documented_ones() -> None:
    """The README's GRANTs are what storage.roles runs (audit tables: append and read only)."""
    statements = app_role_grants("signoff_app", ["audit_events", "audit_head", "alembic_version", "runs", "jobs"])
    assert statements == [
        'GRANT USAGE ON SCHEMA "public" TO "signoff_app"',
        'GRANT SELECT, INSERT, UPDATE, DELETE ON "public"."jobs", "public"."runs" TO "signoff_app"',
        'REVOKE ALL ON "public"."audit_events", "public"."audit_head", "public"."alembic_version" FROM "signoff_app"',
        'GRANT SELECT, INSERT ON "public"."audit_events" TO "signoff_app"',
        'GRANT SELECT, UPDATE (seq, hash) ON "public"."audit_head" TO "signoff_app"',
        'GRANT SELECT ON "public"."alembic_version" TO "signoff_app"',
        'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA "public" TO "signoff_app"',
    ]
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    for statement in (
        "GRANT SELECT, INSERT ON audit_events TO signoff_app",
        "GRANT SELECT, UPDATE (seq, hash) ON audit_head TO signoff_app",
    ):
        assert statement in readme
    with pytest.raises(ValueError):
        app_role_grants('x"; DROP TABLE runs; --', [])
