"""``signoff demo``: the canonical scenarios offline, on a migrated temporary store."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.cli import main


def test_demo_runs_offline_and_ends_with_a_verified_audit_chain(capsys: pytest.CaptureFixture[str]) -> None:
    """No key, no network: the demo planner drives every scenario and the audit chain verifies."""
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    lines = out.rstrip().splitlines()
    assert "driven by the scripted demo planner (no network)" in lines[0]
    assert lines[-1].startswith("audit chain verified: ") and lines[-1].endswith(" events")
    assert "stop_reason=tool_use" in out and "tool_use issue_refund" in out and "gate     confirmation" in out
    assert "supervisor S-3 approves" in out and "REFUNDED" in out  # canonical flow
    assert "actions executed in this conversation: 0" in out  # injection ignored
    assert "tool results containing C-8's orders: none" in out  # cross-account
    assert "aggregate_over_ceiling" in out and "refunded without approval in this conversation: 30.00 USD" in out


def test_live_without_a_configured_model_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """--live with no key falls back to the demo planner and says plainly which model drove it."""
    for var in ("ANTHROPIC_API_KEY", "SIGNOFF_LLM_PROVIDER", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)  # no .env here
    assert main(["demo", "--live"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "scripted demo planner (no network)" in first and "--live, but no model is configured" in first


async def test_the_slack_demo_shows_each_person_what_they_would_see(capsys: pytest.CaptureFixture[str]) -> None:
    from bot.cli.slack_demo import run_slack_demo

    assert await run_slack_demo() == 0
    out = capsys.readouterr().out
    assert "bound to account Liam Moreno (C-17)" in out
    assert "[Confirm] [Decline]" in out and "[Approve] [Reject]" in out
    assert "Only a supervisor can decide this." in out
    assert "Approved by <@U03GRACE>" in out and "a supervisor approved it" in out
    assert "audit chain verified" in out
