"""The audit chain in use (C10, S8): a busy database built by real conversations verifies
with ``signoff audit verify``; any single edited, deleted or swapped row fails it, naming
the row; every proposal has its gate decision; personal data never appears in audit rows."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent.llm.base import ModelRequest
from agent.llm.testing import FunctionModel, text_block, tool_use_block
from agent.runtime import Runtime
from bot.app import demo_dataset_path, sandbox_services
from bot.cli import main
from sandbox.dataset import load_dataset_file
from sandbox.io import load_dataset
from sandbox.schema import upgrade
from storage.audit import ROOT
from storage.db import create_database
from tests.support import C7, C8, SUP_A, SUP_B, Clock
from tests.test_loop_support import BIG_REFUND, SEARCH, SMALL_REFUND
from tools.context import Principal

REP_ON_C8 = Principal(kind="rep", id="S-1", customer_id="C-8")
NEW_EMAIL = "jonas.private.mail@example.de"


def _planner() -> FunctionModel:
    """Drives several conversations by what the user wrote; stateless so it serves them all."""

    def plan(request: ModelRequest) -> Any:
        first = " ".join(b.get("text", "") for b in request.messages[0].content if b.get("type") == "text")
        called = [
            b.get("name")
            for m in request.messages
            if m.role == "assistant"
            for b in m.content
            if b.get("type") == "tool_use"
        ]
        if "big refund" in first:
            return _script(
                called,
                ["get_order", {"order_id": "O-1042"}],
                ["search_knowledge", SEARCH],
                ["issue_refund", BIG_REFUND],
            )
        if "euro refund" in first:
            return _script(
                called,
                ["search_knowledge", SEARCH],
                ["issue_refund", {**SMALL_REFUND, "order_id": "O-1051", "amount_minor": 1000, "currency": "EUR"}],
            )
        if "small refund" in first:
            return _script(called, ["search_knowledge", SEARCH], ["issue_refund", SMALL_REFUND])
        if "personal" in first:
            return _script(
                called,
                ["get_account", {}],
                [
                    "add_case_note",
                    {"note": "Maya Chen (maya.chen@example.com, +1 512 555 0101) called about 840 Lakeview St."},
                ],
                [
                    "escalate_to_human",
                    {"reason": "customer_request", "summary": "Maya Chen maya.chen@example.com wants a person."},
                ],
            )
        if "contact" in first:
            hits = _evidence(request)
            return _script(
                called,
                ["load_tools", {"group": "account"}],
                ["search_knowledge", {"query": "account security contact change"}],
                ["update_contact_details", {"email": NEW_EMAIL, "evidence": hits[:1]}],
            )
        return "Noted."

    return FunctionModel(plan)


def _script(called: list[Any], *steps: list[Any]) -> Any:
    for name, args in steps:
        if name not in called:
            return [text_block(f"Calling {name}."), tool_use_block(name, args)]
    return "Done for now; anything else?"


def _evidence(request: ModelRequest) -> list[str]:
    text = json.dumps([m.content for m in request.messages])
    return re.findall(r'evidence_id\\+": \\+"([^"\\]+)', text)


async def _busy(url: str) -> None:
    """Several real conversations: confirmations, approvals (approved, rejected, dual),
    escalation, case notes with personal data, a contact change, a decline."""
    clock = Clock(datetime.now(UTC).replace(microsecond=0))
    db = create_database(url)
    await load_dataset(db, load_dataset_file(demo_dataset_path()), rebase_to=clock.now)
    rt = Runtime(sandbox_services(db=db, model=_planner(), clock=clock))
    # 1. the canonical refund: confirm, approve, resume
    r = await rt.chat(principal=C7, channel="api", message="big refund for O-1042 please, it arrived damaged")
    c = await rt.confirm(r.pending[0].id, actor=C7, accept=True)
    assert c.approval is not None
    await rt.decide(c.approval.id, expected_version=1, decision="approve", actor=SUP_A)
    await rt.resume(c.approval.id)
    # 2. a small refund confirmed by a chat "yes", then a declined one
    r = await rt.chat(principal=C7, channel="slack", message="small refund on O-1044, damaged")
    await rt.chat(principal=C7, channel="slack", message="yes", conversation_id=r.conversation_id)
    # 3. personal data in a case note and an escalation
    await rt.chat(principal=C7, channel="email", message="personal: I want a person. I am Maya Chen.")
    # 4. a rep changes a contact email: needs an approval, rejected with a comment naming the customer
    r = await rt.chat(principal=REP_ON_C8, channel="api", message=f"contact change to {NEW_EMAIL}")
    assert r.pending, r
    c = await rt.confirm(r.pending[0].id, actor=REP_ON_C8, accept=True)
    assert c.approval is not None
    await rt.decide(
        c.approval.id,
        expected_version=1,
        decision="reject",
        actor=SUP_B,
        comment=f"Jonas Weber could not be verified at {NEW_EMAIL}.",
    )
    await rt.resume(c.approval.id)
    # 5. a customer who declines
    r = await rt.chat(principal=C8, channel="api", message="euro refund on O-1051 please")
    assert r.pending, r
    await rt.chat(principal=C8, channel="api", message="no", conversation_id=r.conversation_id)
    await db.dispose()


@pytest.fixture(scope="module")
def busy_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file holding a busy audit chain (built once, copied per test)."""
    path = tmp_path_factory.mktemp("audit") / "busy.db"
    url = f"sqlite+aiosqlite:///{path}"
    asyncio.run(upgrade(url))
    asyncio.run(_busy(url))
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


@pytest.fixture
def db_copy(busy_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "copy.db"
    shutil.copy(busy_db, path)
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", f"sqlite+aiosqlite:///{path}")
    return path


def _rows(path: Path, sql: str, *params: Any) -> list[Any]:
    with sqlite3.connect(path) as conn:
        conn.row_factory = sqlite3.Row
        return list(conn.execute(sql, params).fetchall())


def _count(path: Path) -> int:
    return int(_rows(path, "SELECT count(*) AS n FROM audit_events")[0]["n"])


def test_audit_verify_passes_on_a_busy_database(db_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``signoff audit verify`` exits 0 and counts every event of a busy database."""
    n = _count(db_copy)
    assert n > 50
    assert main(["audit", "verify"]) == 0
    assert f"audit chain verified: {n} events" in capsys.readouterr().out


def _edit(path: Path, seq: int) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE audit_events SET principal = 'supervisor:S-4' WHERE seq = ?", (seq,))


def _edit_data(path: Path, seq: int) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE audit_events SET data = json_set(data, '$.forged', 1) WHERE seq = ?", (seq,))


def _delete(path: Path, seq: int) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM audit_events WHERE seq = ?", (seq,))


def _swap(path: Path, seq: int) -> None:
    """Exchange the contents (hashes included) of rows ``seq`` and ``seq + 1``."""
    a, b = _rows(path, "SELECT * FROM audit_events WHERE seq IN (?, ?) ORDER BY seq", seq, seq + 1)
    cols = [k for k in a.keys() if k not in ("seq", "part", "pseq")]
    with sqlite3.connect(path) as conn:
        for target, source in ((seq, b), (seq + 1, a)):
            sets = ", ".join(f"{c} = ?" for c in cols)
            conn.execute(f"UPDATE audit_events SET {sets} WHERE seq = ?", [source[c] for c in cols] + [target])


@pytest.mark.parametrize("tamper", [_edit, _edit_data, _delete, _swap])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_audit_verify_fails_naming_the_row_after_any_single_change(
    db_copy: Path, capsys: pytest.CaptureFixture[str], tamper: Any, where: str
) -> None:
    """One edited, deleted or swapped audit row anywhere in the log: exit 1 and the message
    names that row's partition and position (the first one verify walks, for a swap: the root
    first, then the partitions in order)."""
    n = _count(db_copy)
    seq = {"first": 1, "middle": n // 2, "last": n - 1 if tamper is _swap else n}[where]
    touched = _rows(db_copy, "SELECT part, pseq FROM audit_events WHERE seq IN (?, ?)", seq, seq + (tamper is _swap))
    part, pseq = min((r["part"] != ROOT, r["part"], r["pseq"]) for r in touched)[1:]
    tamper(db_copy, seq)
    assert main(["audit", "verify"]) == 1
    err = capsys.readouterr().err
    where_ = "" if part == ROOT else f"partition {part}: "
    assert f"audit chain BROKEN at seq {pseq}: {where_}" in err, err


def test_every_proposal_has_a_gate_decision_event(busy_db: Path) -> None:
    """S8: every proposal (model steps and runtime-applied ones) has its proposal event and
    exactly one gate decision event; approvals and confirmations have their lifecycle events."""
    assert {r["status"] for r in _rows(busy_db, "SELECT status FROM approvals")} == {"approved", "rejected", "pending"}
    assert {"consumed", "declined"} <= {r["status"] for r in _rows(busy_db, "SELECT status FROM confirmations")}
    proposals = {r["id"] for r in _rows(busy_db, "SELECT id FROM proposals")}
    assert len(proposals) > 10
    gates: dict[str, int] = {}
    for r in _rows(busy_db, "SELECT proposal_id FROM audit_events WHERE kind LIKE 'gate.%'"):
        gates[r["proposal_id"]] = gates.get(r["proposal_id"], 0) + 1
    proposed = {
        r["proposal_id"] for r in _rows(busy_db, "SELECT proposal_id FROM audit_events WHERE kind = 'proposal'")
    }
    assert proposals <= proposed
    assert {p: gates.get(p, 0) for p in proposals} == {p: 1 for p in proposals}
    for r in _rows(busy_db, "SELECT id, status FROM approvals"):
        kinds = {x["kind"] for x in _rows(busy_db, "SELECT kind FROM audit_events WHERE data LIKE ?", f'%"{r["id"]}"%')}
        assert "approval.requested" in kinds
        if r["status"] in ("approved", "rejected"):
            assert f"approval.{r['status']}" in kinds
    for r in _rows(busy_db, "SELECT id FROM confirmations"):
        kinds = {x["kind"] for x in _rows(busy_db, "SELECT kind FROM audit_events WHERE data LIKE ?", f'%"{r["id"]}"%')}
        assert "confirmation.requested" in kinds
    executed = _rows(busy_db, "SELECT count(*) AS n FROM audit_events WHERE kind = 'execution.succeeded'")[0]["n"]
    assert executed == _rows(busy_db, "SELECT count(*) AS n FROM tool_executions WHERE status = 'succeeded'")[0]["n"]


def test_personal_data_never_appears_in_audit_rows(busy_db: Path) -> None:
    """Names, emails, phone numbers and street addresses (of every customer and staff member,
    and the new email a rep typed) appear in no column of any audit row."""
    dataset = json.loads(demo_dataset_path().read_text())
    needles = {NEW_EMAIL.lower()}
    for c in dataset["customers"]:
        needles |= {c["name"].lower(), c["email"].lower(), c["address"]["line1"].lower()}
        if c.get("phone"):
            needles |= {c["phone"].lower(), re.sub(r"[^0-9+]", "", c["phone"])}
    needles |= {s["name"].lower() for s in dataset["staff"]}
    rows = _rows(busy_db, "SELECT * FROM audit_events")
    assert len(rows) > 50
    # the conversations did carry personal data: it is in the case notes, not the audit chain
    notes = " ".join(r["text"] for r in _rows(busy_db, "SELECT text FROM case_notes")).lower()
    assert "maya.chen@example.com" in notes
    for row in rows:
        text = json.dumps(dict(row), default=str, ensure_ascii=False).lower()
        found = sorted(n for n in needles if n in text)
        assert not found, (row["seq"], row["kind"], found)
