"""How many writes a turn's phases commit (issue 24), on SQLite and PostgreSQL: the opening
(from ``chat()`` to the first model call) is one write — the conversation, the lease, the run
with its audit event and the user's message commit together — and an opening that fails before
its commit leaves nothing; a step of reads only writes once, its step record."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, func, select

import storage.opening
from agent.llm.base import ModelRequest
from agent.llm.testing import FunctionModel, Reply, tool_use_block
from storage.audit import AuditLog
from storage.db import Database
from storage.models import AuditEventRow, ConversationRow, LockRow, MessageRow, RunRow
from tests.support import C7, seeded
from tests.test_loop_support import SEARCH, SMALL_REFUND


class Commits:
    """Transactions and write commits on every engine of ``db`` (the hooks bench/overhead.py
    uses: engine events; a read commits on SQLite too, so writes are told apart by the
    reader's execution option)."""

    def __init__(self) -> None:
        self.transactions = 0
        self.writes = 0

    def on_begin(self, _conn: Any) -> None:
        self.transactions += 1

    def on_commit(self, conn: Any) -> None:
        if not conn.get_execution_options().get("signoff_readonly"):
            self.writes += 1

    @contextmanager
    def counting(self, db: Database) -> Iterator[Commits]:
        engines = [db.engine.sync_engine] + (db.sync_writer.engines if db.sync_writer is not None else [])
        hooks: list[tuple[Any, str, Callable[[Any], None]]] = []
        for engine in engines:
            hooks += [(engine, "begin", self.on_begin), (engine, "commit", self.on_commit)]
        for target, name, fn in hooks:
            event.listen(target, name, fn)
        try:
            yield self
        finally:
            for target, name, fn in hooks:
                event.remove(target, name, fn)


def first_call_counts(counter: Commits, seen: list[tuple[int, int]], *script: Reply) -> FunctionModel:
    """A model that notes the counts at each call, and answers from ``script`` (by the number of
    calls so far; "Hello." once it runs out)."""

    def answer(_request: ModelRequest) -> Reply:
        seen.append((counter.transactions, counter.writes))
        return script[len(seen) - 1] if len(seen) <= len(script) else "Hello."

    return FunctionModel(answer)


async def test_a_turn_opens_in_one_write(any_db: Database) -> None:
    """A new conversation's first message: one commit (SQLite: one transaction in all) before the
    model is called; a second message in it: one write too (the conversation is read first)."""
    counter, seen = Commits(), list[tuple[int, int]]()
    h = await seeded(any_db, first_call_counts(counter, seen))
    with counter.counting(any_db):
        first = await h.runtime.chat(principal=C7, channel="api", message="Where is my order O-1001?")
        opened_first = seen[-1]
        counter.transactions = counter.writes = 0
        await h.runtime.chat(principal=C7, channel="api", message="And O-1002?", conversation_id=first.conversation_id)
        opened_second = seen[-1]
    assert opened_first[1] == 1, f"the opening of a new conversation's turn committed {opened_first[1]} writes"
    assert opened_second[1] == 1, f"the opening of a turn committed {opened_second[1]} writes"
    if not any_db.is_postgres:
        assert opened_first[0] == 1, f"the opening of a new conversation's turn took {opened_first[0]} transactions"
    assert (await AuditLog(any_db).verify()).ok


async def _count(db: Database, row: Any) -> int:
    async with db.reader() as s:
        return int((await s.execute(select(func.count()).select_from(row))).scalar_one())


async def test_an_opening_that_fails_before_its_commit_leaves_nothing(
    any_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The message's write fails inside the opening: no conversation, run, message, lease row or
    audit event is left, and the same message afterwards opens and is answered."""
    h = await seeded(any_db, FunctionModel(lambda _r: "Hello."))
    before = {row: await _count(any_db, row) for row in (ConversationRow, RunRow, MessageRow, LockRow, AuditEventRow)}

    def fail(*_args: Any, **_kwargs: Any) -> int:
        raise RuntimeError("the process died here")

    monkeypatch.setattr(storage.opening, "write_step", fail)
    with pytest.raises(RuntimeError):
        await h.runtime.chat(principal=C7, channel="api", message="Where is my order O-1001?")
    after = {row: await _count(any_db, row) for row in before}
    assert after == before
    monkeypatch.undo()
    result = await h.runtime.chat(principal=C7, channel="api", message="Where is my order O-1001?")
    assert result.reply == "Hello."
    assert await _count(any_db, LockRow) == 0  # given back
    assert (await AuditLog(any_db).verify()).ok


async def test_a_step_of_reads_writes_once(any_db: Database) -> None:
    """``get_order``'s step, from the model's response to the next call: one write (the
    assistant's call, its proposal, its result and their audit events together)."""
    counter, seen = Commits(), list[tuple[int, int]]()
    order = tool_use_block("get_order", {"order_id": "O-1042"})
    h = await seeded(any_db, first_call_counts(counter, seen, [order], "It was delivered."))
    with counter.counting(any_db):
        result = await h.runtime.chat(principal=C7, channel="api", message="Where is my order O-1042?")
    assert result.reply == "It was delivered."
    (_, at_call), (_, at_answer) = seen
    assert at_answer - at_call == 1, f"the read step committed {at_answer - at_call} writes"
    assert (await AuditLog(any_db).verify()).ok


async def test_a_refund_step_that_asks_for_confirmation_writes_twice(any_db: Database) -> None:
    """``issue_refund``'s step, answered with a confirmation to ask: the proposal, then the
    step's results with the confirmation — the customer's money lock is not taken, since nothing
    moves until the customer confirms (and the confirmed action is judged again under it)."""
    counter, seen = Commits(), list[tuple[int, int]]()
    script: list[Reply] = [
        [tool_use_block("search_knowledge", SEARCH)],
        [tool_use_block("issue_refund", SMALL_REFUND)],
        "Please confirm the refund.",
    ]
    h = await seeded(any_db, first_call_counts(counter, seen, *script))
    with counter.counting(any_db):
        result = await h.runtime.chat(principal=C7, channel="api", message="Refund $30 on O-1044, it is damaged.")
    assert [p.kind for p in result.pending] == ["confirmation"]
    (_, at_refund), (_, at_answer) = seen[1:]
    assert at_answer - at_refund <= 2, f"the refund step committed {at_answer - at_refund} writes"
    assert (await AuditLog(any_db).verify()).ok
