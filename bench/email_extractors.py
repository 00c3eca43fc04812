"""Benchmark: reply extractors compared on our email fixtures (tests/fixtures/email/*.eml).

For each fixture, every extractor is given the same text: the body the bridge reads
(``text/plain`` when it is a real alternative, else the HTML as text by
``bodies.html_to_text``, which already drops ``blockquote``s), so only the text stage is
compared. Its reply is compared with the fixture's ``expect`` after the same tidying (lines
stripped, blank runs made one, ends trimmed). Prints the score of each extractor and the
fixtures it got wrong, and writes ``bench/results/email_extractors.json``.

- ``ours``: :func:`bot.email.replies.extract_reply`.
- ``mail-parser-reply``: ``EmailReplyParser(languages=<all it knows>).parse_reply(text)``.
- ``quotequail``: ``quote(text, quote_intro_line=True)``, the parts it does not quote kept
  (its ``quote_html`` on the raw HTML scores one fewer).

Neither library is a dependency of signoff. To re-run the comparison, install them into a
throwaway virtual environment and point ``--site`` at its ``site-packages`` (appended to
``sys.path``, so the project's own packages still win); a library that is not importable
is skipped with a note:

    python3 -m venv /tmp/extractors && /tmp/extractors/bin/pip install mail-parser-reply quotequail
    .venv/bin/python bench/email_extractors.py --site /tmp/extractors/lib/python3.11/site-packages
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from email import policy
from email.parser import BytesParser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import write_result  # noqa: E402
from bot.email.bodies import content, html_to_text  # noqa: E402
from bot.email.replies import extract_reply  # noqa: E402
from tests.email_kit import Fixture, all_fixtures  # noqa: E402

#: An extractor: the body's text → the reply it keeps.
Extractor = Callable[[str], str]


def body(raw: bytes) -> str:
    """The text the bridge reads: the first ``text/plain`` when it is not empty, else the
    first ``text/html`` as text."""
    msg = BytesParser(policy=policy.default).parsebytes(raw)
    found: dict[str, str] = {}
    for part in msg.walk():
        ctype = part.get_content_type()
        if ctype in ("text/plain", "text/html") and ctype not in found and part.get_filename() is None:
            found[ctype] = content(part)
    plain = found.get("text/plain")
    return plain if plain and plain.strip() else html_to_text(found.get("text/html", ""))


def tidy(text: str) -> str:
    out: list[str] = []
    for line in (raw.strip() for raw in text.replace("\r\n", "\n").replace("\xa0", " ").split("\n")):
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()


def mail_parser_reply() -> Extractor | None:
    try:
        from mailparser_reply import EmailReplyParser
        from mailparser_reply.constants import MAIL_LANGUAGES
    except ImportError:
        return None
    parser = EmailReplyParser(languages=list(MAIL_LANGUAGES))

    def run(text: str) -> str:
        return str(parser.parse_reply(text) or "")

    return run


def quotequail() -> Extractor | None:
    try:
        import quotequail as qq
    except ImportError:
        return None

    def run(text: str) -> str:
        return "\n".join(part for keep, part in qq.quote(text, quote_intro_line=True) if keep)

    return run


def score(extract: Extractor, fixtures: list[Fixture]) -> list[str]:
    """The names of the fixtures ``extract`` gets wrong (an exception counts as wrong)."""
    wrong: list[str] = []
    for fixture in fixtures:
        try:
            got = tidy(extract(body(fixture.raw)))
        except Exception:  # noqa: BLE001 - a library failing on a fixture scores it wrong
            got = None
        if got != tidy(fixture.expect):
            wrong.append(fixture.name)
    return wrong


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--site", action="append", default=[], help="a site-packages holding the libraries")
    parser.add_argument("--no-write", action="store_true", help="print only, no bench/results file")
    args = parser.parse_args()
    sys.path.extend(args.site)
    fixtures = all_fixtures()
    candidates: dict[str, Extractor | None] = {
        "ours": extract_reply,
        "mail-parser-reply": mail_parser_reply(),
        "quotequail": quotequail(),
    }
    figures: dict[str, object] = {"fixtures": len(fixtures), "scores": {}, "wrong": {}, "skipped": []}
    for name, extract in candidates.items():
        if extract is None:
            print(f"  {name:<18} skipped: not importable (see this script's docstring to install it)")
            figures["skipped"].append(name)  # type: ignore[attr-defined]
            continue
        wrong = score(extract, fixtures)
        right = len(fixtures) - len(wrong)
        figures["scores"][name] = right  # type: ignore[index]
        figures["wrong"][name] = wrong  # type: ignore[index]
        print(f"  {name:<18} {right}/{len(fixtures)}  wrong: {', '.join(w[:3] for w in wrong) or '-'}")
    if not args.no_write:
        write_result("email_extractors", figures)


if __name__ == "__main__":
    main()
