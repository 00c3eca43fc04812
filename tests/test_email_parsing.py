"""The email bridge's pure parts: provider shapes → one InboundEmail, the HMAC signature, the
SPF/DKIM verdicts, quoted-text stripping, answers by code, and the SMTP URL."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email import message_from_bytes
from urllib.parse import urlencode

import pytest

from bot.email.bodies import MAX_HTML, MAX_PART, read_mime
from bot.email.parsing import InboundEmail, normalise, parse_inbound, sign, signature_ok, single_address
from bot.email.senders import failed_check, sender_check
from bot.email.smtp import OutgoingEmail, SmtpConfig, compose, conversation_of, new_message_id, reply_subject
from bot.email.turns import answer_by_code
from storage.records import Confirmation

SENDGRID_HEADERS = (
    "Received: by mx.sendgrid.net\r\nMessage-ID: <CAF=abc@mail.gmail.com>\r\n"
    "In-Reply-To: <signoff.conv_1.abcdef012345@fernway.example>\r\n"
    "References: <root@mail.gmail.com> <signoff.conv_1.abcdef012345@fernway.example>\r\n"
    "Subject: Re: Order O-1042\r\nFrom: Maya Chen <maya.chen@example.com>\r\n"
)


def multipart(fields: dict[str, str], boundary: str = "xYzZY") -> tuple[str, bytes]:
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n')
    parts.append(f"--{boundary}--\r\n")
    return f"multipart/form-data; boundary={boundary}", "".join(parts).encode()


def test_sendgrid_multipart_shape() -> None:
    ctype, body = multipart(
        {
            "from": "Maya Chen <maya.chen@example.com>",
            "to": "support@fernway.example",
            "subject": "Re: Order O-1042",
            "text": "Yes please\n\n> old",
            "headers": SENDGRID_HEADERS,
            "envelope": json.dumps({"from": "maya.chen@example.com", "to": ["support@fernway.example"]}),
            "SPF": "pass",
            "dkim": "{@example.com : pass}",
            "charsets": json.dumps({"text": "utf-8"}),
        }
    )
    mail = parse_inbound("multipart/form-data", ctype, body)
    assert mail == InboundEmail(
        sender="maya.chen@example.com",
        recipient="support@fernway.example",
        subject="Re: Order O-1042",
        text="Yes please\n\n> old",
        message_id="<CAF=abc@mail.gmail.com>",
        in_reply_to="<signoff.conv_1.abcdef012345@fernway.example>",
        references=("<root@mail.gmail.com>", "<signoff.conv_1.abcdef012345@fernway.example>"),
        spf="pass",
        dkim="{@example.com : pass}",
    )


def test_sendgrid_attachments_are_ignored_and_charsets_honoured() -> None:
    boundary = "b1"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="from"\r\n\r\nmaya.chen@example.com\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="text"\r\n\r\n'
        ).encode()
        + "Grüße".encode("latin-1")
        + (
            f'\r\n--{boundary}\r\nContent-Disposition: form-data; name="charsets"\r\n\r\n'
            '{"text": "iso-8859-1"}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="attachment1"; filename="a.exe"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\nMZ\x00\x01\r\n--{boundary}--\r\n"
        ).encode()
    )
    mail = parse_inbound("multipart/form-data", f"multipart/form-data; boundary={boundary}", body)
    assert mail.text == "Grüße" and mail.sender == "maya.chen@example.com"


def test_mailgun_form_shape() -> None:
    form = {
        "sender": "maya.chen@example.com",
        "recipient": "support@fernway.example",
        "subject": "Where is it?",
        "body-plain": "Where is O-1042?",
        "Message-Id": "<mg-1@example.com>",
        "In-Reply-To": "<prev@example.com>",
        "References": "<root@example.com> <prev@example.com>",
        "X-Mailgun-Spf": "Pass",
        "X-Mailgun-Dkim-Check-Result": "Pass",
        "message-headers": json.dumps([["From", "Maya <maya.chen@example.com>"], ["Subject", "Where is it?"]]),
    }
    mail = parse_inbound("application/x-www-form-urlencoded", "", urlencode(form).encode())
    assert (mail.sender, mail.message_id, mail.in_reply_to, mail.references) == (
        "maya.chen@example.com",
        "<mg-1@example.com>",
        "<prev@example.com>",
        ("<root@example.com>", "<prev@example.com>"),
    )
    assert mail.text == "Where is O-1042?" and failed_check(mail) is None


def test_postmark_style_json() -> None:
    mail = normalise(
        {
            "From": "maya.chen@example.com",
            "Subject": "Hi",
            "TextBody": "Hello",
            "Headers": [
                {"Name": "Message-ID", "Value": "<pm-1@example.com>"},
                {"Name": "Authentication-Results", "Value": "mx; dkim=pass header.d=example.com; dmarc=pass"},
            ],
        }
    )
    assert mail.message_id == "<pm-1@example.com>" and mail.text == "Hello"
    # Verdicts inside the message's own headers are the sender's words: never read.
    assert (mail.spf, mail.dkim, mail.dmarc) == (None, None, None)
    assert sender_check(mail).verdict == "unverified"


@pytest.mark.parametrize(
    "fields,reason",
    [
        ({}, "no sender"),
        ({"from": 5}, "must be a string"),
        ({"from": "not an address"}, "exactly one address"),
        ({"from": "a@b.example, maya.chen@example.com"}, "exactly one address"),
        ({"from": '"maya.chen@example.com" <evil@attacker.example>'}, "exactly one address"),
        ({"from": "maya.chen@example.com", "text": ["x"]}, "must be a string"),
    ],
)
def test_unreadable_mail_is_a_value_error(fields: dict[str, object], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        normalise(fields)


def test_unknown_content_type_is_a_lookup_error() -> None:
    with pytest.raises(LookupError):
        parse_inbound("text/plain", "text/plain", b"hi")


def test_display_names_and_case() -> None:
    assert single_address("Maya Chen <Maya.Chen@Example.com>") == "Maya.Chen@Example.com"
    assert single_address("maya.chen@example.com (Maya)") == "maya.chen@example.com"


@pytest.mark.parametrize(
    "spf,dkim,dmarc,verdict",
    [
        ("pass", None, None, "unverified"),  # SPF checks the envelope, never the From: address
        ("fail", None, None, "failed"),
        ("SoftFail", None, None, "failed"),
        ("none", None, None, "unverified"),
        (None, None, None, "unverified"),
        (None, None, "pass", "verified"),
        ("fail", None, "pass", "verified"),  # forwarded: SPF breaks, DMARC still aligns
        (None, None, "none", "unverified"),
        (None, None, "fail", "unverified"),
        (None, "{@example.com : pass}", "fail", "unverified"),
        (None, "{@example.com : pass}", None, "verified"),
        (None, "{@EXAMPLE.com : pass}", None, "verified"),
        (None, "{@example.com : neutral}", None, "unverified"),
        (None, "{@example.com : fail}", None, "failed"),
        (None, "{@example.com : fail, @sendgrid.net : pass}", None, "failed"),
        (None, "{@sendgrid.net : pass}", None, "unverified"),  # someone else's signature
        (None, "{@mail.example.com : pass}", None, "unverified"),  # not the From: domain
        (None, "{@sendgrid.net : pass, @other.example : fail}", None, "unverified"),
        (None, "Fail", None, "failed"),
        (None, "Pass", None, "unverified"),  # a bare pass names no domain: not aligned
        (None, "none", None, "unverified"),
    ],
)
def test_sender_verdicts(spf: str | None, dkim: str | None, dmarc: str | None, verdict: str) -> None:
    """Served as the customer only on a DMARC pass or a DKIM pass by the From: domain itself."""
    fields = {"from": "maya.chen@example.com", "SPF": spf, "dkim": dkim, "dmarc": dmarc}
    mail = normalise({k: v for k, v in fields.items() if v is not None})
    assert sender_check(mail).verdict == verdict
    assert failed_check(mail) == (sender_check(mail).reason if verdict == "failed" else None)


def test_verdicts_come_from_provider_fields_not_message_headers() -> None:
    """A forged Authentication-Results or Received-SPF inside the mail changes nothing."""
    forged = (
        "Message-ID: <x@attacker.example>\r\nAuthentication-Results: mx.google.com; dkim=pass "
        "header.d=example.com; spf=pass; dmarc=pass\r\nReceived-SPF: pass\r\nDMARC: pass\r\n"
    )
    mail = normalise({"from": "maya.chen@example.com", "headers": forged, "text": "hi"})
    assert (mail.spf, mail.dkim, mail.dmarc) == (None, None, None)
    assert sender_check(mail).verdict == "unverified"


def test_signature_binds_body_and_timestamp() -> None:
    body, now = b'{"from": "x"}', 1_700_000_000
    good = sign("s3cret", body, now)
    assert signature_ok("s3cret", body, good, str(now), now=now + 299)
    assert not signature_ok("s3cret", body, good, str(now), now=now + 301)  # stale
    assert not signature_ok("s3cret", body, good, str(now + 1), now=now)  # replayed with a new timestamp
    assert not signature_ok("s3cret", body + b" ", good, str(now), now=now)
    assert not signature_ok("other", body, good, str(now), now=now)
    assert not signature_ok("s3cret", body, None, str(now), now=now)
    assert not signature_ok("s3cret", body, good, "soon", now=now)


def _conf(code: str) -> Confirmation:
    return Confirmation(
        id=f"cnf_{code}",
        conversation_id="c",
        run_id="r",
        proposal_id="p",
        tool="issue_refund",
        arguments={},
        args_hash="h",
        principal="customer:C-7",
        code=code,
        summary="Refund",
        status="pending",
        version=1,
        created_at=datetime.now(UTC),
        decided_at=None,
    )


@pytest.mark.parametrize(
    "text,answer",
    [
        ("ABC234", ("ABC234", True)),
        ("yes abc234 thanks", ("ABC234", True)),
        ("Code: ABC234\n\nMaya", ("ABC234", True)),
        ('"ABC234"', ("ABC234", True)),
        ("  Confirm ABC234  \n\nThanks,\nMaya Chen", ("ABC234", True)),
        ("What does ABC234 do?", None),  # issue 20: a question about the code confirms nothing
        ("What does ABC234 do", None),
        ("I saw ABC234 in your mail and wonder what it is", None),
        ("ABC234\n\nbut first tell me what the refund covers exactly", None),
        ("ABC234 ABC234", ("ABC234", True)),
        ("No, ABC234", ("ABC234", False)),
        ("ABC234 - wait, don't", ("ABC234", False)),
        ("please don't do ABC234", ("ABC234", False)),
        ("I won't accept ABC234", ("ABC234", False)),
        ("XYZ987", None),
        ("ABC2345", None),
        ("yes", None),
    ],
)
def test_answer_by_code(text: str, answer: tuple[str, bool] | None) -> None:
    found = answer_by_code(text, [_conf("ABC234")])
    assert (None if found is None else (found[0].code, found[1])) == answer


def test_smtp_url_and_reply_headers() -> None:
    cfg = SmtpConfig.from_url("smtps://user%40x:p%3Ass@mail.example:2465?from=support@fernway.example&starttls=1")
    assert (cfg.host, cfg.port, cfg.ssl, cfg.username, cfg.password, cfg.from_address) == (
        "mail.example",
        2465,
        True,
        "user@x",
        "p:ss",
        "support@fernway.example",
    )
    assert SmtpConfig.from_url("smtp://127.0.0.1").port == 25
    with pytest.raises(ValueError):
        SmtpConfig.from_url("http://mail.example")
    assert reply_subject("Order\r\nBcc: evil@x") == "Re: Order Bcc: evil@x"
    assert reply_subject("RE: hi") == "RE: hi" and reply_subject("") == "Re: Your message"
    mid = new_message_id("conv_0123456789abcdef0123", "support@fernway.example")
    assert conversation_of(mid) == "conv_0123456789abcdef0123"
    assert conversation_of("<signoff.conv_1.zz@x>") is None and conversation_of("<other@x>") is None
    msg = message_from_bytes(
        bytes(
            compose(
                OutgoingEmail(
                    to="maya.chen@example.com",
                    from_address="support@fernway.example",
                    subject="Re: x\nBcc: evil@x",
                    body="hello",
                    message_id=mid,
                    in_reply_to="<a@b>",
                    references=("<r@b>", "<a@b>"),
                )
            )
        )
    )
    assert msg["In-Reply-To"] == "<a@b>" and msg["References"] == "<r@b> <a@b>" and msg["Bcc"] is None


def test_body_fields_in_order_of_preference() -> None:
    """Text when it is real, else HTML as text, else a provider's stripped reply (it loses
    answers below the quote, so it is the last resort)."""
    base = {"from": "maya.chen@example.com"}
    assert normalise({**base, "text": "plain", "html": "<p>html</p>"}).text == "plain"
    assert normalise({**base, "text": " \n", "html": "<p>html <b>only</b></p>"}).text.strip() == "html only"
    assert normalise({**base, "body-html": "<div>mailgun</div>"}).text.strip() == "mailgun"
    assert normalise({**base, "stripped-html": "<div>stripped</div>"}).text.strip() == "stripped"
    pm = {"FromFull": {"Email": "maya.chen@example.com", "Name": "Maya"}, "StrippedTextReply": "short"}
    assert (normalise(pm).sender, normalise(pm).text) == ("maya.chen@example.com", "short")
    pm["HtmlBody"] = "<p>from html</p>"
    assert normalise(pm).text.strip() == "from html"
    listed = {**base, "text": "x", "Attachments": [{"Name": "label.pdf", "ContentLength": 9}]}
    assert normalise(listed).attachments == ("label.pdf",)


def test_with_a_raw_message_its_own_from_is_the_sender() -> None:
    """The From: a DKIM signature covers is the one we serve, not a form field beside it."""
    raw = b"From: Mallory <mallory@attacker.example>\r\nSubject: hi\r\nMessage-ID: <r1@x>\r\n\r\nhello\r\n"
    mail = normalise({"from": "maya.chen@example.com", "email": raw})
    assert (mail.sender, mail.subject, mail.message_id, mail.text.strip()) == (
        "mallory@attacker.example",
        "hi",
        "<r1@x>",
        "hello",
    )
    assert mail.raw == raw


def test_a_cut_body_is_told_at_the_exact_limits() -> None:
    base = {"from": "maya.chen@example.com", "subject": "x"}
    assert not normalise({**base, "text": "a" * MAX_PART}).truncated
    cut = normalise({**base, "text": "a" * (MAX_PART + 1)})
    assert cut.truncated and len(cut.text) == MAX_PART
    markup = '<p title="{}">hi</p>'
    fits = markup.format("a" * (MAX_HTML - len(markup) + 2))  # MAX_HTML characters of markup
    assert len(fits) == MAX_HTML and not normalise({**base, "html": fits}).truncated
    assert normalise({**base, "html": fits + " "}).truncated
    raw = b"From: maya.chen@example.com\r\nContent-Type: text/plain\r\n\r\n"
    assert not read_mime(raw + b"a" * MAX_PART).truncated and read_mime(raw + b"a" * (MAX_PART + 1)).truncated


def test_mailguns_generated_plain_is_not_read_when_the_mail_had_only_html() -> None:
    """Mailgun posts a ``body-plain`` made from the HTML of an HTML-only mail, with the quoted
    history as plain lines; its ``message-headers`` say there was no text part."""
    html = "<div>Still waiting.</div><blockquote>On Tue, Fernway wrote:<br>Your order shipped.</blockquote>"
    base = {"sender": "maya.chen@example.com", "body-html": html, "body-plain": "Still waiting.\nYour order shipped."}
    for ctype, expect in (("text/html; charset=utf-8", "Still waiting."), ("multipart/related", "Still waiting.")):
        headers = json.dumps([["Content-Type", ctype]])
        assert normalise({**base, "message-headers": headers}).text.strip() == expect
    alternative = json.dumps([["Content-Type", "multipart/alternative; boundary=x"]])
    assert normalise({**base, "message-headers": alternative}).text == base["body-plain"]  # a real text part
    assert normalise(base).text == base["body-plain"]  # nothing says otherwise: the text field
