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


#: The glue that calls the runtime; every other module of bot/teams/ is a building block.
GLUE = frozenset(
    {"face.py", "clicks.py", "delivery.py", "notifier.py", "people.py", "present.py", "handoff.py", "takeover.py"}
)
#: The face's wiring: its settings section and its one registry entry.
WIRING = frozenset({"settings.py", "wiring.py"})
#: What every face renders: the runtime's views, not the runtime.
VIEWS = "agent.views"


def test_only_the_glue_calls_the_runtime_and_nothing_reads_the_environment() -> None:
    """Building blocks import no runtime; the glue does, through the runtime's verbs and
    repositories; nothing in bot/teams imports the composition root or (but for its wiring)
    settings, or reads the environment (config comes in as objects)."""
    bad = []
    for path in _modules("bot"):
        rel = str(path.relative_to(ROOT))
        if not rel.startswith("bot/teams/"):
            continue
        names = _imports(path)
        # The face's own wiring (its settings section, its registry entry) reads the settings.
        barred = (
            ("bot.app", "bot.slack", "bot.api")
            if path.name in WIRING
            else ("bot.app", "bot.settings", "bot.slack", "bot.api")
        )
        if any(name.startswith(barred) for name in names):
            bad.append(f"{rel} imports the composition root, settings or another face")
        if path.name not in GLUE and any(name.startswith(("agent", "tools")) and name != VIEWS for name in names):
            bad.append(f"{rel} imports the runtime")
        text = path.read_text(encoding="utf-8")
        if "os.environ" in text or "getenv(" in text:
            bad.append(f"{rel} reads the environment")
    assert bad == []


def test_cards_import_only_records_views_and_wording() -> None:
    cards = ROOT / "bot" / "teams" / "cards.py"
    allowed = {"__future__", "json", "re", "datetime", "typing", "bot.teams", "bot.links", VIEWS, "storage.records"}
    assert _imports(cards) - allowed == set()
