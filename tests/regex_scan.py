"""Every regular expression our code runs on text, and adversarial inputs to time them on.

``patterns()`` collects the patterns of every package that runs one: ``bot/`` (the faces, the
widget included), ``agent/``, ``tools/``, ``storage/``, ``sandbox/`` and ``shopify/`` (webhooks,
Admin API answers): each literal pattern handed to ``re.*`` (read from the source, so inline
``re.search(r"…", text)`` calls are found too), each compiled pattern a module keeps at its
top level (patterns built with f-strings), the catalogue's reply-claim patterns and the demo
planner's intent words. ``adversarial(pattern, n)`` builds inputs of about ``n`` characters
that make a backtracking engine try every split: runs of one character, of two alternating
characters, and of the pattern's own literal words, with and without a failing tail.

``python -m tests.regex_scan [N]`` times every pattern on every input in a child process that
is killed after a few seconds, and prints the slow ones; ``tests/test_linear_text.py`` runs the
same scan as a test.
"""

from __future__ import annotations

import ast
import importlib
import itertools
import pkgutil
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bot", "agent", "tools", "storage", "sandbox", "shopify")
_RE_CALLS = frozenset({"compile", "match", "search", "fullmatch", "findall", "finditer", "sub", "subn", "split"})
_GENERIC = " \t\n.@<>[]()|:;,/-_$'\"*~`#!=+?aA0O9"


def _literal_patterns() -> Iterator[tuple[str, str, int]]:
    for path in sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "re"):
                continue
            if node.func.attr not in _RE_CALLS or not node.args:
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                flags = _flags(node)
                yield f"{path.relative_to(ROOT)}:{node.lineno}", first.value, flags


def _flags(node: ast.Call) -> int:
    """The flags of a call when they are plain ``re.X`` names (``re.I | re.S``); else none."""
    value = 0
    for arg in [*node.args[1:], *(k.value for k in node.keywords if k.arg == "flags")]:
        for name in ast.walk(arg):
            if isinstance(name, ast.Attribute) and isinstance(name.value, ast.Name) and name.value.id == "re":
                flag = getattr(re, name.attr, None)
                if isinstance(flag, re.RegexFlag):
                    value |= flag
    return value


def _module_patterns() -> Iterator[tuple[str, str, int]]:
    for pkg in PACKAGES:
        base = importlib.import_module(pkg)
        for info in pkgutil.walk_packages(base.__path__, prefix=f"{pkg}."):
            if ".migrations" in info.name:
                continue
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if isinstance(value, re.Pattern) and isinstance(value.pattern, str):
                    yield f"{info.name}.{name}", value.pattern, value.flags & ~re.UNICODE


def _data_patterns() -> Iterator[tuple[str, str, int]]:
    from agent import planner
    from tools.catalogue import build_registry

    for tool in build_registry().tools.values():
        if tool.claim:
            yield f"claim:{tool.name}", tool.claim, 0
    for n, (words, _handler) in enumerate(planner.INTENTS):
        for w in words:
            yield f"agent.planner.INTENTS[{n}]", w, 0


def patterns() -> list[tuple[str, str, int]]:
    """(where, pattern, flags) for every pattern our code runs, each distinct pattern once."""
    seen: dict[tuple[str, int], str] = {}
    for where, pattern, flags in itertools.chain(_literal_patterns(), _module_patterns(), _data_patterns()):
        seen.setdefault((pattern, flags), where)
    return [(where, pattern, flags) for (pattern, flags), where in seen.items()]


def _words(pattern: str) -> list[str]:
    """The pattern's literal words and punctuation runs (``signoff``, ``link``, ``<@``)."""
    return sorted({w for w in re.findall(r"[A-Za-z]{2,}|[^\w\s\\()\[\]{}?*+|^$]{1,3}", pattern)})[:12]


def _literals(pattern: str) -> list[str]:
    """The pattern's runs of literal characters (``<at>``, ``</at>``), escapes undone."""
    plain = re.sub(r"\\[A-Za-z]", "\x00", pattern)  # a class escape (\s, \S, \b) is no literal
    runs = re.findall(r"(?:\\[^\w]|[^\x00\\()\[\]{}?*+|^$.])+", plain)
    return sorted({re.sub(r"\\(.)", r"\1", r) for r in runs if r.strip()})[:12]


_TAILS = ("", "\x00", " !", "\n!")
_CORE = " @.<a-:/"

#: (prefix, repeated unit, tail): the text of length ``n`` is prefix + unit * (n / len(unit)) + tail.
Recipe = tuple[str, str, str]


def recipes(pattern: str) -> list[Recipe]:
    """Input shapes built to make ``pattern`` backtrack."""
    alphabet = sorted(set(_GENERIC) | {c for c in pattern if c.isprintable() and c != "\\"})
    literals = _literals(pattern)
    pairs = sorted(set(_CORE + "".join(literals))) + ["\t", "\n"]
    units = [*alphabet, *(a + b for a, b in itertools.combinations(pairs, 2)), *literals]
    units += [w + c for w in [*_words(pattern), *literals] for c in (" ", "@", ".", "<", "a", " 1", " 1 ")]
    out: list[Recipe] = [("", unit, tail) for unit in units for tail in _TAILS]
    core = [*_CORE, *(a + b for a, b in itertools.permutations(_CORE, 2))]
    for w in [*_words(pattern), *literals]:  # a word, then a long run of what may follow it, then a failure
        out += [(w + " ", c, tail) for c in core for tail in _TAILS]
    return out


def text_of(recipe: Recipe, n: int) -> str:
    prefix, unit, tail = recipe
    return prefix + unit * max(1, n // len(unit)) + tail


def _took(compiled: re.Pattern[str], text: str) -> float:
    import time

    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        for _m in compiled.finditer(text):
            pass
        best = min(best, time.perf_counter() - t0)
    return best


def growth(pattern: str, flags: int, n: int) -> tuple[float, float, str]:
    """The worst shapes at ``n`` characters, timed again at ``4n`` and ``16n``: (time at 16n, its
    ratio to 4n, the shape). Linear is a ratio near 4; quadratic 16; cubic 64."""
    compiled = re.compile(pattern, flags)
    shapes = recipes(pattern)
    first = sorted(shapes, key=lambda r: _took(compiled, text_of(r, n)), reverse=True)[:4]
    worst = (0.0, 0.0, "")
    for r in first:
        mid, big = _took(compiled, text_of(r, 4 * n)), _took(compiled, text_of(r, 16 * n))
        if big > worst[0]:
            worst = (big, big / max(mid, 1e-6), repr(text_of(r, 12)))
    return worst


def _child(pattern: str, flags: int, n: int) -> None:  # pragma: no cover - runs in a child process
    big, ratio, which = growth(pattern, flags, n)
    print(f"{big:.6f}\t{ratio:.2f}\t{which}")


def scan(
    n: int = 500, *, limit_s: float = 0.05, max_ratio: float = 8.0, timeout_s: float = 20.0
) -> list[tuple[str, str, str]]:
    """The patterns that grow faster than linearly (or never end) on their worst input shapes."""
    import subprocess

    slow = []
    for where, pattern, flags in patterns():
        code = f"from tests.regex_scan import _child; _child({pattern!r}, {int(flags)}, {n})"
        try:
            done = subprocess.run(
                [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=True
            )
        except subprocess.TimeoutExpired:
            slow.append((where, pattern, f"over {timeout_s} s"))
            continue
        big, ratio, which = done.stdout.strip().split("\t", 2)
        if float(big) > limit_s and float(ratio) > max_ratio:
            slow.append((where, pattern, f"{float(big):.3f} s at {16 * n} characters (x{ratio} for 4x) on {which}"))
    return slow


if __name__ == "__main__":  # pragma: no cover
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    print(len(patterns()), "patterns")
    for row in scan(size):
        print(*row, sep="\n  ", end="\n\n")
