"""The layout is the architecture: imports only point down (bot → agent → tools; the sandbox
implements the tools' protocols over storage; storage imports none of them), vendor SDKs stay
in their adapters, and there is no SQL outside storage/ and the sandbox store."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "tools", "storage", "sandbox", "shopify", "bot")


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
    ("storage", ("agent", "bot", "tools", "sandbox", "shopify"), ()),
    ("tools", ("agent", "bot", "storage", "sandbox", "shopify"), ()),
    ("sandbox", ("agent", "bot", "shopify"), ()),
    # The Shopify backend implements tools' protocols over the Admin API: no runtime, no faces, no SQL.
    ("shopify", ("agent", "bot", "sandbox", "storage", "sqlalchemy"), ()),
    # The evaluation harness builds sandbox stores for its scenarios; nothing else in agent/ may.
    ("agent", ("bot", "slack_bolt", "slack_sdk", "aiohttp.web", "sandbox", "shopify"), ()),
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
    "bot/cli/slack_demo.py",  # signs requests as Slack does: its timestamp is the real time
    "bot/widget/proxy.py",  # a Shopify app-proxy request's timestamp is compared with the real time
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


# -- no import cycles ------------------------------------------------------------------------


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported: not inside functions, not TYPE_CHECKING-only."""
    out: list[ast.Import | ast.ImportFrom] = []
    stack = list(ast.iter_child_nodes(tree))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module → the project modules it imports at import time (a package's ``__init__`` included)."""
    files = {
        _module_name(p, root): p for pkg in packages for p in (root / pkg).rglob("*.py") if "migrations" not in p.parts
    }
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        edges: set[str] = set()
        for node in _import_time_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != mod:
                    edges.add(target)
        graph[mod] = edges
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_no_import_cycles() -> None:
    """No two modules of agent/, tools/, storage/, sandbox/, bot/ import each other, directly or
    around a loop, when they are imported (lazy imports inside functions are not counted)."""
    assert import_cycles(import_graph(ROOT, PACKAGES)) == []


def test_a_planted_import_cycle_is_caught(tmp_path: Path) -> None:
    """A three-module loop through a relative import and a package ``__init__`` is found; a lazy
    import and a TYPE_CHECKING import are not cycles."""
    pkg = tmp_path / "agent"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "sub" / "__init__.py").write_text("from agent.sub.c import C\n", encoding="utf-8")
    (pkg / "a.py").write_text("from agent import b\n", encoding="utf-8")
    (pkg / "b.py").write_text("from .sub import C\n", encoding="utf-8")
    (pkg / "sub" / "c.py").write_text("import agent.a\nC = 1\n", encoding="utf-8")
    (pkg / "lazy.py").write_text("def f():\n    import agent.quiet\n", encoding="utf-8")
    (pkg / "quiet.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import agent.lazy\nimport agent.a\n", encoding="utf-8"
    )
    assert import_cycles(import_graph(tmp_path, ("agent",))) == [["agent.a", "agent.b", "agent.sub", "agent.sub.c"]]


# -- small pieces --------------------------------------------------------------------------

MAX_FUNCTION_LINES = 60


def long_functions(paths: list[Path], root: Path = ROOT) -> list[str]:
    out = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)")
    return out


def test_no_function_is_over_sixty_lines() -> None:
    """Outside migrations, every function fits on a screen (docstring included)."""
    assert long_functions([p for pkg in PACKAGES for p in _modules(pkg)]) == []


def test_a_planted_long_function_is_caught(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f"def f():\n{body}\n\ndef g():\n    return 1\n", encoding="utf-8")
    assert long_functions([tmp_path / "long.py"], tmp_path) == [f"long.py:1 f ({MAX_FUNCTION_LINES + 1} lines)"]


# -- the layout as a lint (ruff TID251, configured in pyproject.toml) ------------------------


@pytest.mark.parametrize(
    ("filename", "source", "banned"),
    [
        ("agent/loop.py", "import os\n\nKEY = os.environ['X']\n", True),
        ("bot/settings.py", "import os\n\nKEY = os.environ['X']\n", False),
        ("tools/registry.py", "import anthropic\n", True),
        ("agent/llm/anthropic.py", "import anthropic\n", False),
        ("bot/api/routes.py", "from slack_sdk.web.async_client import AsyncWebClient\n", True),
        ("bot/slack/sender.py", "from slack_sdk.web.async_client import AsyncWebClient\n", False),
        ("bot/email/bridge.py", "import openai\n", True),
    ],
)
def test_banned_imports_are_a_lint(filename: str, source: str, banned: bool) -> None:
    """os.environ outside settings and the composition root, a vendor SDK outside agent/llm/, the
    Slack SDKs outside bot/slack/: ruff refuses each (and allows each where it belongs)."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "TID251", "--no-cache", "--stdin-filename", filename, "-"],
        input=source,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert ("TID251" in run.stdout) is banned, run.stdout + run.stderr
    assert run.returncode == (1 if banned else 0)


@pytest.mark.parametrize(
    ("filename", "enforced"),
    [("storage/x.py", True), ("tools/x.py", True), ("sandbox/x.py", True), ("agent/x.py", False)],
)
def test_public_functions_need_docstrings_in_storage_tools_and_sandbox(filename: str, enforced: bool) -> None:
    """ruff D (google convention) refuses an undocumented public function where it is enforced."""
    import subprocess
    import sys

    source = '"""A module."""\n\n\ndef public():\n    return 1\n'
    run = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--stdin-filename", filename, "-"],
        input=source,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert ("D103" in run.stdout) is enforced, run.stdout + run.stderr


# -- faces hold the FacePort, never the runtime's repositories -------------------------------

#: The composition root builds the runtime and its repositories; every other module of bot/
#: reaches the runtime through ``agent.face_port.FacePort`` (or, for operator commands, the
#: ``App.services`` the root hands out).
COMPOSITION_ROOT = {"bot/app.py"}
#: The faces' own folders: not even ``App.services`` there.
FACE_FOLDERS = ("bot/api/", "bot/email/", "bot/slack/", "bot/teams/", "bot/shopify/", "bot/widget/")
#: ``runtime.s``, ``_runtime.s``, ``rt.s`` however it is followed (``.audit``, ``)``, end of line).
_REACH = re.compile(r"\b_?(?:runtime|rt)\.s\b")
_SERVICES = re.compile(r"\bapp\.services\b")


def repository_reaches(paths: list[Path], root: Path = ROOT) -> list[str]:
    """``file:line`` of each reach into ``Runtime.s`` outside the composition root (and of
    ``App.services`` inside a face's folder)."""
    out = []
    for path in paths:
        rel = path.relative_to(root).as_posix()
        if rel in COMPOSITION_ROOT:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _REACH.search(line) or (rel.startswith(FACE_FOLDERS) and _SERVICES.search(line)):
                out.append(f"{rel}:{n}")
    return out


def test_faces_reach_the_runtime_only_through_the_port() -> None:
    """No ``runtime.s.`` under bot/ outside the composition root."""
    assert repository_reaches(_modules("bot")) == []


def test_a_planted_repository_reach_is_caught(tmp_path: Path) -> None:
    """A face that reads a repository off the runtime, or off ``App.services``, is caught, and so
    is a CLI command or the server reaching ``rt.s``/``runtime.s``; the composition root is not
    (the CLI may use ``App.services``, the operator's view)."""
    for folder in ("bot/slack", "bot/cli"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "bot" / "slack" / "x.py").write_text(
        "async def f(face):\n    return await face.runtime.s.approvals.get('a')\n", encoding="utf-8"
    )
    (tmp_path / "bot" / "slack" / "y.py").write_text("def g(app):\n    return app.services.audit\n", encoding="utf-8")
    (tmp_path / "bot" / "cli" / "z.py").write_text("def h(app):\n    return app.services.jobs\n", encoding="utf-8")
    (tmp_path / "bot" / "cli" / "w.py").write_text(
        "async def d(demo):\n    return await demo.rt.s.audit.list()\n", encoding="utf-8"
    )
    (tmp_path / "bot" / "m.py").write_text("def m(app, f):\n    return f(app.runtime.s)\n", encoding="utf-8")
    (tmp_path / "bot" / "app.py").write_text("def i(runtime):\n    return runtime.s.db\n", encoding="utf-8")
    paths = sorted((tmp_path / "bot").rglob("*.py"))
    assert repository_reaches(paths, tmp_path) == [
        "bot/cli/w.py:2",
        "bot/m.py:2",
        "bot/slack/x.py:2",
        "bot/slack/y.py:2",
    ]


def test_settings_import_no_face() -> None:
    """Each face reads its own section of the settings in its folder; ``bot/settings.py`` imports
    no face when it is imported (a face's section is asked for lazily)."""
    tree = ast.parse((ROOT / "bot" / "settings.py").read_text(encoding="utf-8"))
    faces = tuple(f.replace("/", ".") for f in FACE_FOLDERS)
    names = [
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in _import_time_imports(tree)
        for a in (n.names if isinstance(n, ast.Import) else [n])  # type: ignore[list-item]
    ]
    assert [n for n in names if n and f"{n}.".startswith(faces)] == []


#: What a face's settings section (``bot/<face>/settings.py``) and its config dataclass
#: (``bot/<face>/config.py``) may import of the project: the variables, the config error, and the
#: face's own config, and the standard library. Never its runtime code (SDK, senders, handlers),
#: even lazily.
_SECTION_IMPORTS = ("bot.settings", "agent.errors")


def settings_reaches(root: Path = ROOT) -> list[str]:
    """``file imports module`` for each project import of a face's settings or config module
    beyond :data:`_SECTION_IMPORTS` and the face's own ``config``."""
    out = []
    for path in sorted((root / "bot").glob("*/settings.py")) + sorted((root / "bot").glob("*/config.py")):
        own = f"bot.{path.parent.name}.config"
        for name in sorted(_imports(path)):
            top = name.split(".")[0]
            if (top in PACKAGES and name not in (*_SECTION_IMPORTS, own)) or (
                top not in PACKAGES and top not in sys.stdlib_module_names
            ):
                out.append(f"{path.relative_to(root).as_posix()} imports {name}")
    return out


def test_a_faces_settings_import_none_of_its_runtime_code() -> None:
    """Slack, email and Teams read their settings section in their folder, over a plain config."""
    for face in ("slack", "email", "teams"):
        assert (ROOT / "bot" / face / "settings.py").is_file(), face
    assert settings_reaches() == []


def test_a_planted_runtime_import_in_a_settings_section_is_caught(tmp_path: Path) -> None:
    (tmp_path / "bot" / "slack").mkdir(parents=True)
    (tmp_path / "bot" / "slack" / "settings.py").write_text(
        "from bot.settings import Settings\nfrom bot.slack.config import SlackConfig\n\n"
        "def f(s):\n    from bot.slack.face import SlackFace\n",
        encoding="utf-8",
    )
    (tmp_path / "bot" / "slack" / "config.py").write_text(
        "import slack_sdk\nimport bot.slack.sender\n", encoding="utf-8"
    )
    assert settings_reaches(tmp_path) == [
        "bot/slack/settings.py imports bot.slack.face",
        "bot/slack/config.py imports bot.slack.sender",
        "bot/slack/config.py imports slack_sdk",
    ]


#: The server's own routes; every other route is a face's, from its line of the registry.
SERVER_ROUTES = {"/healthz", "/metrics"}
#: What the server may import of a face's folder: wording and a host check, never a route.
SERVER_FACE_IMPORTS = {"bot.api.wording", "bot.teams.config"}
_ROUTE_CALLS = {"add_get", "add_post", "add_put", "add_patch", "add_delete", "add_route", "add_view"}
_ROUTE_DEFS = {"get", "post", "put", "patch", "delete", "route", "view"}


def _imported(node: ast.AST) -> list[str]:
    """The modules an import names (``from bot.api import wording``: ``bot.api.wording``),
    less :data:`SERVER_FACE_IMPORTS`."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module:
        face = f"{node.module}/".removeprefix("bot.") in {f.removeprefix("bot/") for f in FACE_FOLDERS}
        names = [f"{node.module}.{a.name}" for a in node.names] if face else [node.module]
    else:
        names = []
    return [n for n in names if n not in SERVER_FACE_IMPORTS]


def server_face_routes(path: Path) -> list[str]:
    """``line: what`` for each face route the server mounts itself: a route path of its own
    beyond :data:`SERVER_ROUTES`, or an import (lazy ones too) of a face module beyond
    :data:`SERVER_FACE_IMPORTS` (the email bridge, Slack's Bolt routes, …)."""
    faces = tuple(f.replace("/", ".") for f in FACE_FOLDERS)
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name, args = node.func.attr, [a for a in node.args if isinstance(a, ast.Constant)]
            paths = [a.value for a in args if isinstance(a.value, str) and a.value.startswith("/")]
            if (name in _ROUTE_CALLS or name in _ROUTE_DEFS) and any(p not in SERVER_ROUTES for p in paths):
                out.append(f"{node.lineno}: {name} {paths[0]}")
        out += [f"{node.lineno}: imports {n}" for n in _imported(node) if f"{n}.".startswith(faces)]
    return sorted(out)


def test_the_server_mounts_no_face_route_itself() -> None:
    """``/healthz`` and ``/metrics`` are the server's; every face's routes come through its
    registry line (``Face.routes()``, mounted from ``App.http_routes``)."""
    assert server_face_routes(ROOT / "bot" / "server.py") == []


def test_a_planted_face_route_in_the_server_is_caught(tmp_path: Path) -> None:
    server = tmp_path / "server.py"
    server.write_text(
        "from aiohttp import web\nfrom bot.email import bridge\nfrom bot.api import wording\n\n"
        "def make(app, w):\n"
        "    w.router.add_get('/healthz', h)\n"
        "    w.router.add_post('/email/inbound', bridge.inbound)\n"
        "    from bot.slack.bolt import routes\n"
        "    w.router.add_routes([web.get('/teams/x', h), *app.http_routes])\n",
        encoding="utf-8",
    )
    assert server_face_routes(server) == [
        "2: imports bot.email.bridge",
        "7: add_post /email/inbound",
        "8: imports bot.slack.bolt",
        "9: get /teams/x",
    ]
