"""What a policy file changes against another: key paths with old and new values, and a unified diff."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from agent.policy import Policy


@dataclass(frozen=True, kw_only=True)
class Change:
    """One key path whose value differs (``rollout.channels.slack.customer``)."""

    path: str
    old: Any
    new: Any

    def line(self) -> str:
        if isinstance(self.old, list) and isinstance(self.new, list):
            gone = [v for v in self.old if v not in self.new]
            added = [v for v in self.new if v not in self.old]
            return f"{self.path}: " + ", ".join([*(f"+{v}" for v in added), *(f"-{v}" for v in gone)])
        return f"{self.path}: {_show(self.old)} -> {_show(self.new)}"


_ABSENT = object()


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for key in sorted(value, key=str):
            _flatten(value[key], f"{prefix}.{key}" if prefix else str(key), out)
        return
    out[prefix] = sorted(value, key=str) if isinstance(value, list | set | frozenset) else value


def changes(old: Policy, new: Policy) -> list[Change]:
    """Every key path whose value differs between ``old`` and ``new`` (defaults filled in), sorted."""
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    _flatten(old.model_dump(mode="python"), "", a)
    _flatten(new.model_dump(mode="python"), "", b)
    paths = sorted(set(a) | set(b))
    return [
        Change(path=p, old=a.get(p, _ABSENT), new=b.get(p, _ABSENT))
        for p in paths
        if a.get(p, _ABSENT) != b.get(p, _ABSENT)
    ]


def unified_diff(old_text: str, new_text: str, *, old_name: str, new_name: str) -> str:
    """A unified diff of the two YAML texts."""
    return "".join(
        difflib.unified_diff(
            old_text.splitlines(keepends=True), new_text.splitlines(keepends=True), fromfile=old_name, tofile=new_name
        )
    )
