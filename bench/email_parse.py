"""Benchmark: the time the email webhook spends reading one mail.

Everything the webhook runs for one mail — the HMAC check, reading the provider's JSON,
normalising it, the sender verdict and the reply extraction — timed with
``time.perf_counter`` for bodies built to hurt backtracking regular expressions (the old
quote patterns took about 3 s at 224 KB), for a real reply above a 200 KB quoted history
(plain and HTML), for 200 KB of short lines that each end in ':' (every one a candidate
quote header), and for a raw MIME mail (Mailgun ``body-mime``) with a 25 MB attachment.
Prints milliseconds per shape, wall-clock and CPU (``time.process_time``: the CPU is shared
and wall-clock times swing with the load; the CPU figure is the one to compare), and writes
``bench/results/email_parse.json``.

    .venv/bin/python bench/email_parse.py [--size-kib 1024] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from email.message import EmailMessage
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import write_result  # noqa: E402
from bot.email.parsing import parse_inbound, sign, signature_ok  # noqa: E402
from bot.email.replies import extract_reply  # noqa: E402
from bot.email.senders import sender_check  # noqa: E402

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
    "200 KB quoted history": lambda n: "Still waiting, any news?\n\n" + _history(200 * 1024),
    "200 KB short lines ':'": lambda n: _fill("a:\n", 200 * 1024),
    "200 KB 'x 1:' lines": lambda n: _fill("x 1:\n", 200 * 1024),
    "200 KB '1 a@b>:' headers": lambda n: _fill("1 a@b>:\n", 200 * 1024),
}


def _history(size: int) -> str:
    """A long thread as clients quote it: headers, nested quotes, Outlook blocks."""
    unit = (
        "On Tue, 3 Jun 2025 at 10:00, Fernway Support <support@fernway.example> wrote:\n"
        "> Hello Maya, your order O-1042 shipped on Monday.\n>> Am 2. Juni 2025 schrieb Maya <m@x.example>:\n"
        ">> Wo ist mein Paket?\n> ________________________________\n> From: Fernway\n> Sent: Monday\n"
    )
    return _fill(unit, size)


def webhook_work(raw: bytes, stamp: str, signature: str) -> int:
    """The synchronous part of ``POST /email/inbound`` for one body."""
    assert signature_ok(SECRET, raw, signature, stamp, now=int(stamp))
    mail = parse_inbound("application/json", "application/json", raw)
    sender_check(mail)
    return len(extract_reply(mail.text))


def measure(fn: Callable[[], object], repeat: int) -> dict[str, float]:
    """Best wall-clock and best CPU milliseconds over ``repeat`` runs."""
    wall, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    return {"wall_ms": round(wall * 1000, 1), "cpu_ms": round(cpu * 1000, 1)}


def _report(figures: dict[str, dict[str, float]], name: str, size: int, ms: dict[str, float], note: str = "") -> None:
    figures[name] = {"kib": round(size / 1024), **ms}
    print(f"  {name:<28} {size / 1024:8.0f} KiB  {ms['wall_ms']:8.1f} ms  {ms['cpu_ms']:8.1f} ms CPU{note}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-kib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="print only, no bench/results file")
    args = parser.parse_args()
    size = args.size_kib * 1024
    stamp = str(int(time.time()))
    figures: dict[str, dict[str, float]] = {}
    print(f"email webhook, {args.size_kib} KiB bodies, best of {args.repeat} (ms of event-loop time)")
    for name, make in SHAPES.items():
        text = make(size)
        raw = json.dumps({"from": "maya.chen@example.com", "subject": "x", "text": text, "dmarc": "pass"}).encode()
        signature = sign(SECRET, raw, stamp)
        _report(figures, name, len(raw), measure(partial(webhook_work, raw, stamp, signature), args.repeat))
    html = "<div>Still waiting</div>" + _fill(
        "<blockquote>On Tue, x wrote:<div>old text</div></blockquote>", 200 * 1024
    )
    raw = json.dumps({"from": "maya.chen@example.com", "subject": "x", "html": html}).encode()
    signature = sign(SECRET, raw, stamp)
    _report(figures, "200 KB quoted HTML", len(raw), measure(partial(webhook_work, raw, stamp, signature), args.repeat))
    big_mime(figures, stamp, max(1, args.repeat // 3))
    if not args.no_write:
        write_result("email_parse", {"size_kib": args.size_kib, "repeat": args.repeat, "shapes": figures})


def big_mime(figures: dict[str, dict[str, float]], stamp: str, repeat: int) -> None:
    """A Mailgun ``body-mime`` form with a 25 MB attachment: parsed, attachment dropped."""
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "maya.chen@example.com", "support@fernway.example", "Photos"
    msg.set_content("The photos of the damage are attached.")
    msg.add_attachment(os.urandom(25 * 1024 * 1024), maintype="application", subtype="octet-stream", filename="a.zip")
    mime = msg.as_bytes()
    b = "BENCHbound"
    head = f'--{b}\r\nContent-Disposition: form-data; name="body-mime"\r\n\r\n'.encode()
    raw = head + mime + f"\r\n--{b}--\r\n".encode()
    ctype = f"multipart/form-data; boundary={b}"
    signature = sign(SECRET, raw, stamp)

    def work() -> None:
        assert signature_ok(SECRET, raw, signature, stamp, now=int(stamp))
        mail = parse_inbound("multipart/form-data", ctype, raw)
        assert mail.attachments == ("a.zip",) and extract_reply(mail.text)

    _report(figures, "25 MB attachment (MIME)", len(raw), measure(work, repeat), "  (in a thread, not on the loop)")


if __name__ == "__main__":
    main()
