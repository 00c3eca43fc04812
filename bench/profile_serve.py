"""``signoff`` under cProfile, for a window: ``profile_serve.py OUT.prof serve --port N``.

SIGUSR1 starts the profiler, SIGUSR2 stops it and writes ``OUT.prof`` (so start-up and
imports stay out of the figures). Used by ``bench/concurrency.py --profile``.
"""

from __future__ import annotations

import cProfile
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.cli import main  # noqa: E402

if __name__ == "__main__":
    out, argv = sys.argv[1], sys.argv[2:]
    profiler = cProfile.Profile()

    def start(*_: Any) -> None:
        profiler.enable()

    def stop(*_: Any) -> None:
        profiler.disable()
        profiler.dump_stats(out)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    sys.exit(main(argv))
