"""The layout is the architecture: imports only point down (bot → agent → tools; the sandbox
implements the tools' protocols over storage; storage imports none of them), vendor SDKs stay
in their adapters, and there is no SQL outside storage/ and the sandbox store."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "tools", "storage", "sandbox", "bot")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def _modules(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "migrations" not in p.parts)


def _offenders(package: str, banned: tuple[str, ...], allow: tuple[str, ...] = ()) -> list[str]:
    bad = []
    for path in _modules(package):
        for name in _imports(path):
            if name.startswith(banned) and not name.startswith(allow):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    return bad


RULES = [
    ("storage", ("agent", "bot", "tools", "sandbox"), ()),
    ("tools", ("agent", "bot", "storage", "sandbox"), ()),
    ("sandbox", ("agent", "bot"), ()),
    # The evaluation harness builds sandbox stores for its scenarios; nothing else in agent/ may.
    ("agent", ("bot", "slack_bolt", "slack_sdk", "aiohttp.web", "sandbox"), ()),
]


@pytest.mark.parametrize(("package", "banned", "allow"), RULES)
def test_imports_point_down(package: str, banned: tuple[str, ...], allow: tuple[str, ...]) -> None:
    """bot → agent → tools; sandbox → tools, storage; storage imports none of them."""
    offenders = _offenders(package, banned, allow)
    if package == "agent":
        offenders = [o for o in offenders if not (o.startswith("agent/evaluation/") and " imports sandbox" in o)]
    assert offenders == []


def test_no_sql_outside_storage() -> None:
    """Everything reaches the database through storage/ repositories."""
    bad = [o for pkg in ("agent", "tools", "bot") for o in _offenders(pkg, ("sqlalchemy", "asyncpg", "aiosqlite"))]
    assert bad == []


def test_only_the_adapter_imports_the_anthropic_sdk() -> None:
    bad = [o for pkg in PACKAGES for o in _offenders(pkg, ("anthropic",)) if not o.startswith("agent/llm/anthropic.py")]
    assert bad == []


def test_no_environment_reads_below_the_composition_root() -> None:
    """Settings are resolved once (bot/settings.py); nothing else reads os.environ."""
    bad = []
    for pkg in ("agent", "tools", "storage"):
        for path in _modules(pkg):
            text = path.read_text(encoding="utf-8")
            if "os.environ" in text or "getenv(" in text:
                bad.append(str(path.relative_to(ROOT)))
    assert bad == []


#: Where reading the real time is the point: the wall clock every repository defaults to, the
#: composition root and CLI that choose the clock, the evaluation's own epoch, and protocol edges
#: that must compare with other systems' real time (JWT lifetimes, an HTTP Retry-After date).
REAL_TIME_ALLOWED = {
    "storage/records.py",
    "bot/app.py",
    "bot/cli/commands.py",
    "bot/cli/demo.py",
    "agent/evaluation/runner.py",
    "bot/api/auth.py",
    "bot/teams/sender.py",
}
_REAL_TIME = ("datetime.now(", "datetime.utcnow(", "time.time(", "date.today(")


def _real_time_reads(paths: list[Path], root: Path = ROOT) -> list[str]:
    return [
        str(p.relative_to(root))
        for p in paths
        if any(call in p.read_text(encoding="utf-8") for call in _REAL_TIME)
        and str(p.relative_to(root)) not in REAL_TIME_ALLOWED
    ]


def test_one_injected_clock_rules_every_timestamp() -> None:
    """Timestamps come from the injected clock (``Services.clock``; repositories default to
    ``storage.records.wall_clock``); nothing else reads the real time."""
    paths = [p for pkg in PACKAGES for p in _modules(pkg) if "data" not in p.relative_to(ROOT).parts]
    assert _real_time_reads(paths) == []


def test_a_planted_real_time_read_is_caught(tmp_path: Path) -> None:
    """The clock rule fails on a module that stamps its own time (and spares the wall clock)."""
    (tmp_path / "agent").mkdir()
    (tmp_path / "storage").mkdir()
    planted = tmp_path / "agent" / "stamp.py"
    planted.write_text("from datetime import UTC, datetime\n\nSTAMP = datetime.now(UTC)\n", encoding="utf-8")
    allowed = tmp_path / "storage" / "records.py"
    allowed.write_text((ROOT / "storage" / "records.py").read_text(encoding="utf-8"), encoding="utf-8")
    assert _real_time_reads([planted, allowed], tmp_path) == ["agent/stamp.py"]
