"""The email fixture set (tests/fixtures/email/*.eml) and the shapes providers post it in.

A fixture file is the fixture's description, then the raw message as the client sent it:

    #| client: Gmail (web)
    #| language: de
    #| expect:
    #|   the reply a person reads, one line per "#|   " line ("#|" alone: an empty line)
    #| end
    From: …   (the raw RFC 5322 message, bytes in whatever charset it declares)

The provider shapes are built from the raw message the way each provider documents its
inbound webhook: SendGrid parsed (``text``/``html``/``charsets``/``headers``) and raw
(``email``), Mailgun form (``body-plain``/``body-html``/``message-headers``) and ``…/mime``
(``body-mime``), Postmark JSON (``TextBody``/``HtmlBody``/``FromFull``/``Headers``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any

from lxml import html as lxml_html

FIXTURES = Path(__file__).parent / "fixtures" / "email"
SHOP = "support@fernway.example"


@dataclass(frozen=True, kw_only=True)
class Fixture:
    name: str
    client: str
    language: str
    expect: str
    raw: bytes


def load(path: Path) -> Fixture:
    data = path.read_bytes()
    meta: dict[str, str] = {}
    expect: list[str] = []
    pos, reading = 0, False
    while data.startswith(b"#|", pos):
        end = data.index(b"\n", pos)
        line = data[pos + 2 : end].decode("utf-8")
        pos = end + 1
        if line.strip() == "end":
            break
        if reading:
            expect.append(line[3:] if line.startswith("   ") else "")
        elif line.strip() == "expect:":
            reading = True
        else:
            key, _, value = line.strip().partition(":")
            meta[key] = value.strip()
    return Fixture(
        name=path.stem, client=meta["client"], language=meta["language"], expect="\n".join(expect), raw=data[pos:]
    )


def all_fixtures() -> list[Fixture]:
    return [load(p) for p in sorted(FIXTURES.glob("*.eml"))]


def _parts(raw: bytes) -> tuple[EmailMessage, tuple[bytes, str] | None, tuple[bytes, str] | None]:
    """The message, and its text/plain and text/html bodies as (bytes in their charset, charset),
    transfer encoding undone, as a provider's parsed mode posts them."""
    msg = BytesParser(policy=policy.default).parsebytes(raw)
    found: dict[str, tuple[bytes, str]] = {}
    for part in msg.walk():
        ctype = part.get_content_type()
        if ctype in ("text/plain", "text/html") and ctype not in found and part.get_filename() is None:
            payload = part.get_payload(decode=True)
            found[ctype] = (payload if isinstance(payload, bytes) else b"", part.get_content_charset() or "utf-8")
    return msg, found.get("text/plain"), found.get("text/html")  # type: ignore[return-value]


def _text(body: tuple[bytes, str] | None) -> str | None:
    return body[0].decode(body[1], "replace") if body else None


def _head_block(raw: bytes) -> str:
    end = raw.find(b"\r\n\r\n")
    end = raw.find(b"\n\n") if end < 0 else end
    return raw[:end].decode("utf-8", "replace") + "\r\n"


def form(fields: dict[str, str | bytes], files: dict[str, tuple[str, bytes]] | None = None) -> tuple[str, bytes]:
    """A multipart/form-data body (content type, bytes); ``bytes`` values go as they are."""
    boundary = "----signoffFormBoundary7MA4YWxk"
    out = b""
    for name, value in fields.items():
        data = value if isinstance(value, bytes) else value.encode("utf-8")
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode() + data + b"\r\n"
    for name, (filename, data) in (files or {}).items():
        out += (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n"
            ).encode()
            + data
            + b"\r\n"
        )
    return f"multipart/form-data; boundary={boundary}", out + f"--{boundary}--\r\n".encode()


def sendgrid_parsed(raw: bytes, **extra: str) -> tuple[str, bytes]:
    """SendGrid Inbound Parse, default mode: each body in its own charset, named in ``charsets``."""
    msg, plain, html = _parts(raw)
    fields: dict[str, str | bytes] = {
        "headers": _head_block(raw),
        "from": str(msg["From"]),
        "to": str(msg["To"]),
        "subject": str(msg["Subject"]),
        "dkim": "{@example.com : pass}",
        "SPF": "pass",
    }
    charsets = {k: "UTF-8" for k in ("headers", "from", "to", "subject", "dkim", "SPF")}
    if plain:
        fields["text"], charsets["text"] = plain
    if html:
        fields["html"], charsets["html"] = html
    fields["charsets"] = json.dumps(charsets)
    return form({**fields, **extra})


def sendgrid_raw(raw: bytes, **extra: str) -> tuple[str, bytes]:
    """SendGrid Inbound Parse with "POST the raw, full MIME message" on: the ``email`` field."""
    msg = BytesParser(policy=policy.default).parsebytes(raw)
    fields: dict[str, str | bytes] = {"email": raw, "from": str(msg["From"]), "to": str(msg["To"])}
    return form({**fields, "dkim": "{@example.com : pass}", "SPF": "pass", **extra})


def generated_plain(markup: str) -> str:
    """Text made from HTML the way a provider that always posts a text body does (Mailgun's
    ``body-plain`` for an HTML-only mail): tags dropped, a line per block, and quoted blocks
    kept as plain lines, without ``>`` (the worst case for reading the reply from it)."""
    doc = lxml_html.document_fromstring(markup)
    for element in doc.iter("p", "div", "br", "blockquote", "li", "tr", "h1", "h2", "h3"):
        element.tail = "\n" + (element.tail or "")
    return str(doc.text_content())


def mailgun_form(raw: bytes, **extra: str) -> tuple[str, bytes]:
    """Mailgun's parsed route (bodies in UTF-8, headers as a JSON list of pairs). For an
    HTML-only mail Mailgun still posts a ``body-plain``, made from the HTML."""
    msg, plain, html = _parts(raw)
    fields: dict[str, str | bytes] = {
        "sender": "maya.chen@example.com",
        "recipient": SHOP,
        "from": str(msg["From"]),
        "subject": str(msg["Subject"]),
        "message-headers": json.dumps([[k, str(v)] for k, v in msg.items()]),
        "Message-Id": str(msg["Message-ID"]),
        "X-Mailgun-Spf": "Pass",
        "X-Mailgun-Dkim-Check-Result": "Pass",
    }
    if plain:
        fields["body-plain"] = _text(plain) or ""
    if html:
        fields["body-html"] = _text(html) or ""
        if not plain:
            fields["body-plain"] = generated_plain(fields["body-html"])  # type: ignore[arg-type]
    return form({**fields, **extra})


def mailgun_mime(raw: bytes, **extra: str) -> tuple[str, bytes]:
    """Mailgun's ``…/mime`` route: the whole message in ``body-mime``."""
    fields: dict[str, str | bytes] = {
        "sender": "maya.chen@example.com",
        "recipient": SHOP,
        "body-mime": raw,
        "X-Mailgun-Spf": "Pass",
        "X-Mailgun-Dkim-Check-Result": "Pass",
    }
    return form({**fields, **extra})


def postmark(raw: bytes, **extra: Any) -> tuple[str, bytes]:
    """Postmark's inbound JSON."""
    msg, plain, html = _parts(raw)
    body: dict[str, Any] = {
        "From": "maya.chen@example.com",
        "FromFull": {"Email": "maya.chen@example.com", "Name": "Maya Chen"},
        "To": SHOP,
        "Subject": str(msg["Subject"]),
        "MessageID": "0f5e6b2a-0000-4000-8000-000000000000",
        "TextBody": _text(plain) or "",
        "HtmlBody": _text(html) or "",
        "Headers": [{"Name": k, "Value": str(v)} for k, v in msg.items()],
        "Attachments": [],
    }
    return "application/json", json.dumps({**body, **extra}).encode()


SHAPES = {
    "sendgrid": sendgrid_parsed,
    "sendgrid-raw": sendgrid_raw,
    "mailgun": mailgun_form,
    "mailgun-mime": mailgun_mime,
    "postmark": postmark,
}
