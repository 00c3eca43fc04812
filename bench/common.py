"""What every benchmark shares: statistics, the machine and versions, the JSON result file.

Each benchmark prints its figures and writes ``bench/results/<name>.json`` with the
commit, the machine and the library versions, so figures from different runs can be
told apart. Figures are medians over repeated rounds with their min and max; every
speed figure sits next to a floor measured in the same run (these machines are
shared and noisy: compare ratios, not absolute times across runs).
"""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PACKAGES = ("sqlalchemy", "aiosqlite", "asyncpg", "greenlet", "anthropic", "aiohttp", "alembic", "jsonschema")

#: The benchmarks' own PostgreSQL database (never another engineer's).
PG_URL_ENV = "SIGNOFF_BENCH_PG_URL"


def summary(samples: list[float]) -> dict[str, float]:
    """Median, min, max, p95 and count of ``samples``."""
    if not samples:
        return {"n": 0}
    ordered = sorted(samples)
    return {
        "median": statistics.median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "p95": ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))],
        "mean": statistics.fmean(ordered),
        "n": len(ordered),
    }


def over_rounds(values: list[float]) -> dict[str, float]:
    """A figure measured once per round: its median over the rounds, with min and max."""
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "rounds": len(values),
    }


def fmt(r: dict[str, float], unit: str = "µs", digits: int = 0) -> str:
    return f"{r['median']:.{digits}f} {unit} (min {r['min']:.{digits}f}, max {r['max']:.{digits}f})"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment() -> dict[str, Any]:
    """The commit, the machine and the versions a figure was measured with."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    versions["python"] = platform.python_version()
    versions["sqlite"] = sqlite3.sqlite_version
    return {
        "commit": _git("rev-parse", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "measured_at": datetime.now(UTC).isoformat(),
        "machine": {
            "platform": platform.platform(),
            "cpu": _cpu(),
            "cpus": os.cpu_count(),
            "loadavg": os.getloadavg(),
        },
        "versions": versions,
    }


def write_result(name: str, figures: dict[str, Any]) -> Path:
    """``bench/results/<name>.json`` with the environment beside the figures."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"benchmark": name, **environment(), **figures}, indent=2, default=str) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")
    return path
