"""``/healthz`` while a stranger sends 40,000-character DMs built to make parsers backtrack.

A real ``signoff serve`` (worker in process, so the turns run on the same event loop as the
routes) gets each DM of ``tests/stall_kit.DMS`` (``link`` and a run of ``a@.``, unclosed
mentions, ``<`` and spaces, the runtime's own tag…), ``--rounds`` times, signed as Slack
signs them. ``GET /healthz`` is timed every 10 ms from the first DM until the last reply.
Reported: p50, p99 and max of ``/healthz``. The issue's target: under 100 ms throughout
(before the fix one 1,407-character DM held it for 4.4 s).

    .venv/bin/python bench/stall.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import write_result  # noqa: E402
from tests.stall_kit import healthz_during  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="how many times every DM is sent")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="signoff-stall-"))
    try:
        figures = asyncio.run(healthz_during(tmp, rounds=args.rounds))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"{figures['dms']} DMs of {figures['dm_chars']} characters: /healthz p50 {figures['healthz_p50_ms']:.1f} ms, "
        f"p99 {figures['healthz_p99_ms']:.1f} ms, max {figures['healthz_max_ms']:.1f} ms "
        f"({figures['healthz_n']} probes)"
    )
    write_result("stall", figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
