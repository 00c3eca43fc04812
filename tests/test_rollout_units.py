# ruff: noqa: F811 (the `cli` fixture is imported from test_policy_versions)
"""Rollout a support lead can act on (C16): stages per tool (refunds in assist while
cancellations stay in shadow), `signoff rollout advance --unit`, and a recorded shadow set where
staff act through signoff and in the sandbox shop's admin (`signoff store admin ... --as`): the
report's agreement, false actions, misses and money are what was constructed, `--details` names
each conversation, and the figures reach /metrics' gauges."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.decisions import NeedsConfirmation, Record
from agent.metrics import Metrics
from agent.policy import load_policy, parse_policy
from agent.rollout import build_report
from agent.rollout_advance import advance
from agent.rollout_metrics import publish
from bot.cli import main
from storage.audit import AuditLog
from storage.db import Database, create_database
from storage.rollout import RolloutFacts
from tests import test_rollout_report
from tests.gatekeeper_kit import (
    C7,
    CANCEL_EVIDENCE,
    EVIDENCE,
    gate_turn,
    judge,
    make_env,
    policy_with,
    refund,
    retrieve,
)
from tests.test_policy_versions import _bundled, _write, cli  # noqa: F401
from tests.test_rollout_report import Script
from tools.catalogue import build_registry

PER_TOOL = {"channels": {"api": {"customer": {"stage": "shadow", "tools": {"issue_refund": "assist"}}}}}


async def test_a_per_tool_stage_moves_refunds_to_assist_while_cancellations_stay_in_shadow(any_db: Database) -> None:
    env = await make_env(any_db, policy=policy_with(rollout=PER_TOOL))
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE, CANCEL_EVIDENCE)
    assert isinstance(await judge(env, turn, "issue_refund", refund(amount=2000)), NeedsConfirmation)
    cancel = {"order_id": "O-1044", "reason_code": "customer_request", "evidence": [CANCEL_EVIDENCE]}
    assert isinstance(await judge(env, turn, "cancel_order", cancel), Record)
    policy = env.services.policy
    assert policy.stage("api", "customer", "issue_refund") == "assist"
    assert policy.stage("api", "customer", "cancel_order") == policy.stage("api", "customer") == "shadow"


def test_advance_moves_one_unit_one_stage_and_nothing_else() -> None:
    text = _bundled().replace("api: {customer: full,", "api: {customer: shadow,")
    active = parse_policy(text, source="t")  # the bundled policy, with api customers in shadow
    moved = advance(active, text, "api/customer/issue_refund", date(2026, 12, 4))
    assert (moved.old, moved.new) == ("shadow", "assist")
    assert moved.policy.stage("api", "customer", "issue_refund") == "assist"
    assert moved.policy.stage("api", "customer", "cancel_order") == "shadow"
    assert [c.line() for c in moved.changes] == [
        "rollout.channels.api.customer: shadow -> (absent)",
        "rollout.channels.api.customer.stage: (absent) -> shadow",
        "rollout.channels.api.customer.tools.issue_refund: (absent) -> assist",
        f"version: {active.version} -> 2026.12.4",
    ]
    assert "# Rollout stages (C16)" in moved.text  # edited in place: comments kept
    again = advance(moved.policy, moved.text, "api/customer/issue_refund", date(2026, 12, 4))
    assert (again.old, again.new, again.policy.version) == ("assist", "reads", "2026.12.5")


def test_advance_cli_prints_the_diff_and_writes_the_file(cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = cli / "next.yaml"
    assert main(["rollout", "advance", "--unit", "slack/customer/issue_refund", "--out", str(out)]) == 2
    assert "already at the last stage (full)" in capsys.readouterr().err and not out.exists()
    assert main(["rollout", "advance", "--unit", "slack/rep/issue_refund", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "slack/rep/issue_refund: assist -> reads" in printed and "signoff policy apply" in printed
    assert load_policy(out).stage("slack", "rep", "issue_refund") == "reads"
    assert main(["rollout", "advance", "--unit", "slack/rep"]) == 0
    printed = capsys.readouterr().out
    assert "slack/rep: assist -> reads" in printed and "+    slack: {customer: full, rep: reads" in printed
    assert main(["rollout", "advance", "--unit", "nope"]) == 2
    assert "--unit 'nope'" in capsys.readouterr().err


# -- a recorded shadow set ---------------------------------------------------------------------


def _refund(order: str, amount: int) -> dict[str, Any]:
    return {"order_id": order, "amount_minor": amount, "currency": "USD", "reason_code": "damaged", "evidence": ["e"]}


async def _record_shadow_set(db: Database, now: datetime) -> None:
    s = Script(db)
    for cid, customer in (("conv-a", "C-7"), ("conv-b", "C-9"), ("conv-c", "C-8"), ("conv-d", "C-60")):
        await s.conversation(cid, channel="slack", kind="customer", who=customer, customer=customer, opening="refund")
    await s.conversation("rep-a", channel="api", kind="rep", who="S-1", customer="C-7", opening="assist")
    two = now - timedelta(hours=2)
    # a: the agent's refund; a rep then carries out exactly that through signoff (assist): agree
    await s.proposal("conv-a", "customer:C-7", "issue_refund", _refund("O-1042", 3000), "record", two)
    await s.proposal("rep-a", "rep:S-1", "issue_refund", _refund("O-1042", 3000), "execute", now - timedelta(hours=1))
    # b: the agent's refund of 50.00; staff refund 40.00 in the shop's admin (below): differs in amount
    await s.proposal("conv-b", "customer:C-9", "issue_refund", _refund("O-1061", 5000), "record", two)
    # c: the agent's cancellation nobody carried out: a false action
    cancel = {"order_id": "O-1051", "reason_code": "customer_request", "evidence": ["x@1#y"]}
    await s.proposal("conv-c", "customer:C-8", "cancel_order", cancel, "record", two)
    # d: the agent proposed nothing; staff cancel O-1009 in the shop's admin (below): a miss


def test_the_report_over_a_recorded_shadow_set_matches_what_was_constructed(
    cli: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shadow = _bundled().replace("slack: {customer: full,", "slack: {customer: shadow,")
    policy_file = _write(cli, "shadow.yaml", shadow)
    monkeypatch.setenv("SIGNOFF_POLICY_FILE", str(policy_file))
    now = datetime.now(UTC)
    # Script opens every conversation a day before its T0: here twelve hours ago
    monkeypatch.setattr(test_rollout_report, "T0", now + timedelta(hours=12))
    url = os.environ["SIGNOFF_DATABASE_URL"]
    asyncio.run(_in_db(url, lambda db: _record_shadow_set(db, now)))
    admin = ["store", "admin"]
    refund_40 = ["refund", "O-1061", "--amount", "4000", "--currency", "USD", "--reason", "damaged"]
    assert main([*admin, *refund_40, "--as", "S-2"]) == 0
    assert main([*admin, "cancel", "O-1009", "--reason", "customer_request", "--as", "S-1"]) == 0
    assert main([*admin, "cancel", "O-1009", "--reason", "customer_request", "--as", "C-7"]) == 1  # not staff
    capsys.readouterr()
    assert main(["rollout", "report", "--since", "2d", "--json"]) == 0
    _check(json.loads(capsys.readouterr().out))
    assert main(["rollout", "report", "--since", "2d", "--details"]) == 0
    text = capsys.readouterr().out
    for conv in ("conv-a", "conv-b", "conv-c", "conv-d"):
        assert f"  {conv} slack/customer/" in text, conv
    assert "conv-b slack/customer/issue_refund" in text and "differs: amount_minor" in text
    assert "via sandbox" in text and "miss: the agent proposed nothing" in text
    asyncio.run(_in_db(url, lambda db: _gauges_and_audit(db, load_policy(policy_file), now)))


async def _in_db(url: str, work: Any) -> None:
    db = create_database(url)
    try:
        await work(db)
    finally:
        await db.dispose()


def _check(data: dict[str, Any]) -> None:
    units = {t["unit"]: t for t in data["tools"]}
    refunds, cancels = units["slack/customer/issue_refund"], units["slack/customer/cancel_order"]
    assert (refunds["proposed"], refunds["staff_did_same"], refunds["same_arguments"]) == (2, 2, 1)
    assert (refunds["false_actions"], refunds["misses"], refunds["agreement"]) == (0, 0, 0.5)
    assert refunds["agent_would_have_moved_minor"] == {"USD": 8000} and refunds["staff_moved_minor"] == {"USD": 7000}
    assert (cancels["proposed"], cancels["same_arguments"], cancels["false_actions"], cancels["misses"]) == (1, 0, 1, 1)
    assert data["escalations"]["slack/customer"] == {"conversations": 4, "escalated": 0, "rate": 0.0}
    by_conv = {d["conversation_id"]: d for d in data["details"]}
    assert by_conv["conv-a"]["outcome"] == "agree" and by_conv["conv-a"]["staff_action"]["source"] == "signoff"
    assert by_conv["conv-b"]["outcome"] == "differ" and by_conv["conv-b"]["differs"] == ["amount_minor"]
    b_staff = by_conv["conv-b"]["staff_action"]
    assert b_staff["source"] == "sandbox" and b_staff["by"] == "rep:S-2"
    assert by_conv["conv-c"]["outcome"] == "none" and by_conv["conv-c"]["staff_action"] is None
    assert [(m["conversation_id"], m["unit"]) for m in data["misses"]] == [("conv-d", "slack/customer/cancel_order")]
    assert data["bands"]["25-100"]["proposed"] == 2


async def _gauges_and_audit(db: Database, policy: Any, now: datetime) -> None:
    kinds = [e.kind for e in await AuditLog(db).list(limit=100)]
    assert kinds.count("store.admin.refund") == 1 and kinds.count("store.admin.cancel") == 1
    report = await build_report(
        RolloutFacts(db),
        registry=build_registry(),
        policy=policy,
        since=now - timedelta(days=2),
        until=datetime.now(UTC),
    )
    metrics = Metrics()
    publish(metrics, report)
    exposed = metrics.render().decode()
    unit = 'channel="slack",kind="customer",tool="issue_refund"'
    assert f"signoff_rollout_agreement{{{unit}}} 0.5" in exposed
    assert 'signoff_rollout_misses{channel="slack",kind="customer",tool="cancel_order"} 1.0' in exposed
    assert 'signoff_rollout_false_actions{channel="slack",kind="customer",tool="cancel_order"} 1.0' in exposed
