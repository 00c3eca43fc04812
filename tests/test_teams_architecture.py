"""The Teams face keeps its vendor SDK and its concerns to itself."""

from __future__ import annotations

from tests.test_architecture import ROOT, _imports, _modules, _offenders


def test_only_bot_teams_imports_the_agents_sdk() -> None:
    bad = [
        o
        for pkg in ("agent", "tools", "storage", "bot")
        for o in _offenders(pkg, ("microsoft_agents",))
        if not o.startswith("bot/teams/")
    ]
    assert bad == []


def test_the_teams_face_calls_no_runtime_and_reads_no_environment() -> None:
    """Building blocks only: the lead wires them to the runtime; config comes in as objects."""
    bad = []
    for path in _modules("bot"):
        rel = str(path.relative_to(ROOT))
        if not rel.startswith("bot/teams/"):
            continue
        if any(name.startswith(("agent", "tools", "bot.app", "bot.settings")) for name in _imports(path)):
            bad.append(f"{rel} imports the runtime")
        text = path.read_text(encoding="utf-8")
        if "os.environ" in text or "getenv(" in text:
            bad.append(f"{rel} reads the environment")
    assert bad == []


def test_cards_import_only_records_view_models_and_wording() -> None:
    cards = ROOT / "bot" / "teams" / "cards.py"
    allowed = {"__future__", "json", "re", "datetime", "typing", "bot.teams", "bot.teams.views", "storage.records"}
    assert _imports(cards) - allowed == set()
