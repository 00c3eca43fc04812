"""The supersede rule has one statement of it in SQL (``storage.gates._SUPERSEDE``, run when a
confirmation is written) and its Python form (``storage.gates.supersedes``, what a turn reports
before the write): on both backends they pick the same confirmations out of every combination
of principal, tool, target and arguments, whatever their status."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import UTC, datetime

from sqlalchemy import insert

from storage.db import Database
from storage.gates import ConfirmationRepo, drafted, supersedes
from storage.models import ConfirmationRow
from storage.records import NewConfirmation

AT = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
GRID = list(
    itertools.product(
        ("customer:C-1", "rep:R-1"),
        ("issue_refund", "cancel_order"),
        ("order:O-1", "order:O-2", None),
        ("h-1", "h-2"),
        ("pending", "confirmed", "superseded"),
    )
)


def _conf(conv: str, n: int, principal: str, tool: str, target: str | None, h: str) -> NewConfirmation:
    return NewConfirmation(
        id=f"{conv}-cnf-{n}",
        conversation_id=conv,
        run_id="run-1",
        proposal_id=f"prop-{n}",
        tool=tool,
        arguments={"n": n},
        args_hash=h,
        principal=principal,
        code="ABC123",
        summary="s",
        target=target,
        idempotency_key=None,
        created_at=AT,
    )


async def test_the_sql_and_the_python_rule_supersede_the_same_confirmations(any_db: Database) -> None:
    confirmations = ConfirmationRepo(any_db)
    news = [("customer:C-1", "issue_refund", "order:O-1", "h-1"), ("rep:R-1", "cancel_order", None, "h-2")]
    news += [("customer:C-1", "cancel_order", "order:O-2", "h-2"), ("rep:R-1", "issue_refund", "order:O-1", "h-3")]
    for i, (principal, tool, target, h) in enumerate(news):
        conv = f"conv-{i}"
        olds = [(_conf(conv, n, *fields[:4]), fields[4]) for n, fields in enumerate(GRID)]
        rows = [{**vars(o), "status": status, "version": 1} for o, status in olds]
        await any_db.write(lambda conn, _ctx, rows=rows: conn.execute(insert(ConfirmationRow), rows))
        new = _conf(conv, 999, principal, tool, target, h)
        python = {o.id for o, status in olds if supersedes(new, dataclasses.replace(drafted(o), status=status))}
        created = await confirmations.create(new)
        assert set(created.superseded) == python and python, (new, python)
        assert {c.id for c in await confirmations.pending(conv)} == {
            o.id for o, status in olds if status == "pending" and o.id not in python
        } | {new.id}
