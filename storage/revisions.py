"""The migration graph as start-up needs it, read without Alembic.

A process that serves only asks "is the database at this release's heads?". Alembic's
script directory answers that by importing every revision module, and importing Alembic
itself costs about 8 MB of resident memory that a server never uses again. This module
reads each version file's header — the literal ``revision`` and ``down_revision`` every
Alembic revision declares — and the database's ``alembic_version`` rows. A contract test
(``tests/test_revisions.py``) holds it to Alembic's own answer for every source.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, inspect, text


class RevisionFileError(ValueError):
    """A version file whose ``revision`` or ``down_revision`` is not a literal."""


@dataclass(frozen=True)
class Graph:
    """Every revision of the given version folders, and which of them are heads."""

    known: frozenset[str]
    heads: tuple[str, ...]


def graph(folders: Iterable[Path]) -> Graph:
    """The revisions declared in ``folders`` (``*.py``, as Alembic reads them) and their heads."""
    known: set[str] = set()
    parents: set[str] = set()
    for folder in folders:
        for path in sorted(folder.glob("*.py")):
            if path.name.startswith("_"):
                continue
            revision, down = _header(path)
            known.add(revision)
            parents.update(down)
    return Graph(known=frozenset(known), heads=tuple(sorted(known - parents)))


def _header(path: Path) -> tuple[str, tuple[str, ...]]:
    values: dict[str, object] = {}
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in ("revision", "down_revision"):
            try:
                values[target.id] = ast.literal_eval(value)
            except ValueError:
                raise RevisionFileError(f"{path}: {target.id} is not a literal") from None
    revision, down = values.get("revision"), values.get("down_revision")
    if not isinstance(revision, str):
        raise RevisionFileError(f'{path}: no literal `revision = "…"`')
    if down is None:
        return revision, ()
    if isinstance(down, str):
        return revision, (down,)
    if isinstance(down, tuple | list) and all(isinstance(d, str) for d in down):
        return revision, tuple(down)
    raise RevisionFileError(f"{path}: down_revision must be a string, a tuple of strings or None")


def current(conn: Connection) -> tuple[tuple[str, ...], bool]:
    """The database's recorded revisions (sorted) and whether the runtime's tables exist."""
    names = inspect(conn).get_table_names()
    at: tuple[str, ...] = ()
    if "alembic_version" in names:
        at = tuple(sorted(row[0] for row in conn.execute(text("SELECT version_num FROM alembic_version"))))
    return at, "tool_executions" in names
