"""pass^k reports: a table for people, JSON for machines, JSON lines of tool selections for replay.

A case passes^k when all k runs pass; a dimension passes^k for a case when it
held in all k runs. Harmful outcomes are counted over every run of every case
(the adversarial suite's headline number, which must be 0).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.evaluation.judge import DIMENSIONS, RunVerdict
from agent.prompt import PROMPT_VERSION

SHORT = {"tool_choice": "tools", "arguments": "args", "end_state": "state", "safety": "safety", "honesty": "honesty"}


@dataclass(frozen=True, kw_only=True)
class CaseReport:
    suite: str
    suite_file: str
    case: str
    model: str
    runs: tuple[RunVerdict, ...]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.runs)

    def dim_runs(self, dim: str) -> int:
        return sum(r.ok(dim) for r in self.runs)

    @property
    def harmful(self) -> int:
        return sum(len(r.harmful) for r in self.runs)

    def problems(self) -> list[str]:
        """Distinct problems over the runs, tagged with their dimension."""
        seen: dict[str, None] = {}
        for r in self.runs:
            for dim, items in r.problems.items():
                for p in items:
                    seen.setdefault(f"[{SHORT[dim]}] {p}", None)
        return list(seen)


@dataclass(frozen=True, kw_only=True)
class Report:
    model: str
    k: int
    cases: tuple[CaseReport, ...]
    seconds: float
    #: Cases not run: (suite, case, the tools they need that the shop's backend does not offer).
    not_offered: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    @property
    def harmful_outcomes(self) -> int:
        return sum(c.harmful for c in self.cases)

    @property
    def exit_code(self) -> int:
        return 0 if all(c.passed for c in self.cases) and not self.harmful_outcomes else 1

    def suites(self) -> list[str]:
        return list(dict.fromkeys(c.suite for c in self.cases))

    def table(self) -> str:
        """The human report: one row per case, failures explained, totals per suite."""
        head = (
            f"{'suite':<12} {'case':<50} {'pass^' + str(self.k):<7} "
            + " ".join(f"{SHORT[d]:>7}" for d in DIMENSIONS)
            + f" {'harm':>5}"
        )
        lines = [head, "-" * len(head)]
        for c in self.cases:
            lines.append(
                f"{c.suite:<12} {c.case[:50]:<50} {'PASS' if c.passed else 'FAIL':<7} "
                + " ".join(f"{c.dim_runs(d)}/{self.k}".rjust(7) for d in DIMENSIONS)
                + f" {c.harmful:>5}"
            )
        failed = [c for c in self.cases if not c.passed]
        if failed:
            lines += ["", "failures:"]
            for c in failed:
                lines.append(f"  {c.suite}/{c.case} ({c.model}):")
                lines += [f"    {p}" for p in c.problems()[:8]]
        lines.append("")
        for s in self.suites():
            rows = [c for c in self.cases if c.suite == s]
            dims = " · ".join(
                f"{d.replace('_', ' ')} {sum(c.dim_runs(d) == self.k for c in rows)}/{len(rows)}" for d in DIMENSIONS
            )
            lines.append(
                f"{s}: {sum(c.passed for c in rows)}/{len(rows)} cases pass^{self.k} · {dims} · "
                f"harmful outcomes {sum(c.harmful for c in rows)}"
            )
        total = len(self.cases)
        if self.not_offered:
            lines.append(f"not applicable to this shop ({len(self.not_offered)} cases need tools its backend lacks):")
            lines += [f"  {s}/{c}: {', '.join(t)}" for s, c, t in self.not_offered]
        lines.append(
            f"overall: {sum(c.passed for c in self.cases)}/{total} cases pass^{self.k} with model "
            f"{self.model}, k={self.k}, harmful outcomes {self.harmful_outcomes}, "
            f"{self.seconds:.1f}s"
        )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "k": self.k,
            "prompt_version": PROMPT_VERSION,
            "seconds": round(self.seconds, 3),
            "harmful_outcomes": self.harmful_outcomes,
            "passed": self.exit_code == 0,
            "not_offered": [{"suite": s, "case": c, "tools": list(t)} for s, c, t in self.not_offered],
            "suites": {
                s: {
                    "cases": sum(c.suite == s for c in self.cases),
                    "passed": sum(c.passed for c in self.cases if c.suite == s),
                }
                for s in self.suites()
            },
            "cases": [
                {
                    "suite": c.suite,
                    "case": c.case,
                    "model": c.model,
                    "pass_k": c.passed,
                    "dimensions": {
                        d: {"runs_passed": c.dim_runs(d), "pass_k": c.dim_runs(d) == self.k} for d in DIMENSIONS
                    },
                    "harmful": [str(f) for r in c.runs for f in r.harmful],
                    "problems": c.problems(),
                    "runs": [
                        {"passed": r.passed, "tools": [[t, a] for t, a in r.tools], "reply": r.final_reply}
                        for r in c.runs
                    ],
                }
                for c in self.cases
            ],
        }

    def write_json(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2, ensure_ascii=False, default=str) + "\n", "utf-8")

    def write_traces(self, path: Path) -> None:
        """One JSON line per case run: the tool selections ``replay`` compares against."""
        with path.open("w", encoding="utf-8") as f:
            for c in self.cases:
                for i, r in enumerate(c.runs):
                    f.write(
                        json.dumps(
                            {
                                "suite": c.suite,
                                "suite_file": c.suite_file,
                                "case": c.case,
                                "run": i,
                                "model": c.model,
                                "prompt_version": PROMPT_VERSION,
                                "tools": [[t, a] for t, a in r.tools],
                            },
                            ensure_ascii=False,
                            default=str,
                        )
                        + "\n"
                    )


__all__ = ["CaseReport", "Report"]
