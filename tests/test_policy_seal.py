# ruff: noqa: F811 (the `cli` and `signer_url` fixtures are imported)
"""A version in force needs proof the database alone cannot forge (storage/policy_seal.py):
with an audit key or signer configured, its `policy.applied` event must carry a seal that key
verifies, so a well-formed event with the right sha256 written straight into the audit table
is not in force; it must follow the version in force (no replayed old event); and on load a
change to approvers, ceilings or rollout needs a second supervisor other than the proposer."""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import insert

from agent.policy import load_policy
from agent.policy_store import active_policy
from bot.cli import main
from bot.signer import RemoteSigner, signer_app
from storage import policy_seal
from storage.audit import AuditEvent, AuditLog, sha256_hex
from storage.db import Database, create_database
from storage.models import PolicyVersionRow
from storage.policies import PolicyVersions
from storage.signer import Signer
from tests.test_audit_anchor import signer_url  # noqa: F401
from tests.test_policy_auth import LIFTED, WINDOW
from tests.test_policy_versions import _bundled, _edit, _version, _write, cli, tok  # noqa: F401


def _window(version: str, days: int) -> str:
    return _edit(_version(_bundled(), version), ("refund_window_days: 30", f"refund_window_days: {days}"))


def _lifted(version: str) -> str:
    return _edit(_version(_bundled(), version), ("rep: {USD: 20000,", "rep: {USD: 999999999,"))


WIDER = _window("2027.5", 60)


async def _forge(db: Database, row_id: int, text: str, data: dict[str, Any]) -> None:
    """What the app's database role can do: a row and a well-formed, chained policy.applied event."""
    row = {
        "id": row_id,
        "version": data["to_version"],
        "yaml": text,
        "sha256": sha256_hex(text),
        "applied_at": datetime.now(UTC),
        "applied_by": data["applied_by"],
        "operator": "x",
        "previous_version": None,
    }
    async with db.sessions() as s, s.begin():
        await s.execute(insert(PolicyVersionRow), row)
    event = {"row": row_id, "sha256": sha256_hex(text), **data}
    await AuditLog(db).append(AuditEvent(kind="policy.applied", principal="supervisor:S-3", data=event))


def _in_force_now() -> tuple[str, str]:
    """(version, where) of the policy `signoff policy show` would report."""

    async def go() -> tuple[str, str]:
        from bot.settings import load_settings
        from bot.signer import policy_trust

        db = create_database(os.environ["SIGNOFF_DATABASE_URL"])
        try:
            key = (await policy_trust(load_settings()))[1]
            active = await active_policy(PolicyVersions(db), None, seal_key=key)
            return active.policy.version, active.where
        finally:
            await db.dispose()

    return asyncio.run(go())


def _forge_sync(row_id: int, text: str, data: dict[str, Any]) -> None:
    async def go() -> None:
        db = create_database(os.environ["SIGNOFF_DATABASE_URL"])
        try:
            await _forge(db, row_id, text, data)
        finally:
            await db.dispose()

    asyncio.run(go())


def _replay(data: dict[str, Any]) -> None:
    """A genuine, sealed policy.applied event's data appended again (what the database role can do)."""

    async def go() -> None:
        db = create_database(os.environ["SIGNOFF_DATABASE_URL"])
        try:
            await AuditLog(db).append(AuditEvent(kind="policy.applied", data=data))
        finally:
            await db.dispose()

    asyncio.run(go())


def _last_applied_data() -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        db = create_database(os.environ["SIGNOFF_DATABASE_URL"])
        try:
            return [e for e in await PolicyVersions(db).events() if e.kind == "policy.applied"][-1].data
        finally:
            await db.dispose()

    return asyncio.run(go())


def test_a_forged_event_with_the_right_sha256_is_not_in_force_when_a_key_seals_policy(
    cli: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SIGNOFF_AUDIT_KEY_FILE", str(cli / "keys" / "audit-key.pem"))
    assert main(["policy", "apply", str(_write(cli, "w.yaml", WINDOW)), "--token", tok("S-3")]) == 0
    genuine = _last_applied_data()
    assert set(genuine["seal"]) == {"key", "sig"} and _in_force_now() == ("2027.3", "policy_versions #1")
    # a well-formed event, right sha256, over the version in force, by a supervisor: no seal
    forged = {"to_version": "2027.5", "from_sha256": sha256_hex(WINDOW), "applied_by": "S-3"}
    with caplog.at_level(logging.ERROR):
        _forge_sync(2, WIDER, forged)
        assert _in_force_now() == ("2027.3", "policy_versions #1")
    assert "policy_versions #2) is not in force: it carries no seal by the configured audit key" in caplog.text
    # the genuine event's seal copied onto it does not verify for its content
    _forge_sync(3, _window("2027.6", 61), {**forged, "to_version": "2027.6", "seal": genuine["seal"]})
    assert _in_force_now() == ("2027.3", "policy_versions #1")
    assert "its seal does not verify" in caplog.text
    # the genuine event replayed (putting #1 back over a later version) does not follow the one in force
    assert main(["policy", "apply", str(_write(cli, "x.yaml", _window("2027.7", 50))), "--token", tok("S-4")]) == 0
    assert _in_force_now() == ("2027.7", "policy_versions #4")
    e4 = _last_applied_data()
    _replay(genuine)
    assert _in_force_now() == ("2027.7", "policy_versions #4")
    assert "applied over another version than policy_versions #4" in caplog.text
    # a rollback to #1's text, then the sealed #4 event replayed: same text in force as it was
    # applied over, but not the same event, so it does not follow
    assert main(["policy", "apply", str(cli / "w.yaml"), "--token", tok("S-3")]) == 0
    assert _in_force_now() == ("2027.3", "policy_versions #5")
    _replay(e4)
    assert _in_force_now() == ("2027.3", "policy_versions #5")


async def test_on_load_a_sensitive_change_needs_a_second_supervisor_who_did_not_propose_it(
    any_db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a key the database is trusted for who applied (README, "Rolling out"), but an
    event that lifts a ceiling with one supervisor, or the proposer approving themselves, is
    still not in force: the rule holds where the policy is loaded, not only in the CLI."""
    versions = PolicyVersions(any_db)
    lifted = {"to_version": "2027.2", "from_sha256": sha256_hex(_bundled()), "applied_by": "S-3"}
    with caplog.at_level(logging.ERROR):
        await _forge(any_db, 1, LIFTED, lifted)
        assert (await active_policy(versions, None)).policy.version == load_policy().version
        await _forge(any_db, 2, _lifted("2027.8"), {**lifted, "to_version": "2027.8", "approved_by": "S-3"})
        assert (await active_policy(versions, None)).policy.version == load_policy().version
    assert caplog.text.count("without a second supervisor's approval") >= 2
    await _forge(any_db, 3, _lifted("2027.9"), {**lifted, "to_version": "2027.9", "approved_by": "S-4"})
    assert (await active_policy(versions, None)).policy.version == "2027.9"


async def test_the_signer_seals_the_fields_it_is_sent_and_nothing_else(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    signer = Signer.open(key, tmp_path / "state.jsonl")
    data = {"sha256": "a" * 64, "from_sha256": "b" * 64, "to_version": "2027.3", "applied_by": "S-3"}
    async with TestClient(TestServer(signer_app(signer))) as client:
        r = await client.post("/seal", json={**data, "approved_by": None})
        assert r.status == 200
        assert policy_seal.problem(key.public_key(), {**data, "seal": (await r.json())["seal"]}) is None
        assert policy_seal.problem(key.public_key(), {**data, "to_version": "9", "seal": (await r.json())["seal"]})
        for bad in ({**data, "sha256": "A" * 64}, {**data, "x": 1}, {"sha256": "a" * 64}, {**data, "applied_by": 3}):
            assert (await client.post("/seal", json=bad)).status == 400
    assert signer.history() == []  # sealing is not signing a head


def test_with_the_separate_signer_an_apply_is_sealed_by_it_and_in_force(
    cli: Path, signer_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIGNOFF_AUDIT_SIGNER", signer_url)
    assert main(["policy", "apply", str(_write(cli, "w.yaml", WINDOW)), "--token", tok("S-3")]) == 0
    assert _in_force_now() == ("2027.3", "policy_versions #1")
    signer_key = asyncio.run(RemoteSigner(signer_url).public_key())
    assert policy_seal.problem(signer_key, _last_applied_data()) is None
    # a key that is not the signer's verifies nothing: the version falls back to the bundled one
    other = cli / "other.pem"
    monkeypatch.setenv("SIGNOFF_AUDIT_KEY_FILE", str(other))
    monkeypatch.delenv("SIGNOFF_AUDIT_SIGNER")
    assert _in_force_now()[0] == load_policy().version


def test_a_forged_approval_neither_puts_a_proposal_in_force_nor_hides_it(cli: Path) -> None:
    """An approval written straight into the audit table, by the proposer, is not in force, and
    the proposal still waits for (and takes) a real second supervisor's approve."""
    assert main(["policy", "apply", str(_write(cli, "l.yaml", LIFTED)), "--token", tok("S-3")]) == 0
    forged = {"row": 1, "sha256": sha256_hex(LIFTED), "from_sha256": sha256_hex(_bundled())}
    _replay({**forged, "to_version": "2027.2", "applied_by": "S-3", "approved_by": "S-3"})
    assert _in_force_now()[0] == load_policy().version
    assert main(["policy", "approve", "1", "--token", tok("S-4")]) == 0
    assert _in_force_now() == ("2027.2", "policy_versions #1")
