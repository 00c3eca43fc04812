"""Static checks run with the tests: mypy over the packages, ruff lint and format over everything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_mypy_is_clean() -> None:
    done = _run("mypy", "agent", "tools", "storage", "sandbox", "shopify", "bot")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_is_clean() -> None:
    done = _run("ruff", "check", "agent", "tools", "storage", "sandbox", "shopify", "bot", "tests", "bench")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_format_leaves_the_code_as_it_is() -> None:
    """The code is formatted once, by ruff, and stays so (a format diff is a failing test)."""
    done = _run("ruff", "format", "--check", "agent", "tools", "storage", "sandbox", "shopify", "bot", "tests", "bench")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
