"""A serving process holds what serving needs: a real ``create_app`` with the API, Slack, email
and the worker configured (what ``bench/memory.py`` measures) imports neither the mail
libraries a process needs only once mail arrives or leaves (lxml and inscriptis for HTML
bodies, dkimpy and dnspython for signatures, aiosmtplib for sending) nor the dataset models
that only seeding needs. The first HTML mail then loads them and reads it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.slack_kit import DEMO, SIGNOFF, env_for

ROOT = Path(__file__).resolve().parent.parent
DEFERRED = ("lxml", "inscriptis", "dkim", "dns.resolver", "aiosmtplib", "sandbox.dataset", "sandbox.io")

CHECK = """
import asyncio, json, sys
from bot.app import create_app
from bot.settings import Settings

DEFERRED = {deferred!r}


async def main():
    app = await create_app(Settings())
    try:
        names = [f.name for f in app.faces]
        before = [m for m in DEFERRED if m in sys.modules]
        from bot.email.bodies import html_to_text

        text = html_to_text("<p>Where is <b>O-1042</b>?</p><blockquote>old thread</blockquote>")
        after = [m for m in ("lxml", "inscriptis") if m in sys.modules]
        print(json.dumps({{"faces": names, "before": before, "text": text.strip(), "after": after}}))
    finally:
        await app.close()


asyncio.run(main())
"""


def test_a_serving_process_defers_the_mail_libraries_and_the_dataset(tmp_path: Path) -> None:
    env = env_for(tmp_path / "serve.db", anthropic="http://127.0.0.1:9", slack="http://127.0.0.1:9")
    env.update(
        SIGNOFF_EMAIL_SECRET="serving-imports-email-secret",
        SIGNOFF_SMTP_URL="smtp://127.0.0.1:2525",
        SIGNOFF_EMAIL_FROM="support@shop.example",
    )
    for cmd in (("db", "upgrade"), ("store", "load", str(DEMO))):  # seeded: start-up does not load the dataset
        subprocess.run([str(SIGNOFF), *cmd], env=env, cwd=ROOT, capture_output=True, check=True, timeout=120)
    code = CHECK.format(deferred=DEFERRED)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"api", "slack", "email"} <= set(seen["faces"]), seen
    assert seen["before"] == [], seen
    assert seen["text"] == "Where is O-1042?" and seen["after"] == ["lxml", "inscriptis"], seen


def test_serving_imports_neither_alembic_nor_the_shopify_documents() -> None:
    code = (
        "import sys\n"
        "import bot.app, bot.server, bot.cli.commands\n"
        "bot.cli.commands._parser()\n"
        "print(sorted(m for m in ('alembic', 'graphql', 'shopify.documents') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
