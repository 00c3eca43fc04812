"""The versioned, audited policy (C16): `signoff policy show|diff|apply`, the refusals (a bad
file, an unbumped version, a version reused with other content, nothing changed, someone who
is not a supervisor), the `policy.applied` audit event with the chain still verifying, the
applied version winning at start, and a running runtime taking a newly applied version."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import yaml

from agent.decisions import Record
from agent.errors import ConfigError
from agent.policy import load_policy, parse_policy
from agent.policy_refresher import PolicyRefresher
from agent.policy_store import (
    PolicyRefused,
    active_policy,
    apply_policy,
    approve_policy,
    changes,
)
from bot.api.auth import make_token
from bot.app import create_app, demo_dataset_path
from bot.cli import main
from bot.settings import load_settings
from storage.audit import AuditLog
from storage.db import Database, create_database
from storage.policies import NewPolicyVersion, PolicyMoved, PolicyVersions
from tests.gatekeeper_kit import C7, EVIDENCE, confirm_exact, gate_turn, judge, make_env, refund, retrieve
from tests.support import app_setting

BUNDLED = Path(__file__).parents[1] / "agent" / "data" / "policy.yaml"


def _edit(text: str, *pairs: tuple[str, str]) -> str:
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new)
    return text


def _bundled() -> str:
    return BUNDLED.read_text(encoding="utf-8")


def _version(text: str, version: str) -> str:
    current = load_policy().version
    return _edit(text, (f'version: "{current}"', f'version: "{version}"'))


V2 = _edit(
    _version(_bundled(), "2027.1"),
    ("rep: {USD: 20000, EUR: 20000, GBP: 16000}", "rep: {USD: 10000, EUR: 20000, GBP: 16000}"),
    ("slack: {customer: full,", "slack: {customer: shadow,"),
)


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A migrated SQLite store with the demo dataset (staff S-1/S-2 reps, S-3/S-4 supervisors)."""
    for key in list(os.environ):
        if app_setting(key):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'p.db'}")
    monkeypatch.setenv("SIGNOFF_JWT_SECRET", SECRET)
    assert main(["db", "upgrade"]) == 0
    assert main(["store", "load", str(demo_dataset_path())]) == 0
    return tmp_path


SECRET = "policy-test-secret-that-is-at-least-32-bytes"
ROLES = {"S-1": "rep", "S-2": "rep", "S-3": "supervisor", "S-4": "supervisor"}


def _in_force(path: Path, proposer: str = "S-3", approver: str = "S-4") -> None:
    """Apply ``path`` as ``proposer`` and, when it waits for a second supervisor, approve it as ``approver``."""
    assert main(["policy", "apply", str(path), "--token", tok(proposer)]) == 0
    rows, kinds = _stored()
    if kinds and kinds[-1] == "policy.proposed":
        assert main(["policy", "approve", str(rows), "--token", tok(approver)]) == 0


def tok(staff_id: str, role: str | None = None) -> str:
    """A staff member's JWT, as the HTTP API would accept it (the role the store gives them)."""
    return make_token(SECRET, sub=staff_id, role=role or ROLES.get(staff_id, "supervisor"), ttl_s=600)


def _write(dir: Path, name: str, text: str) -> Path:
    path = dir / name
    path.write_text(text, encoding="utf-8")
    return path


def _stored() -> tuple[int, list[str]]:
    """(policy_versions rows, audit event kinds) in the CLI's database."""

    async def go() -> tuple[int, list[str]]:
        db = create_database(os.environ["SIGNOFF_DATABASE_URL"])
        try:
            rows = await PolicyVersions(db).history(limit=100)
            events = await AuditLog(db).list(limit=1000)
            return len(rows), [e.kind for e in events]
        finally:
            await db.dispose()

    return asyncio.run(go())


B = _bundled()
BAD_FILES = [
    ("invalid YAML", "version: '1'\nceilings: {a: 1}}\n", "not valid YAML at line 2"),
    ("unknown field", _edit(B, ("\nlimits:", "\nlimitz:")), "limitz: Extra inputs"),
    ("unknown nested field", _edit(B, ("  advance:\n", "  advance:\n    min_sample: 3\n")), "advance.min_sample"),
    ("wrong type", _edit(B, ("min_samples: 50", "min_samples: lots")), "rollout.advance.min_samples"),
    ("wrong type (a string number)", _edit(B, ("min_samples: 50", 'min_samples: "50"')), "rollout.advance.min_samples"),
    ("out of range", _edit(B, ("min_agreement: 0.95", "min_agreement: 1.5")), "rollout.advance.min_agreement"),
    ("unknown stage", _edit(B, ("slack: {customer: full,", "slack: {customer: fully,")), "channels.slack.customer"),
    ("duplicate key", B + "\nrun:\n  max_steps_per_turn: 1\n", "duplicate key 'run'"),
]


@pytest.mark.parametrize(("case", "text", "says"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_a_bad_file_is_one_error_naming_file_and_field_exit_2_and_nothing_changes(
    cli: Path, capsys: pytest.CaptureFixture[str], case: str, text: str, says: str
) -> None:
    bad = _write(cli, "bad.yaml", text)
    for argv in (["policy", "diff", str(bad)], ["policy", "apply", str(bad), "--token", tok("S-3")]):
        assert main(argv) == 2, (case, argv)
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"signoff: {bad}: ") and says in err and "\n" not in err, err
    assert _stored() == (0, [])


def test_show_before_and_after_an_apply(cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "show"]) == 0
    out = capsys.readouterr().out
    assert f"active policy: version {load_policy().version}" in out
    assert "bundled default (no version applied to the database yet)" in out
    assert main(["policy", "apply", str(_write(cli, "v2.yaml", V2)), "--token", tok("S-3")]) == 0
    capsys.readouterr()
    assert main(["policy", "show"]) == 0
    out = capsys.readouterr().out
    assert "bundled default" in out and "pending approval: #1 version 2027.1 proposed by S-3" in out
    assert main(["policy", "approve", "1", "--token", tok("S-4")]) == 0
    capsys.readouterr()
    assert main(["policy", "show"]) == 0
    out = capsys.readouterr().out
    assert "active policy: version 2027.1" in out and "database, policy_versions #1" in out and "by S-3" in out
    assert "slack: customer=shadow" in out
    assert main(["policy", "show", "--yaml"]) == 0
    assert capsys.readouterr().out == V2


def test_diff_prints_key_paths_and_a_unified_diff(cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new = _write(cli, "v2.yaml", V2)
    assert main(["policy", "diff", str(new)]) == 0
    out = capsys.readouterr().out
    assert "  ceilings.rep.USD: 20000 -> 10000\n" in out
    assert "  rollout.channels.slack.customer: full -> shadow\n" in out
    assert f"  version: {load_policy().version} -> 2027.1\n" in out
    assert "-  rep: {USD: 20000, EUR: 20000, GBP: 16000}\n+  rep: {USD: 10000, EUR: 20000, GBP: 16000}\n" in out
    assert "apply would be refused" not in out
    assert _stored() == (0, [])  # a diff changes nothing


def test_apply_is_audited_and_every_refusal_stores_nothing(cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    v2 = _write(cli, "v2.yaml", V2)
    assert _stored() == (0, [])
    assert main(["policy", "apply", str(v2), "--token", tok("S-3")]) == 0
    out = capsys.readouterr().out
    assert "proposed policy 2027.1 as policy_versions #1" in out and "ceilings.rep.USD: 20000 -> 10000" in out
    assert main(["policy", "approve", "1", "--token", tok("S-4")]) == 0
    capsys.readouterr()
    # nothing changed / content changed under the same version
    assert main(["policy", "apply", str(v2), "--token", tok("S-3")]) == 1
    assert "refused: nothing changed" in capsys.readouterr().err
    same_version = _write(cli, "v2b.yaml", _edit(V2, ("rep: {USD: 10000", "rep: {USD: 12000")))
    assert main(["policy", "apply", str(same_version), "--token", tok("S-4")]) == 1
    assert "its version is still '2027.1': bump `version`" in capsys.readouterr().err
    assert _stored()[0] == 1
    # v3, then a file reusing the version 2027.1 with other content is refused; the real v2 text
    # again (a rollback) is a new row
    v3 = _write(
        cli, "v3.yaml", _edit(V2, ('version: "2027.1"', 'version: "2027.2"'), ("min_samples: 50", "min_samples: 20"))
    )
    _in_force(v3, "S-4", "S-3")
    capsys.readouterr()
    assert main(["policy", "apply", str(same_version), "--token", tok("S-3")]) == 1
    assert "version '2027.1' was applied before with different content (policy_versions #1" in capsys.readouterr().err
    _in_force(v2)
    assert "policy_versions #3" in capsys.readouterr().out
    rows, kinds = _stored()
    assert rows == 3 and kinds == ["policy.proposed", "policy.applied"] * 3
    assert main(["audit", "verify"]) == 0
    assert "audit chain verified: 6 events" in capsys.readouterr().out


def test_the_audit_event_says_what_changed_and_who(cli: Path) -> None:
    _in_force(_write(cli, "v2.yaml", V2))

    async def go() -> None:
        db = create_database(os.environ["SIGNOFF_DATABASE_URL"])
        try:
            (event,) = await AuditLog(db).list(kind="policy.applied", limit=10)
            row = await PolicyVersions(db).latest()
        finally:
            await db.dispose()
        assert row is not None and row.yaml == V2 and row.previous_version is None and row.applied_by == "S-3"
        assert event.principal == "supervisor:S-4" and event.policy_version == "2027.1"
        assert event.data["approved_by"] == "S-4"
        d = event.data
        assert d["from_version"] == load_policy().version and d["to_version"] == "2027.1"
        assert d["sha256"] == row.sha256 and d["row"] == 1 and d["applied_by"] == "S-3" and d["operator"]
        assert d["changed"] == ["ceilings.rep.USD", "rollout.channels.slack.customer"]

    asyncio.run(go())


def test_the_applied_version_wins_over_the_file_at_start(cli: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNOFF_POLICY_FILE", str(_write(cli, "file.yaml", _version(_bundled(), "2026.12.20"))))

    async def start() -> tuple[str, str, str]:
        app = await create_app(load_settings(), seed=False)
        try:
            assert app.policy is not None
            return app.policy.source, app.runtime.s.policy.version, app.runtime.s.gatekeeper.policy.version
        finally:
            await app.close()

    assert asyncio.run(start()) == ("file", "2026.12.20", "2026.12.20")
    assert main(["policy", "apply", str(_write(cli, "v2.yaml", V2)), "--token", tok("S-3")]) == 0
    assert asyncio.run(start()) == ("file", "2026.12.20", "2026.12.20")  # proposed, not yet in force
    # row #1 records the start-up version (policy.recorded); the proposal is #2
    assert main(["policy", "approve", "2", "--token", tok("S-4")]) == 0
    assert asyncio.run(start()) == ("database", "2027.1", "2027.1")


# -- the repository and the refresher, on both databases ------------------------------------------


async def test_a_running_runtime_takes_a_newly_applied_version(any_db: Database) -> None:
    """A runtime started on the bundled policy; a version that puts the api channel in shadow is
    applied; the refresher swaps it in and the very next judgement records instead of executing."""
    env = await make_env(any_db)
    versions = PolicyVersions(any_db)
    refresher = PolicyRefresher(versions, env.services.use_policy, seen_id=None, every_s=0.05)
    assert await refresher.check() is False  # nothing applied yet
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    args = refund(amount=2000)
    await confirm_exact(env, turn, "issue_refund", args)
    assert not isinstance(await judge(env, turn, "issue_refund", args), Record)

    shadow = _edit(_version(_bundled(), "2027.9"), ("api: {customer: full,", "api: {customer: shadow,"))
    active = await active_policy(versions, None)
    stop = asyncio.Event()
    task = asyncio.create_task(refresher.run(stop))
    try:
        done = await apply_policy(
            versions,
            active,
            NewPolicyVersion(version="2027.9", yaml=shadow, applied_by="S-3", operator="t"),
            source="t.yaml",
        )
        assert done.pending  # a rollout change: a second supervisor puts it in force
        await asyncio.sleep(0.2)
        assert env.services.policy.version != "2027.9"
        await approve_policy(versions, active, done.row.id, approver="S-4", operator="t")
        for _ in range(400):  # wait for the background check (no timing is asserted)
            if env.services.policy.version == "2027.9":
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task
    assert env.services.policy.version == "2027.9" and env.services.gatekeeper.policy.version == "2027.9"
    assert isinstance(await judge(env, turn, "issue_refund", args), Record)
    assert await refresher.check() is False  # the same row is not taken twice


async def test_a_stale_apply_is_refused_and_stores_nothing(any_db: Database) -> None:
    versions = PolicyVersions(any_db)
    before = await active_policy(versions, None)
    lower = "2026.12.9"  # above the bundled version, below V2's
    other = NewPolicyVersion(version=lower, yaml=_version(_bundled(), lower), applied_by="S-3", operator="t")
    await apply_policy(versions, before, other, source="o.yaml")
    # a second apply computed against the old active policy (another operator, at the same time)
    v2 = NewPolicyVersion(version="2027.1", yaml=V2, applied_by="S-4", operator="t")
    with pytest.raises(PolicyMoved):
        await apply_policy(versions, before, v2, source="v2.yaml")
    assert [r.version for r in await versions.history()] == ["2026.12.9"]
    assert [e.kind for e in await AuditLog(any_db).list(limit=10)] == ["policy.applied"]
    assert (await AuditLog(any_db).verify()).ok
    with pytest.raises(PolicyRefused):
        await apply_policy(versions, await active_policy(versions, None), other, source="o.yaml")


def test_changes_name_key_paths_and_set_members() -> None:
    old = load_policy()
    data = yaml.safe_load(_bundled())
    data["version"] = "x"
    data["rollout"]["enabled_actions"] = [a for a in data["rollout"]["enabled_actions"] if a != "cancel_order"] + [
        "extra_tool"
    ]
    data["limits"]["max_refund_minor_per_staff_per_day"]["JPY"] = 1
    new = parse_policy(yaml.safe_dump(data), source="n")
    lines = [c.line() for c in changes(old, new)]
    assert "rollout.enabled_actions: +extra_tool, -cancel_order" in lines
    assert "limits.max_refund_minor_per_staff_per_day.JPY: (absent) -> 1" in lines
    assert f"version: {old.version} -> x" in lines and len(lines) == 3
    with pytest.raises(ConfigError):
        parse_policy("version: 1\nversion: 2\n", source="d")
