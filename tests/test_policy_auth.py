# ruff: noqa: F811 (the `cli` fixture is imported from test_policy_versions)
"""Policy changes are authenticated (issue 20 B.3): `policy apply|approve` want a supervisor's
JWT, verified as the HTTP API verifies it (no `--as` claim); a version is in force only through
a `policy.applied` audit event naming its row and sha256 (a row inserted straight into
policy_versions is ignored and logged); approvers, ceilings and rollout changes need a second,
different supervisor."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest
from sqlalchemy import insert

from agent.policy import load_policy
from agent.policy_refresher import PolicyRefresher
from agent.policy_store import active_policy
from bot.api.auth import make_token
from bot.cli import main
from storage.audit import AuditEvent, AuditLog, sha256_hex
from storage.db import Database, create_database
from storage.models import PolicyVersionRow
from storage.policies import PolicyVersions
from tests.gatekeeper_kit import make_env
from tests.test_policy_versions import V2, _bundled, _edit, _stored, _version, _write, cli, tok  # noqa: F401

LIFTED = _edit(
    _version(_bundled(), "2027.2"),
    ("rep: {USD: 20000, EUR: 20000, GBP: 16000}", "rep: {USD: 999999999, EUR: 20000, GBP: 16000}"),
)
WINDOW = _edit(_version(_bundled(), "2027.3"), ("refund_window_days: 30", "refund_window_days: 45"))


def _active_version() -> str:
    async def go() -> str:
        db = create_database(os.environ["SIGNOFF_DATABASE_URL"])
        try:
            return (await active_policy(PolicyVersions(db), None)).policy.version
        finally:
            await db.dispose()

    return asyncio.run(go())


def test_an_unauthenticated_apply_is_refused_and_stores_nothing(cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(_write(cli, "w.yaml", WINDOW))
    with pytest.raises(SystemExit):  # the bare claim is gone
        main(["policy", "apply", path, "--as", "S-3"])
    capsys.readouterr()
    assert main(["policy", "apply", path]) == 1
    assert "a supervisor's token is needed" in capsys.readouterr().err
    forged = make_token("another-secret-that-is-at-least-32-bytes!!", sub="S-3", role="supervisor")
    assert main(["policy", "apply", path, "--token", forged]) == 1
    assert "not valid" in capsys.readouterr().err
    assert _stored() == (0, []) and _active_version() == load_policy().version


def test_a_rep_cannot_apply_or_approve(cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(_write(cli, "w.yaml", WINDOW))
    assert main(["policy", "apply", path, "--token", tok("S-1")]) == 1
    assert "S-1 is a rep; only a supervisor" in capsys.readouterr().err
    # a token that claims a supervisor's role for a rep names no such staff member
    assert main(["policy", "apply", path, "--token", tok("S-1", "supervisor")]) == 1
    assert "staff member we do not know" in capsys.readouterr().err
    assert _stored() == (0, [])
    assert main(["policy", "apply", str(_write(cli, "l.yaml", LIFTED)), "--token", tok("S-3")]) == 0
    assert main(["policy", "approve", "1", "--token", tok("S-1")]) == 1
    assert "S-1 is a rep" in capsys.readouterr().err
    assert _active_version() == load_policy().version


def test_a_token_from_the_environment_applies_a_change_that_needs_one_supervisor(
    cli: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SIGNOFF_STAFF_TOKEN", tok("S-3"))
    assert main(["policy", "apply", str(_write(cli, "w.yaml", WINDOW))]) == 0
    assert "applied policy 2027.3" in capsys.readouterr().out
    assert _active_version() == "2027.3" and _stored() == (1, ["policy.applied"])


def test_ceilings_approvers_and_rollout_need_a_second_different_supervisor(
    cli: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["policy", "apply", str(_write(cli, "l.yaml", LIFTED)), "--token", tok("S-3")]) == 0
    assert "in force once another supervisor" in capsys.readouterr().out
    assert _active_version() == load_policy().version  # proposed only
    assert main(["policy", "approve", "1", "--token", tok("S-3")]) == 1  # one person, two roles
    assert "S-3 proposed policy_versions #1; another supervisor must approve it" in capsys.readouterr().err
    assert _stored() == (1, ["policy.proposed"])
    assert main(["policy", "approve", "1", "--token", tok("S-4")]) == 0
    assert _active_version() == "2027.2"
    assert main(["policy", "approve", "1", "--token", tok("S-4")]) == 1  # not pending any more
    assert "not a proposal waiting" in capsys.readouterr().err
    approvers = _edit(
        _version(_bundled(), "2027.4"),
        ("roles_that_may_approve: [supervisor]", "roles_that_may_approve: [rep, supervisor]"),
    )
    assert main(["policy", "apply", str(_write(cli, "a.yaml", approvers)), "--token", tok("S-4")]) == 0
    assert "policy.proposed" in capsys.readouterr().out
    assert _active_version() == "2027.2"


def test_a_proposal_made_against_an_older_policy_is_not_approved(cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "apply", str(_write(cli, "l.yaml", LIFTED)), "--token", tok("S-3")]) == 0
    assert main(["policy", "apply", str(_write(cli, "w.yaml", WINDOW)), "--token", tok("S-4")]) == 0
    capsys.readouterr()
    assert main(["policy", "approve", "1", "--token", tok("S-4")]) == 1
    assert "changed since policy_versions #1 was proposed" in capsys.readouterr().err
    assert _active_version() == "2027.3"


async def test_a_row_inserted_straight_into_the_table_is_ignored_and_logged(
    any_db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    env = await make_env(any_db)
    versions = PolicyVersions(any_db)
    refresher = PolicyRefresher(versions, env.services.use_policy, seen_id=None, every_s=0.05)
    row = {
        "id": 1,
        "version": "2027.2",
        "yaml": LIFTED,
        "sha256": sha256_hex(LIFTED),
        "applied_at": env.clock.now,
        "applied_by": "S-3",
        "operator": "x",
        "previous_version": None,
    }
    async with any_db.sessions() as s, s.begin():
        await s.execute(insert(PolicyVersionRow), row)
    with caplog.at_level(logging.WARNING):
        assert await refresher.check() is False
    assert env.services.policy.version == load_policy().version
    assert "policy_versions #1 has no policy audit event" in caplog.text
    # an event that names the row but not its content does not put it in force either
    await AuditLog(any_db).append(AuditEvent(kind="policy.applied", data={"row": 1, "sha256": "0" * 64}))
    with caplog.at_level(logging.WARNING):
        assert await refresher.check() is False
    assert env.services.policy.version == load_policy().version
    assert (await active_policy(versions, None)).source == "bundled"
    assert "does not match policy_versions #1" in caplog.text
