"""The dependency contract: every direct dependency is locked (with hashes) at a version its
range admits, and the README's "Dependencies" table names each one with its floor."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DIRECT = [Requirement(r) for r in [*PROJECT["dependencies"], *PROJECT["optional-dependencies"]["test"]]]


def locked() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) from requirements.lock."""
    pins: dict[str, tuple[str, list[str]]] = {}
    name = ""
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9_.-]+)==([^ \\]+)", line):
            name = canonicalize_name(m.group(1))
            pins[name] = (m.group(2), [])
        elif m := re.match(r"^\s+--hash=(sha256:[0-9a-f]{64})", line):
            pins[name][1].append(m.group(1))
    return pins


@pytest.mark.parametrize("req", DIRECT, ids=lambda r: r.name)
def test_each_direct_dependency_is_locked_within_its_range_with_hashes(req: Requirement) -> None:
    """The lock pins every direct dependency at a version the range admits, hash-checked."""
    pins = locked()
    version, hashes = pins[canonicalize_name(req.name)]
    assert req.specifier.contains(version, prereleases=True), (req, version)
    assert hashes, f"{req.name} has no hashes in requirements.lock"


def test_every_locked_package_has_hashes_and_no_index_is_named() -> None:
    """``pip install --require-hashes`` can take the whole lock, and it names no host."""
    assert all(hashes for _, hashes in locked().values())
    text = (ROOT / "requirements.lock").read_text()
    assert "--index-url" not in text and "--find-links" not in text and "://" not in text


def test_the_readme_names_every_direct_dependency_with_its_floor() -> None:
    """Each row of README's dependency table is `name` | `>=floor` | why, matching pyproject."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Dependencies", 1)[1].split("\n## ", 1)[0]
    rows = {
        canonicalize_name(m.group(1)): m.group(2)
        for m in re.finditer(r"^\| `([a-z0-9_.-]+)` \| `>=([^`]+)` \| .+ \|$", section, re.M)
    }
    for req in DIRECT:
        floor = next(s.version for s in req.specifier if s.operator == ">=")
        assert rows.get(canonicalize_name(req.name)) == floor, (req.name, floor, rows.get(req.name))
