"""A step's write as one statement on PostgreSQL (``storage/step_statement.py``): it stores
exactly what the statement-per-table path stores, and a step whose audit partition another
writer moved first still appends its events, the locked way, with the chain whole."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from sqlalchemy import select

import storage.steps
from agent.llm.testing import FunctionModel, tool_use_block
from storage import fastsql
from storage.audit import PARTITIONS, ROOT, AuditEvent, AuditLog, append_audit_sync, partition_of
from storage.db import Database
from storage.models import (
    AuditEventRow,
    ConfirmationRow,
    ConversationRow,
    MessageRow,
    ProposalRow,
    RunRow,
    TokenUsageRow,
)
from tests.support import C7, seeded
from tests.test_loop_support import SEARCH, SMALL_REFUND

_IDS = re.compile(r"\b(prop|cnf|run|conv|apr|toolu|exe)_[0-9A-Za-z]+")
_CODE = re.compile(r"code [A-Z0-9]{6}")


def _script() -> FunctionModel:
    """Search, look the order up, propose a refund (a confirmation to ask), answer; the same
    tool-use ids every time."""

    def answer(request: Any) -> Any:
        results = sum(1 for m in request.messages for b in m.content if b.get("type") == "tool_result")
        steps = [
            [tool_use_block("search_knowledge", SEARCH, id="toolu_s")],
            [tool_use_block("get_order", {"order_id": "O-1044"}, id="toolu_o")],
            [tool_use_block("issue_refund", SMALL_REFUND, id="toolu_r")],
        ]
        return steps[results] if results < len(steps) else "Please confirm the refund."

    return FunctionModel(answer)


def _is_step(sql: str) -> bool:
    """Whether ``sql`` is a step's one statement (its CTEs: the head's move, then ``conv``)."""
    return sql.startswith("WITH") and "\nconv AS" in sql[:400] or sql.startswith("WITH conv AS")


def _plain(value: Any) -> Any:
    """``value`` with generated ids and confirmation codes left out (they differ between two
    conversations)."""
    text = _IDS.sub("<id>", json.dumps(value, default=str, sort_keys=True))
    return json.loads(_CODE.sub("code <code>", text))


async def _stored(db: Database, conversation_id: str) -> dict[str, Any]:
    """What the conversation's turns stored, table by table, ids and times aside."""
    async with db.reader() as s:
        conv = (await s.execute(select(ConversationRow).where(ConversationRow.id == conversation_id))).scalar_one()
        runs = (await s.execute(select(RunRow).where(RunRow.conversation_id == conversation_id))).scalars().all()
        run_ids = [r.id for r in runs]
        msgs = (
            await s.execute(
                select(MessageRow).where(MessageRow.conversation_id == conversation_id).order_by(MessageRow.seq)
            )
        ).scalars()
        props = (
            await s.execute(
                select(ProposalRow).where(ProposalRow.conversation_id == conversation_id).order_by(ProposalRow.step)
            )
        ).scalars()
        usage = (
            await s.execute(select(TokenUsageRow).where(TokenUsageRow.conversation_id == conversation_id))
        ).scalars()
        confs = (
            await s.execute(select(ConfirmationRow).where(ConfirmationRow.conversation_id == conversation_id))
        ).scalars()
        events = (
            await s.execute(
                select(AuditEventRow)
                .where(AuditEventRow.run_id.in_(run_ids))
                .order_by(AuditEventRow.part, AuditEventRow.pseq)
            )
        ).scalars()
        return _plain(
            {
                "conversation": [conv.next_seq, conv.status, conv.loaded_groups],
                "runs": [[r.status, r.steps, r.state, r.pending_ids, r.holder is None] for r in runs],
                "messages": [[m.seq, m.role, m.content, m.event_key is None] for m in msgs],
                "proposals": [
                    [
                        p.step,
                        p.tool,
                        p.arguments,
                        p.decision,
                        p.reason,
                        p.result,
                        p.is_error,
                        p.idempotency_key,
                        p.origin,
                    ]
                    for p in props
                ],
                "usage": [[u.model, u.input_tokens, u.output_tokens] for u in usage],
                "confirmations": [[c.tool, c.arguments, c.summary, c.status, c.version] for c in confs],
                "events": [[e.kind, e.tool, e.args_hash, e.principal, e.data] for e in events],
            }
        )


async def test_one_statement_stores_what_a_statement_per_table_stores(
    pg_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = await seeded(pg_db, _script())
    with fastsql.traced() as sql:
        one = await h.runtime.chat(principal=C7, channel="api", message="Refund $30 on O-1044, it is damaged.")
    assert sum(_is_step(s) for s in sql) >= 3, "the read steps and the answer went in one statement"
    after_first = sql[next(i for i, s in enumerate(sql) if _is_step(s)) :]
    assert not [s for s in after_first if s.startswith("SELECT audit_head")], "a head this process holds was read again"
    monkeypatch.setattr(storage.steps, "fits", lambda _step: False)
    per_table = await h.runtime.chat(principal=C7, channel="api", message="Refund $30 on O-1044, it is damaged.")
    assert _plain(one.reply) == _plain(per_table.reply)
    assert [p.kind for p in one.pending] == [p.kind for p in per_table.pending] == ["confirmation"]
    assert await _stored(pg_db, one.conversation_id) == await _stored(pg_db, per_table.conversation_id)
    assert (await AuditLog(pg_db).verify()).ok


def _run_in(part: int) -> str:
    """A run id whose events go to partition ``part``."""
    return next(f"run_other{k}" for k in range(10_000) if partition_of(f"run_other{k}") == part)


async def test_a_step_whose_partition_another_writer_moved_appends_the_locked_way(pg_db: Database) -> None:
    """Another replica (a cache of its own) appends to every partition between two turns: the
    second turn's first append finds its cached head moved and takes the locked way; the turn
    is stored as the first was and the log verifies."""
    h = await seeded(pg_db, _script())
    first = await h.runtime.chat(principal=C7, channel="api", message="Refund $30 on O-1044, it is damaged.")
    elsewhere: dict[str, Any] = {}
    for part in range(ROOT + 1, ROOT + 1 + PARTITIONS):
        event = AuditEvent(kind="other.replica", run_id=_run_in(part))
        await pg_db.write(lambda conn, _ctx, e=event: append_audit_sync(conn, [e], elsewhere))
    with fastsql.traced() as sql:
        second = await h.runtime.chat(principal=C7, channel="api", message="Refund $30 on O-1044, it is damaged.")
    assert _plain(second.reply) == _plain(first.reply)
    assert any(_is_step(s) for s in sql)
    assert any(s.startswith("SELECT audit_head.seq") for s in sql), "no append took the locked way"
    assert await _stored(pg_db, first.conversation_id) == await _stored(pg_db, second.conversation_id)
    result = await AuditLog(pg_db).verify()
    assert result.ok, result


async def test_a_step_of_a_conversation_that_is_gone_is_refused_and_writes_nothing(pg_db: Database) -> None:
    """The statement's ``UPDATE conversations`` finds no row: the step is refused
    (``ConcurrentTurn``) and its transaction leaves nothing."""
    from datetime import UTC, datetime

    from storage.steps import ConcurrentTurn, StepWrite, write_step

    step = StepWrite(conversation_id="conv_gone", messages=[("assistant", [{"type": "text", "text": "hi"}])])
    with pytest.raises(ConcurrentTurn):
        await pg_db.write(lambda conn, ctx: write_step(conn, ctx, step, datetime.now(UTC)))
    async with pg_db.reader() as s:
        assert (await s.execute(select(MessageRow.id))).first() is None


async def test_a_step_statement_whose_head_moved_writes_nothing_and_the_transaction_writes_it(
    pg_db: Database,
) -> None:
    """Right before a step, another writer moves the head of the step's audit partition: the
    statement in autocommit (the head guarded) writes nothing at all — not the conversation's
    seqs, the message, the run, the usage — and the step is then written once, in a
    transaction, its event appended the locked way."""
    from storage.steps import StepWrite, UsageWrite

    h = await seeded(pg_db, _script())
    first = await h.runtime.chat(principal=C7, channel="api", message="Refund $30 on O-1044, it is damaged.")
    async with pg_db.reader() as s:
        run_id = (
            await s.execute(select(RunRow.id).where(RunRow.conversation_id == first.conversation_id))
        ).scalar_one()
    before = await _counts(pg_db, first.conversation_id, run_id)
    other = AuditEvent(kind="other.replica", run_id=_run_in(partition_of(run_id)))
    await pg_db.write(lambda conn, _ctx: append_audit_sync(conn, [other], {}))
    usage = UsageWrite(
        model="m", input_tokens=1, output_tokens=2, cache_creation_tokens=0, cache_read_tokens=0, principal_group=None
    )
    step = StepWrite(
        conversation_id=first.conversation_id,
        run_id=run_id,
        messages=[("assistant", [{"type": "text", "text": "One more thing."}])],
        run_steps_delta=1,
        usage=usage,
        audit=[AuditEvent(kind="step.extra", run_id=run_id)],
    )
    with fastsql.traced() as sql:
        await h.services.conversations.commit(step)
    gated = [i for i, s in enumerate(sql) if _is_step(s) and s.startswith("WITH moved AS")]
    locked = [i for i, s in enumerate(sql) if s.startswith("SELECT audit_head.seq")]
    assert gated and locked and gated[0] < locked[0], sql
    after = await _counts(pg_db, first.conversation_id, run_id)
    assert after == {k: v + 1 for k, v in before.items()}, (before, after)
    assert (await AuditLog(pg_db).verify()).ok


async def _counts(db: Database, conversation_id: str, run_id: str) -> dict[str, int]:
    async with db.reader() as s:
        conv = (await s.execute(select(ConversationRow).where(ConversationRow.id == conversation_id))).scalar_one()
        run = (await s.execute(select(RunRow).where(RunRow.id == run_id))).scalar_one()
        n = {
            "messages": select(MessageRow.id).where(MessageRow.conversation_id == conversation_id),
            "usage": select(TokenUsageRow.id).where(TokenUsageRow.conversation_id == conversation_id),
            "events": select(AuditEventRow.seq).where(AuditEventRow.run_id == run_id),
        }
        counts = {k: len((await s.execute(q)).all()) for k, q in n.items()}
        return counts | {"next_seq": conv.next_seq, "steps": run.steps}
