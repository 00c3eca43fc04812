"""Every fixture of tests/fixtures/email/ (replies as Gmail, Outlook, Apple Mail, Thunderbird,
Yahoo, Yandex, Mail.ru and phones write them: text, HTML-only, multipart, quoted-printable,
base64, ISO-8859-1/2, Shift_JIS, ISO-2022-JP, KOI8-R, GB18030; fifteen languages) goes through
``POST /email/inbound`` in each provider's shape, and the model must receive exactly the
reply a person reads (the fixture's ``expect``)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from agent.llm.base import ModelRequest
from agent.llm.testing import FunctionModel
from bot.email.bridge import EmailConfig
from storage.db import Database
from tests.api_kit import EMAIL_SECRET, client_for
from tests.email_kit import SHAPES, Fixture, all_fixtures
from tests.support import seeded
from tests.test_email_bridge import deliver

FIXTURES = all_fixtures()


def test_the_fixture_set_covers_the_clients_encodings_and_languages() -> None:
    raw = b"\n".join(f.raw.lower() for f in FIXTURES)
    assert len(FIXTURES) >= 60
    assert len({f.language for f in FIXTURES}) >= 8
    for client in ("Gmail", "Outlook", "Apple Mail", "Thunderbird", "Yahoo", "Yandex", "Mail.ru", "iOS", "Android"):
        assert any(client in f.client for f in FIXTURES), client
    for marker in (b"text/html", b"multipart/alternative", b"quoted-printable", b"base64", b"iso-8859-1",
                   b"shift_jis", b"iso-2022-jp"):  # fmt: skip
        assert marker in raw, marker
    assert any(b"text/plain" not in f.raw.lower() for f in FIXTURES)  # HTML-only mails


def model_texts() -> tuple[FunctionModel, list[str]]:
    """A model that records the customer's text of each turn and answers briefly."""
    seen: list[str] = []

    def answer(request: ModelRequest) -> str:
        for message in reversed(request.messages):
            texts = [b.get("text", "") for b in message.content if message.role == "user" and b.get("type") == "text"]
            if texts:
                seen.append(texts[-1])
                break
        return "Thanks, we're on it."

    return FunctionModel(answer), seen


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.name for f in FIXTURES])
async def test_the_model_reads_the_reply_a_person_reads(db: Database, fixture: Fixture) -> None:
    model, seen = model_texts()
    h = await seeded(db, model)
    async with client_for(h, email=EmailConfig(secret=EMAIL_SECRET, txt_lookup=lambda _name: None)) as client:
        for shape, build in SHAPES.items():
            # Each shape is another delivery (its own Message-ID), not a redelivery.
            raw = fixture.raw.replace(b"Message-ID: <", f"Message-ID: <{shape}.".encode(), 1)
            ctype, body = build(raw)
            status, answer = await deliver(client, body, ctype=ctype)
            assert (status, answer.get("status")) == (200, "accepted"), (shape, answer)
    got: dict[str, Any] = dict(zip(SHAPES, seen, strict=True))
    assert got == {shape: fixture.expect for shape in SHAPES}, fixture.client


def test_the_extractor_comparison_reruns_and_skips_a_missing_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/email_extractors.py scores our extractor on every fixture; a library that is not
    installed (neither is a dependency) is skipped, not an error."""
    from bench import email_extractors as bench
    from bot.email.replies import extract_reply

    assert bench.score(extract_reply, FIXTURES) == []
    assert bench.score(lambda text: text, FIXTURES)  # the unstripped body is wrong somewhere
    monkeypatch.setitem(sys.modules, "quotequail", None)
    monkeypatch.setitem(sys.modules, "mailparser_reply", None)
    assert bench.quotequail() is None and bench.mail_parser_reply() is None
