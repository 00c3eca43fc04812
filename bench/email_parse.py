"""Benchmark: event-loop time the email webhook spends on a 1 MiB adversarial mail.

Everything the webhook runs synchronously on the event loop for one mail — the HMAC check,
reading the provider's JSON, normalising it, the sender verdict and quote stripping — timed
with ``time.perf_counter`` for bodies built to hurt backtracking regular expressions (the
old quote patterns took about 3 s at 224 KB). Prints milliseconds per shape.

    .venv/bin/python bench/email_parse.py [--size-kib 1024] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.email.parsing import parse_inbound, sender_check, sign, signature_ok, strip_quoted  # noqa: E402

SECRET = "bench-secret"


def _fill(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


#: Bodies that made the old patterns backtrack (one long line) or that are many lines.
SHAPES: dict[str, Callable[[int], str]] = {
    "Am … schrieb (one line)": lambda n: "Am " + _fill("schrieb ", n),
    "On … no wrote (one line)": lambda n: "On " + _fill("x", n) + " wrot",
    "Le … a écrit (one line)": lambda n: "Le " + _fill("a écrit ", n // 2),
    "quoted lines": lambda n: _fill("> quoted text of an earlier mail\n", n),
    "short lines 'On'": lambda n: _fill("On\n", n),
    "whitespace then x": lambda n: _fill(" ", n) + "x",
    "plain prose": lambda n: _fill("Where is my order? It was due last week. ", n),
}


def webhook_work(raw: bytes, stamp: str, signature: str) -> int:
    """The synchronous part of ``POST /email/inbound`` for one body."""
    assert signature_ok(SECRET, raw, signature, stamp, now=int(stamp))
    mail = parse_inbound("application/json", "application/json", raw)
    sender_check(mail)
    return len(strip_quoted(mail.text))


def measure(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-kib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    size = args.size_kib * 1024
    stamp = str(int(time.time()))
    print(f"email webhook, {args.size_kib} KiB bodies, best of {args.repeat} (ms of event-loop time)")
    for name, make in SHAPES.items():
        text = make(size)
        raw = json.dumps({"from": "maya.chen@example.com", "subject": "x", "text": text, "dmarc": "pass"}).encode()
        signature = sign(SECRET, raw, stamp)
        ms = measure(lambda raw=raw, signature=signature: webhook_work(raw, stamp, signature), args.repeat)
        print(f"  {name:<28} {len(raw) / 1024:8.0f} KiB  {ms:8.1f} ms")


if __name__ == "__main__":
    main()
