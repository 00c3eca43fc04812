"""Trace replay: diff tool selections between two models or prompt versions.

``signoff eval --json out.json`` writes ``out.traces.jsonl``: one line per case
run with the tools the model proposed (name and arguments). :func:`replay`
plays the same cases again with another model (or the current prompt version)
and prints, per case, a unified diff of the two tool sequences. Exit code 1
when any sequence differs, so a prompt change that changes behaviour is seen.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.evaluation.suite import Suite, SuiteError, load_suite
from agent.prompt import PROMPT_VERSION


@dataclass(frozen=True, kw_only=True)
class Recorded:
    """One recorded case run."""

    suite: str
    suite_file: str
    case: str
    model: str
    prompt_version: str
    tools: list[tuple[str, dict[str, Any]]]


@dataclass(frozen=True, kw_only=True)
class CaseDiff:
    suite: str
    case: str
    diff: list[str]

    @property
    def same(self) -> bool:
        return not self.diff


def read_traces(path: Path) -> list[Recorded]:
    """The first recorded run of each case in a ``.traces.jsonl`` file."""
    out: dict[tuple[str, str], Recorded] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            rec = Recorded(
                suite=row["suite"],
                suite_file=row["suite_file"],
                case=row["case"],
                model=row["model"],
                prompt_version=row.get("prompt_version", "?"),
                tools=[(t, dict(a)) for t, a in row["tools"]],
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise SuiteError([f"{path}:{n}: not a trace line ({exc})"]) from None
        out.setdefault((rec.suite, rec.case), rec)
    return list(out.values())


#: Ids minted fresh on every run (store records, runtime objects): compared by kind, not value.
_MINTED = re.compile(r"^(?:(R|RT|M|P|INV|O)-[0-9a-f]{10}|(apr|cnf|prop|run|conv)_[0-9a-f]{20})$")


def _normalise(value: Any) -> Any:
    if isinstance(value, str) and (m := _MINTED.match(value)):
        return f"<{m.group(1) or m.group(2)} id>"
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


def render(tools: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """One line per call: ``name {"arg": ...}`` with sorted keys and minted ids masked, so equal calls
    print equal."""
    return [f"{name} {json.dumps(_normalise(args), sort_keys=True, ensure_ascii=False)}" for name, args in tools]


def diff_tools(
    before: list[tuple[str, dict[str, Any]]], after: list[tuple[str, dict[str, Any]]], *, a: str, b: str
) -> list[str]:
    return list(difflib.unified_diff(render(before), render(after), fromfile=a, tofile=b, lineterm="", n=1))


async def replay_traces(records: list[Recorded], *, model: str, settings: Any = None) -> list[CaseDiff]:
    """Re-run every recorded case once with ``model`` and diff the tool sequences."""
    from agent.evaluation.runner import EvalOptions, run_suites

    suites: dict[str, Suite] = {}
    for rec in records:
        if rec.suite_file not in suites:
            suites[rec.suite_file] = load_suite(rec.suite_file)
    wanted = {(r.suite, r.case) for r in records}
    narrowed = [
        s.model_copy(update={"cases": [c for c in s.cases if (s.suite, c.id) in wanted]}) for s in suites.values()
    ]
    report = await run_suites([s for s in narrowed if s.cases], EvalOptions(model=model, runs=1), settings=settings)
    now = {(c.suite, c.case): (c.model, list(c.runs[0].tools)) for c in report.cases}
    diffs = []
    for rec in records:
        new_model, tools = now.get((rec.suite, rec.case), (model, []))
        diffs.append(
            CaseDiff(
                suite=rec.suite,
                case=rec.case,
                diff=diff_tools(
                    rec.tools, tools, a=f"{rec.model} ({rec.prompt_version})", b=f"{new_model} ({PROMPT_VERSION})"
                ),
            )
        )
    return diffs


async def replay(path: Path, *, model: str, settings: Any = None) -> int:
    """Print the tool-selection differences for every recorded case; 1 when any differ."""
    records = read_traces(path)
    diffs = await replay_traces(records, model=model, settings=settings)
    changed = [d for d in diffs if not d.same]
    for d in diffs:
        print(f"{'CHANGED' if d.diff else 'same   '} {d.suite}/{d.case}")
        for line in d.diff:
            print(f"    {line}")
    print(f"replayed {len(diffs)} case(s) from {path} with {model}: {len(changed)} changed tool sequence(s)")
    return 1 if changed else 0


__all__ = ["CaseDiff", "Recorded", "diff_tools", "read_traces", "replay", "replay_traces"]
