"""C9 crash recovery with a real process and SIGKILL.

``tests/crash/refund_driver.py`` confirms an action over a SQLite file and kills
itself (SIGKILL, no cleanup) at one of four points: before the ledger insert,
after it, after the downstream write committed, after the result was recorded.
A new runtime then opens the same file, runs ``agent.worker.recover`` and the
conversation continues. Every time: exactly one side effect, a ``succeeded``
ledger row, a protocol-valid history and an audit chain that verifies. A
non-retryable tool (``retry_payment``) killed after the ledger insert with no
downstream record goes to a person and is never retried blindly.

All drivers run at once (each on its own file) to keep the suite fast.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agent.history import merged
from agent.llm.base import ModelRequest
from agent.llm.testing import FunctionModel, tool_use_block
from agent.notify import RecordingNotifier
from agent.runtime import Runtime
from agent.worker import recover
from bot.app import sandbox_services
from storage.db import Database
from storage.records import StoredMessage
from tests.conftest import make_sqlite
from tests.gatekeeper_kit import C7, Clock, ledger_rows, store_state

DRIVER = Path(__file__).parent / "crash" / "refund_driver.py"
ROOT = Path(__file__).resolve().parents[1]

REFUND = {
    "order_id": "O-1042",
    "amount_minor": 2000,
    "currency": "USD",
    "reason_code": "damaged",
    "evidence": ["refund-policy@7#window"],
}
RETRY = {"order_id": "O-1046"}

#: (case id, kill point, tool, confirmation path)
CASES = [
    ("refund-before-ledger-insert", "before_claim", "issue_refund", "confirm"),
    ("refund-after-ledger-insert", "after_claim", "issue_refund", "confirm"),
    ("refund-after-downstream-write", "after_downstream", "issue_refund", "confirm"),
    ("refund-after-result-recorded", "after_settle", "issue_refund", "confirm"),
    ("refund-after-downstream-write-chat-yes", "after_downstream", "issue_refund", "chat"),
    ("retry-payment-after-ledger-insert", "after_claim", "retry_payment", "confirm"),
    ("retry-payment-after-downstream-write", "after_downstream", "retry_payment", "confirm"),
    ("gap-refund-before-ledger-insert", "before_claim", "issue_refund", "confirm"),
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def crashed(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, tuple[Path, dict[str, Any]]]]:
    """Run every driver concurrently; each must die by SIGKILL after printing its ids."""
    base = Path(tmp_path_factory.mktemp("crash"))

    async def run(case: str, point: str, tool: str, path: str) -> tuple[Path, dict[str, Any]]:
        db = base / f"{case}.db"
        env = {
            **os.environ,
            "SIGNOFF_CRASH_AT": point,
            "SIGNOFF_CRASH_TOOL": tool,
            "SIGNOFF_CRASH_PATH": path,
            "PYTHONPATH": str(ROOT),
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(DRIVER),
            str(db),
            env=env,
            cwd=str(ROOT),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        assert proc.returncode == -signal.SIGKILL, (case, proc.returncode, err.decode()[-2000:])
        return db, json.loads(out.decode().strip().splitlines()[-1])

    results = await asyncio.gather(*(run(*c) for c in CASES))
    yield {c[0]: r for c, r in zip(CASES, results, strict=True)}


def replanner(tool: str, args: dict[str, Any]) -> FunctionModel:
    """After the restart the customer asks again; the model proposes the same call once, then answers."""

    def fn(request: ModelRequest) -> Any:
        last = request.messages[-1]
        asked = any(b.get("type") == "text" and "go through" in str(b.get("text")) for b in last.content)
        if last.role == "user" and asked:
            return [tool_use_block(tool, args)]
        return "Here is where things stand."

    return FunctionModel(fn)


def assert_protocol_valid(history: list[StoredMessage]) -> None:
    """Anthropic's rules: starts with the user, roles alternate (after merging), every tool_use is
    answered by a tool_result in the very next message, and no result answers an unknown call."""
    msgs = merged(history)
    assert msgs and msgs[0].role == "user"
    for prev, cur in zip(msgs, msgs[1:], strict=False):
        assert prev.role != cur.role
    for i, m in enumerate(msgs):
        uses = [b["id"] for b in m.content if b.get("type") == "tool_use"]
        if m.role == "assistant" and uses:
            assert i + 1 < len(msgs), "unanswered tool_use at the end"
            answered = [b["tool_use_id"] for b in msgs[i + 1].content if b.get("type") == "tool_result"]
            assert answered == uses, (uses, answered)
        if m.role == "user" and i > 0:
            results = [b["tool_use_id"] for b in m.content if b.get("type") == "tool_result"]
            asked = [b["id"] for b in msgs[i - 1].content if b.get("type") == "tool_use"]
            assert results == asked[: len(results)] and (not results or results == asked)


async def restart(db_path: Path, tool: str, args: dict[str, Any]) -> tuple[Database, Runtime, RecordingNotifier]:
    db = await make_sqlite(db_path)  # a new process: a new engine over the same file
    notifier = RecordingNotifier()
    clock = Clock(datetime.now(UTC))
    services = sandbox_services(db=db, model=replanner(tool, args), notifier=notifier, clock=clock)
    return db, Runtime(services), notifier


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize(
    "case", [c for c in CASES if c[2] == "issue_refund" and not c[0].startswith("gap-")], ids=lambda c: c[0]
)
async def test_killed_refund_is_recovered_with_exactly_one_refund(
    crashed: dict[str, tuple[Path, dict[str, Any]]], case: tuple[str, str, str, str]
) -> None:
    name, point, _, _ = case
    db_path, ids = crashed[name]
    db, rt, _notifier = await restart(db_path, "issue_refund", REFUND)
    try:
        before = await store_state(db)
        await recover(rt, orphan_after_s=0)
        r = await rt.chat(
            principal=C7, channel="api", message="Did my refund go through?", conversation_id=ids["conversation_id"]
        )
        assert r.outcome == "answered", r
        after = await store_state(db)
        refunds = [x for x in after["refunds"] if x["order_id"] == "O-1042"]
        assert len(refunds) == 1 and refunds[0]["amount_minor"] == 2000, (point, after["refunds"])
        if point in ("after_downstream", "after_settle"):
            assert before["refunds"] == after["refunds"], "recovery made a second refund"
        rows = await ledger_rows(db)
        assert [(x["tool"], x["status"]) for x in rows] == [("issue_refund", "succeeded")], rows
        assert rows[0]["result"]["refund_id"] == refunds[0]["id"]
        history = await rt.s.conversations.history(ids["conversation_id"])
        assert_protocol_valid(history)
        # The outcome reached the conversation (a tool result, or recovery's own event).
        said = [str(b.get("content") or b.get("text") or "") for m in history for b in m.content]
        assert any(refunds[0]["id"] in x for x in said)
        verdict = await rt.s.audit.verify()
        assert verdict.ok, verdict
        executed = await rt.s.audit.list(kind="execution.succeeded")
        assert len({e.idempotency_key for e in executed}) == 1
    finally:
        await db.dispose()


@pytest.mark.asyncio(loop_scope="module")
async def test_non_retryable_tool_killed_after_ledger_insert_goes_to_a_person(
    crashed: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """retry_payment with an `executing` ledger row and no downstream record: needs_human and an
    escalation with the trace — not a second charge attempt, not even when the model asks again."""
    db_path, ids = crashed["retry-payment-after-ledger-insert"]
    db, rt, notifier = await restart(db_path, "retry_payment", RETRY)
    try:
        before = await store_state(db)
        settled = await recover(rt, orphan_after_s=0)
        assert settled == 1
        rows = await ledger_rows(db)
        assert [(x["tool"], x["status"]) for x in rows] == [("retry_payment", "needs_human")]
        notes = await rt.s.conversations.case_notes(ids["conversation_id"])
        assert any(kind == "escalation" and "needs_human" in text for kind, _a, text in notes), notes
        assert notifier.of("escalated")
        r = await rt.chat(
            principal=C7, channel="api", message="Did my payment go through?", conversation_id=ids["conversation_id"]
        )
        after = await store_state(db)
        assert after["payments"] == before["payments"], "a non-retryable write was retried"
        assert [p for p in after["payments"] if p["order_id"] == "O-1046"] == [
            p for p in before["payments"] if p["order_id"] == "O-1046"
        ]
        assert [(x["tool"], x["status"]) for x in await ledger_rows(db)] == [("retry_payment", "needs_human")]
        history = await rt.s.conversations.history(ids["conversation_id"])
        assert_protocol_valid(history)
        results = [json.loads(b["content"]) for m in history for b in m.content if b.get("type") == "tool_result"]
        # Recovery itself told the customer: the interrupted action's outcome is in the conversation.
        texts = [b.get("text", "") for m in history for b in m.content if b.get("type") == "text"]
        assert any("needs_human" in t for t in texts) or any(r.get("error") == "needs_human" for r in results)
        assert r.outcome in ("answered", "escalated")
        assert (await rt.s.audit.verify()).ok
        assert await rt.s.audit.list(kind="execution.needs_human")
    finally:
        await db.dispose()


@pytest.mark.asyncio(loop_scope="module")
async def test_non_retryable_tool_killed_after_its_write_is_settled_from_the_downstream_record(
    crashed: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """retry_payment whose charge committed before the crash: recovery reads the store's record by
    key and settles the ledger; there is exactly one new payment."""
    db_path, ids = crashed["retry-payment-after-downstream-write"]
    db, rt, _ = await restart(db_path, "retry_payment", RETRY)
    try:
        before = await store_state(db)
        assert await recover(rt, orphan_after_s=0) == 1
        await rt.chat(
            principal=C7, channel="api", message="Did my payment go through?", conversation_id=ids["conversation_id"]
        )
        after = await store_state(db)
        assert after["payments"] == before["payments"]
        captured = [p for p in after["payments"] if p["order_id"] == "O-1046" and p["status"] == "captured"]
        assert len(captured) == 1
        assert [(x["tool"], x["status"]) for x in await ledger_rows(db)] == [("retry_payment", "succeeded")]
        assert_protocol_valid(await rt.s.conversations.history(ids["conversation_id"]))
        assert (await rt.s.audit.verify()).ok
    finally:
        await db.dispose()


@pytest.mark.asyncio(loop_scope="module")
async def test_recovery_alone_completes_a_confirmed_action_interrupted_before_execution(
    crashed: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """C1 "a crash loses nothing": the customer confirmed; after a restart the confirmed refund
    should be carried out (or refused) by recovery itself and the outcome told in the conversation,
    without waiting for the customer to write again."""
    db_path, ids = crashed["gap-refund-before-ledger-insert"]
    db, rt, _ = await restart(db_path, "issue_refund", REFUND)
    try:
        await recover(rt, orphan_after_s=0)
        events = await rt.s.audit.list(limit=10_000)
        proposals = {e.proposal_id for e in events if e.kind == "proposal"}
        gated = {e.proposal_id for e in events if e.kind.startswith("gate.")}
        assert proposals <= gated, "a proposal was left without a decision"
        assert len((await store_state(db))["refunds"]) == 1
        conf = await rt.s.confirmations.get(ids["confirmation_id"])
        assert conf is not None and conf.status == "consumed"
    finally:
        await db.dispose()
