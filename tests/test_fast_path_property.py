"""A property test of the SQLite fast path: random interleavings of the ways a write runs
(``Database.write`` on the loop's thread, on the writer thread as when the file is busy, and
an ORM session), each with prepared or unprepared statements, against the same operations
all run through the ORM: the rows and the audit chain's hashes must be equal."""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, bindparam, insert, select, update

from storage.audit import AuditEvent, append_audit_many, append_audit_sync
from storage.db import Database, WriteContext
from storage.fastsql import prepared
from storage.models import AuditEventRow, ConversationRow
from storage.sqlite import SyncWriter
from tests.conftest import make_sqlite

_CONV = ConversationRow.__table__
_INSERT = prepared(insert(_CONV))
_BUMP = prepared(update(_CONV).where(_CONV.c.id == bindparam("c")).values(next_seq=_CONV.c.next_seq + 1))
T0 = datetime(2026, 3, 1, 9, 0, 0, 123456, tzinfo=UTC)

PATHS = ("inline", "thread", "orm")
op = st.tuples(st.sampled_from(PATHS), st.booleans(), st.integers(0, 3), st.text(max_size=6))


def _values(i: int, n: int, word: str) -> dict[str, Any]:
    at = T0 + timedelta(seconds=i)
    return {
        "id": f"c{n}", "channel": "api", "external_ref": None, "principal_kind": "customer",
        "principal_id": "C-1", "customer_id": "C-1", "status": "open", "loaded_groups": [word],
        "model": "m", "prompt_version": "p", "next_seq": 0, "meta": {"w": word, "f": 2.5}, "created_at": at,
        "updated_at": at,
    }  # fmt: skip


def _event(i: int, word: str) -> AuditEvent:
    return AuditEvent(kind="test.op", ts=T0 + timedelta(seconds=i), data={"i": i, "w": word})


def _core(conn: Connection, ctx: WriteContext, i: int, n: int, word: str, fast: bool, exists: bool) -> None:
    if exists:
        bump = _BUMP if fast else _BUMP.execution_options()  # a copy is not prepared
        conn.execute(bump, {"c": f"c{n}"})
    else:
        conn.execute(_INSERT if fast else insert(_CONV), _values(i, n, word))
    append_audit_sync(conn, [_event(i, word)], ctx.audit_head)


async def _apply(db: Database, thread: Database, ops: list[tuple[str, bool, int, str]], orm_only: bool) -> None:
    made: set[int] = set()
    for i, (path, fast, n, word) in enumerate(ops):
        exists = n in made
        made.add(n)
        if orm_only or path == "orm":
            async with db.sessions() as s, s.begin():
                if exists:
                    await s.execute(update(_CONV).where(_CONV.c.id == f"c{n}").values(next_seq=_CONV.c.next_seq + 1))
                else:
                    await s.execute(insert(_CONV).values(**_values(i, n, word)))
                await append_audit_many(s, [_event(i, word)])
            continue
        target = db if path == "inline" else thread
        await target.write(lambda c, ctx: _core(c, ctx, i, n, word, fast, exists))  # noqa: B023


async def _state(db: Database) -> tuple[list[Any], list[Any]]:
    rows = await db.read(lambda c: [tuple(r) for r in c.execute(select(_CONV).order_by(_CONV.c.id)).all()])
    chain = await db.read(
        lambda c: [tuple(r) for r in c.execute(select(AuditEventRow.seq, AuditEventRow.hash).order_by("seq")).all()]
    )
    return rows, chain


async def _run(ops: list[tuple[str, bool, int, str]], tmp: Path) -> None:
    mixed, reference = await make_sqlite(tmp / "mixed.db"), await make_sqlite(tmp / "ref.db")
    assert mixed.sync_writer is not None and mixed.sync_writer.inline is not None
    threaded = SyncWriter(mixed.sync_writer.engine)  # every transaction on the writer thread
    thread_db = dataclasses.replace(mixed, sync_writer=threaded)
    try:
        await _apply(mixed, thread_db, ops, orm_only=False)
        await _apply(reference, reference, ops, orm_only=True)
        got, want = await _state(mixed), await _state(reference)
        assert got == want
        assert threaded.handoffs == 0 and len(got[1]) == len(ops)
    finally:
        await mixed.dispose()
        threaded.close()
        await reference.dispose()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=12))
def test_any_interleaving_of_the_paths_stores_what_the_orm_stores(ops: list[tuple[str, bool, int, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_run(ops, Path(tmp)))
