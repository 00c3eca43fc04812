# ruff: noqa: F811 (the `cli` fixture is imported from test_policy_versions)
"""A version string names one policy text, and versions are ordered (C16): the version a process
started with is recorded the first time it is seen, so a file reusing it with other content is
refused; a lower version is refused; the identical text of a recorded version (a rollback) is not."""

from __future__ import annotations

import asyncio
from datetime import date
from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.policy_versions import calver, next_version
from bot.app import create_app
from bot.cli import main
from bot.settings import load_settings
from tests.test_policy_versions import _bundled, _edit, _stored, _version, _write, cli, tok  # noqa: F401

STARTUP = _version(_bundled(), "2027.3")
REUSED = _edit(STARTUP, ("refund_window_days: 30", "refund_window_days: 45"))


def _start() -> None:
    async def go() -> None:
        app = await create_app(load_settings(), seed=False)
        await app.close()

    asyncio.run(go())


def test_a_file_reusing_the_start_up_version_with_other_content_is_refused(
    cli: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SIGNOFF_POLICY_FILE", str(_write(cli, "start.yaml", STARTUP)))
    _start()
    _start()  # seen again: nothing more is stored
    assert _stored() == (1, ["policy.recorded"])
    # an operator whose environment has no policy file (the bundled default is active for them)
    monkeypatch.delenv("SIGNOFF_POLICY_FILE")
    assert main(["policy", "apply", str(_write(cli, "r.yaml", REUSED)), "--token", tok("S-3")]) == 1
    err = capsys.readouterr().err
    assert "version '2027.3' was in force at start-up with different content (policy_versions #1" in err, err
    assert _stored() == (1, ["policy.recorded"])
    # a process starting with that other text under the same version refuses to start
    monkeypatch.setenv("SIGNOFF_POLICY_FILE", str(_write(cli, "r2.yaml", REUSED)))
    with pytest.raises(ConfigError, match="version '2027.3' was recorded at start-up with other content"):
        _start()
    assert main(["audit", "verify"]) == 0


def test_a_lower_or_unordered_version_is_refused_a_rollback_is_not(
    cli: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    window = _edit(_version(_bundled(), "2027.10"), ("refund_window_days: 30", "refund_window_days: 40"))
    assert main(["policy", "apply", str(_write(cli, "a.yaml", window)), "--token", tok("S-3")]) == 0
    capsys.readouterr()
    for version, says in (
        ("2027.9", "version '2027.9' is not above the active '2027.10' (policy_versions #1)"),
        ("2026.12.30", "is not above"),
        ("next", "version 'next' is not CalVer"),
    ):
        text = _edit(_version(_bundled(), version), ("refund_window_days: 30", "refund_window_days: 41"))
        assert main(["policy", "apply", str(_write(cli, "low.yaml", text)), "--token", tok("S-3")]) == 1
        assert says in capsys.readouterr().err
    higher = _edit(_version(_bundled(), "2027.11"), ("refund_window_days: 30", "refund_window_days: 42"))
    assert main(["policy", "apply", str(_write(cli, "b.yaml", higher)), "--token", tok("S-3")]) == 0
    # the identical 2027.10 text again: a rollback, a new row
    assert main(["policy", "apply", str(_write(cli, "a.yaml", window)), "--token", tok("S-3")]) == 0
    assert _stored()[0] == 3


def test_calver_orders_numerically_and_the_next_version() -> None:
    assert calver("2026.12.10") > calver("2026.12.9") > calver("2026.12") > calver("2026.1.30")  # type: ignore[operator]
    assert calver("v2") is None and calver("2026") is None
    assert next_version("2026.12.3", date(2026, 12, 4)) == "2026.12.4"
    assert next_version("2026.12.3", date(2027, 1, 2)) == "2027.1.1"
    assert next_version("2027.1", date(2026, 12, 4)) == "2027.1.1"
