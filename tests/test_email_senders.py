"""Senders verified on every provider (our own DKIM check of the raw message, DNS stubbed),
attachments that are never read and never cost the customer's words, and replies to
unverified senders that echo neither their subject nor their links."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from typing import Any

import dkim
import pytest
from aiosmtpd.controller import Controller
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from agent.llm.testing import ScriptedModel
from bot.email import wording as say
from bot.email.bodies import MAX_HTML, MAX_PART
from bot.email.bridge import EmailConfig
from bot.email.parsing import parse_inbound
from bot.email.senders import aligned, dkim_aligned, own_check
from storage.db import Database
from tests.api_kit import EMAIL_SECRET, app_behind, client_for, settings
from tests.email_kit import form, mailgun_form, mailgun_mime, postmark, sendgrid_raw
from tests.support import seeded
from tests.test_email_bridge import SHOP, Inbox, deliver, free_port, mail


def _key() -> tuple[bytes, str]:
    """A fresh RSA key: its PEM, and the DKIM TXT record publishing it."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return pem, f"v=DKIM1; k=rsa; p={base64.b64encode(der).decode()}"


KEY, TXT = _key()
OTHER_KEY, OTHER_TXT = _key()
DNS = {"s1._domainkey.example.com": TXT, "s1._domainkey.attacker.example": OTHER_TXT}


def lookup(name: str) -> str | None:
    """The stubbed resolver: our two published keys, nothing else."""
    return DNS.get(name.lower())


def message(text: str = "Where is my order O-1042?", *, mid: str = "<dkim-1@example.com>") -> bytes:
    msg = EmailMessage()
    msg["From"] = "Maya Chen <maya.chen@example.com>"
    msg["To"] = SHOP
    msg["Subject"] = "Order O-1042"
    msg["Date"] = "Wed, 04 Jun 2025 09:15:00 +0000"
    msg["Message-ID"] = mid
    msg.set_content(text)
    return msg.as_bytes(policy=msg.policy.clone(linesep="\r\n"))


def signed_by(raw: bytes, domain: str = "example.com", key: bytes = KEY, **kw: Any) -> bytes:
    headers = [b"From", b"To", b"Subject", b"Date", b"Message-ID"]
    return dkim.sign(raw, b"s1", domain.encode(), key, include_headers=headers, **kw) + raw


def _forged(raw: bytes) -> bytes:
    return raw.replace(b"O-1042?", b"O-1044?")


def _postmark_raw(raw: bytes) -> tuple[str, bytes]:
    return postmark(raw, RawEmail=raw.decode())


def test_our_dkim_check_and_alignment() -> None:
    raw = signed_by(message())
    assert dkim_aligned(raw, "example.com", lookup) == "example.com"
    assert dkim_aligned(raw, "mail.example.com", lookup) == "example.com"  # a parent signs for its subdomain
    assert dkim_aligned(raw, "example.org", lookup) is None  # not aligned
    assert dkim_aligned(raw.replace(b"O-1042?", b"O-1043?"), "example.com", lookup) is None  # body changed
    assert dkim_aligned(raw, "example.com", lambda _n: None) is None  # no key published
    assert dkim_aligned(signed_by(message(), "attacker.example", OTHER_KEY), "example.com", lookup) is None
    assert dkim_aligned(signed_by(message(), length=True), "example.com", lookup) is None  # l= never counts
    assert aligned("example.com", "example.com") and not aligned("com", "example.com")
    assert not aligned("ample.com", "example.com") and not aligned("", "example.com")


@pytest.mark.parametrize(
    "build,verified",
    [
        (lambda: mailgun_mime(signed_by(message())), True),  # aligned signature: the customer
        (lambda: mailgun_mime(signed_by(message()).replace(b"O-1042?", b"O-1044?")), False),  # forged body
        (lambda: mailgun_mime(signed_by(message(), "attacker.example", OTHER_KEY)), False),  # not aligned
        (lambda: mailgun_mime(message()), False),  # bare "Pass", no signature
        (lambda: mailgun_form(signed_by(message())), False),  # bare "Pass", no raw message to check
        # SendGrid raw mode, its verdict naming another domain (the ESP's): our check decides.
        (lambda: sendgrid_raw(signed_by(message()), dkim="{@sendgrid.net : pass}"), True),
        (lambda: sendgrid_raw(_forged(signed_by(message())), dkim="{@sendgrid.net : pass}"), False),
        # Postmark's RawEmail (the JSON has no verdict of its own).
        (lambda: _postmark_raw(signed_by(message())), True),
        (lambda: _postmark_raw(_forged(signed_by(message()))), False),
    ],
    ids=[
        "aligned",
        "forged",
        "other-domain",
        "unsigned-bare-pass",
        "form-bare-pass",
        "sendgrid-raw-aligned",
        "sendgrid-raw-forged",
        "postmark-raw-aligned",
        "postmark-raw-forged",
    ],
)
async def test_raw_message_senders_are_verified_by_our_own_dkim_check(
    db: Database, build: Callable[[], tuple[str, bytes]], verified: bool
) -> None:
    h = await seeded(db, ScriptedModel(["O-1042 is on its way."]))
    ctype, body = build()
    async with client_for(h, email=EmailConfig(secret=EMAIL_SECRET, txt_lookup=lookup)) as client:
        status, answer = await deliver(client, body, ctype=ctype)
        item = await app_behind(client).runtime.s.inbox.get(answer["id"])
    assert (status, answer["verified"]) == (200, verified)
    assert item is not None and item.result is not None
    expected = "customer:C-7" if verified else "customer:unverified-email:"
    assert item.result["principal"].startswith(expected) and item.result["verified"] is verified


def test_a_second_from_header_is_refused() -> None:
    raw = signed_by(message())
    doubled = b"From: Mallory <maya.chen@example.com>\r\n" + raw
    ctype, body = mailgun_mime(doubled)
    with pytest.raises(ValueError, match="more than one From"):
        parse_inbound("multipart/form-data", ctype, body)
    ctype, body = mailgun_mime(raw)
    mail_ = parse_inbound("multipart/form-data", ctype, body)
    assert own_check(mail_, lookup).verdict == "verified"


@pytest.fixture
def smtp() -> Iterator[tuple[Inbox, str]]:
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield inbox, f"smtp://127.0.0.1:{port}?from={SHOP}"
    controller.stop()


BIG = os.urandom(25 * 1024 * 1024)


def _big_mail(shape: str, words: str) -> tuple[str, bytes]:
    """A mail with a 25 MB attachment in each provider's shape."""
    if shape == "form-file":
        return form(
            {"from": "maya.chen@example.com", "subject": "Broken mug", "text": words, "dmarc": "pass"},
            {"attachment1": ("photos.zip", BIG)},
        )
    if shape == "postmark":  # Postmark posts attachments inline, base64 in the JSON
        attachment = {"Name": "photos.zip", "Content": base64.b64encode(BIG).decode(), "ContentLength": len(BIG)}
        fields = {"From": "maya.chen@example.com", "Subject": "Broken mug", "TextBody": words, "Dmarc": "pass"}
        return "application/json", json.dumps({**fields, "Attachments": [attachment]}).encode()
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "maya.chen@example.com", SHOP, "Broken mug"
    msg["Message-ID"] = "<big-1@example.com>"
    msg.set_content(words)
    msg.add_attachment(BIG, maintype="application", subtype="zip", filename="photos.zip")
    if shape == "sendgrid-raw":
        return sendgrid_raw(msg.as_bytes(), dmarc="pass")
    return mailgun_mime(msg.as_bytes())


@pytest.mark.parametrize("shape", ["form-file", "body-mime", "postmark", "sendgrid-raw"])
async def test_a_25_mb_attachment_is_dropped_and_the_words_answered(
    db: Database, smtp: tuple[Inbox, str], shape: str
) -> None:
    """Today's 413 lost the words: now the text is answered and the customer told."""
    inbox, url = smtp
    model = ScriptedModel(["Sorry to hear that; a replacement is on its way."])
    h = await seeded(db, model)
    words = "The mug arrived broken, photos attached."
    ctype, body = _big_mail(shape, words)
    assert len(body) > 25 * 1024 * 1024
    async with client_for(
        h, settings(SIGNOFF_SMTP_URL=url), email=EmailConfig(secret=EMAIL_SECRET, txt_lookup=lookup)
    ) as client:
        status, answer = await deliver(client, body, ctype=ctype)
    assert (status, answer["status"]) == (200, "accepted")
    assert model.requests and model.requests[0].messages[-1].content[-1]["text"] == words
    [(_from, _rcpt, sent)] = inbox.messages
    text = " ".join(sent.get_payload(decode=True).decode().split())
    assert "a replacement is on its way" in text
    assert say.ATTACHMENTS_NOT_READ.format(names="photos.zip") in text


async def test_replies_to_unverified_senders_echo_no_subject_and_no_links(
    db: Database, smtp: tuple[Inbox, str]
) -> None:
    """Issue 20: a spoofed mail made the shop send "Re: URGENT: … verify at https://evil…"."""
    inbox, url = smtp
    lure = "URGENT: your account is locked - verify at https://evil.example/login"
    model = ScriptedModel(["You can verify at https://evil.example/login or see https://fernway.example/help."])
    h = await seeded(db, model)
    body = mail(f"{lure}\nClick www.evil.example now", message_id="<lure@x.example>", subject=lure, dmarc="none")
    async with client_for(h, settings(SIGNOFF_SMTP_URL=url)) as client:
        status, answer = await deliver(client, body)
    assert (status, answer["verified"]) == (200, False)
    [(_from, _rcpt, sent)] = inbox.messages
    text = sent.get_payload(decode=True).decode()
    assert sent["Subject"] == say.UNVERIFIED_SUBJECT
    assert "evil.example" not in text and "URGENT" not in text and say.LINK_REMOVED in text
    assert "https://fernway.example/help." in text  # links the sender did not write stay


@pytest.mark.parametrize("shape", ["json-text", "form-html", "body-mime"])
async def test_a_body_longer_than_we_read_is_answered_and_the_customer_told(
    db: Database, smtp: tuple[Inbox, str], shape: str
) -> None:
    """A text body over MAX_PART (or HTML over MAX_HTML) was cut silently: now the reply says
    that only its beginning was read."""
    inbox, url = smtp
    model = ScriptedModel(["Thanks, we'll look into it."])
    h = await seeded(db, model)
    words = "Here is the full log of my attempts to order:"
    long_text = words + "\n" + "attempt failed again\n" * (MAX_PART // 20)
    if shape == "json-text":
        body, ctype = mail(long_text, message_id="<long-1@example.com>"), "application/json"
    elif shape == "form-html":
        markup = f"<p>{words}</p>" + "<p>attempt failed again</p>" * (MAX_HTML // 25)
        ctype, body = form({"from": "maya.chen@example.com", "subject": "Log", "html": markup, "dmarc": "pass"})
    else:
        ctype, body = mailgun_mime(message(long_text, mid="<long-2@example.com>"), dmarc="pass")
    async with client_for(h, settings(SIGNOFF_SMTP_URL=url)) as client:
        status, answer = await deliver(client, body, ctype=ctype)
    assert (status, answer["status"]) == (200, "accepted")
    assert model.requests[0].messages[-1].content[-1]["text"].startswith(words)
    [(_from, _rcpt, sent)] = inbox.messages
    assert say.TEXT_NOT_ALL_READ in " ".join(sent.get_payload(decode=True).decode().split())
