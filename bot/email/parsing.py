"""Reading an inbound-parse webhook: its signature and the provider's shapes.

Accepts the shapes providers send (JSON; multipart/form-data or URL-encoded forms): SendGrid
(``from, to, subject, text, html, headers, envelope, SPF, dkim``, or raw mode's ``email``),
Mailgun (``sender, recipient, subject, body-plain, body-html, stripped-html, Message-Id, …``,
or ``body-mime`` on a ``…/mime`` route), Postmark (``From``/``FromFull``, ``TextBody``,
``HtmlBody``, ``StrippedTextReply``, ``Headers``, ``Attachments``, ``RawEmail``), and
normalises them to one :class:`InboundEmail`. Bodies are :mod:`bot.email.bodies`' job; the
sender's verdicts are :mod:`bot.email.senders`'. Pure functions: nothing here stores or
sends anything.
"""

from __future__ import annotations

import codecs
import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from email import policy
from email.parser import BytesHeaderParser, HeaderParser
from email.utils import getaddresses
from typing import Any
from urllib.parse import parse_qsl

from bot.email.bodies import MAX_HTML, MAX_NAMES, MimeMail, attachment_name, bounded, html_text, read_mime

_ADDRESS = re.compile(r"^[^@\s<>(),;:\"\[\]\\]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}\.)*[A-Za-z0-9-]{1,63}$")
_IDS = re.compile(r"<[^<>\s]{1,900}>")
#: Address header fields longer than this are not an address (bounded work for the parser).
MAX_ADDRESS_FIELD = 1000
#: Fields holding the whole message: SendGrid raw mode, Mailgun's ``…/mime`` route, Postmark.
RAW_FIELDS = ("email", "body-mime", "rawemail")
#: Body fields, in the order they are preferred: text, then HTML, then a provider's own
#: stripped reply (which loses answers written below the quote, so it comes last).
TEXT_FIELDS = ("text", "body-plain", "textbody")
HTML_FIELDS = ("html", "body-html", "htmlbody")
STRIPPED_TEXT_FIELDS = ("stripped-text", "strippedtextreply")
#: Message types with no text alternative: a provider's text field for them is its own
#: rendering of the HTML (Mailgun always posts ``body-plain``), which keeps the quoted
#: history as plain lines, so the HTML field is read instead.
HTML_ONLY_TYPES = frozenset({"text/html", "multipart/related"})


@dataclass(frozen=True, kw_only=True)
class InboundEmail:
    """One inbound message, whatever provider shape it came in."""

    sender: str
    recipient: str | None
    subject: str
    text: str
    message_id: str | None
    in_reply_to: str | None
    references: tuple[str, ...]
    #: The provider's own verdicts (webhook fields, never the message's own headers).
    spf: str | None
    dkim: str | None
    dmarc: str | None = None
    #: Names of the attachments, which are never read (the reply says so).
    attachments: tuple[str, ...] = ()
    #: The whole message when the provider posted it: for our own DKIM check, never stored.
    raw: bytes | None = field(default=None, repr=False)
    #: The body was longer than we read: only its beginning is answered (the reply says so).
    truncated: bool = False


def sign(secret: str, body: bytes, timestamp: int | str) -> str:
    """The ``X-Signoff-Signature`` value for ``body`` sent at ``timestamp`` (Unix seconds)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def signature_ok(
    secret: str, body: bytes, signature: str | None, timestamp: str | None, *, now: float, tolerance_s: int = 300
) -> bool:
    if not signature or not timestamp or not re.fullmatch(r"\d{1,12}", timestamp):
        return False
    if abs(now - int(timestamp)) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, body, timestamp).encode(), signature.strip().encode())


# -- parsing ------------------------------------------------------------------------------


def parse_inbound(content_type: str, content_type_header: str, raw: bytes) -> InboundEmail:
    """Normalise a provider's payload; ``ValueError`` says what is wrong."""
    if content_type == "application/json":
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise ValueError("the body is not JSON") from None
        if not isinstance(data, dict):
            raise ValueError("the body must be a JSON object")
        return normalise(data)
    if content_type == "multipart/form-data":
        fields, files = _multipart(content_type_header, raw)
        return normalise(fields, files=files)
    if content_type == "application/x-www-form-urlencoded":
        try:
            return normalise(dict(parse_qsl(raw.decode("utf-8"), max_num_fields=200)))
        except UnicodeDecodeError:
            raise ValueError("the form is not UTF-8") from None
    raise LookupError(content_type)


def _multipart(content_type_header: str, raw: bytes) -> tuple[dict[str, str | bytes], list[str]]:
    """A form's fields (a raw message stays bytes, for its own charsets and its DKIM
    signature) and the names of its files, which are never read. Split on the boundary with
    ``bytes.split`` (linear and fast: a 34 MB form with a 25 MB file takes milliseconds)."""
    ctype = HeaderParser(policy=policy.HTTP).parsestr(f"Content-Type: {' '.join(content_type_header.split())}\n\n")
    boundary = ctype.get_param("boundary")
    if not isinstance(boundary, str) or not 0 < len(boundary) <= 70:
        raise ValueError("the form has no boundary")
    chunks = (b"\r\n" + raw).split(b"\r\n--" + boundary.encode("latin-1", "replace"))
    if len(chunks) < 3:
        raise ValueError("the form has no parts")
    parts: dict[str, bytes] = {}
    files: list[str] = []
    for chunk in chunks[1:]:
        if chunk.startswith(b"--"):
            break
        head, _sep, body = chunk.partition(b"\r\n\r\n")
        headers = BytesHeaderParser(policy=policy.HTTP).parsebytes(head.lstrip(b"\r\n")[:16384] + b"\r\n\r\n")
        name, filename = headers.get_param("name", header="content-disposition"), headers.get_filename()
        if filename is not None:
            files.append(attachment_name(filename))
        elif isinstance(name, str) and name not in parts:
            parts[name] = body
    charsets = _json_object(parts.get("charsets", b"{}").decode("utf-8", "replace"))
    # A field is cut at 4 bytes a character past what is read of it: a cut one still reads
    # as longer than that, so the cut is told (``bodies.bounded``).
    fields: dict[str, str | bytes] = {
        k: v if k.lower() in RAW_FIELDS else v[: 4 * MAX_HTML + 4].decode(_charset(charsets.get(k)), "replace")
        for k, v in parts.items()
    }
    return fields, files


def _charset(name: Any) -> str:
    """A codec Python knows for a provider-declared charset; UTF-8 when unknown."""
    try:
        return codecs.lookup(str(name)).name if isinstance(name, str) and len(name) < 40 else "utf-8"
    except LookupError:
        return "utf-8"


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _raw_message(f: Mapping[str, Any]) -> tuple[bytes | None, MimeMail | None]:
    """The whole message when the provider posted it (SendGrid raw, Mailgun ``body-mime``,
    Postmark ``RawEmail``), parsed; one ``From:`` header only (a second could ride on a
    signature made for the other)."""
    value = next((f[k] for k in RAW_FIELDS if f.get(k)), None)
    if value is None:
        return None, None
    if not isinstance(value, str | bytes):
        raise ValueError("the raw message must be a string")
    raw = value.encode("utf-8", "replace") if isinstance(value, str) else value  # lone surrogates: "?"
    mime = read_mime(raw)
    if sum(1 for line in _head_lines(raw) if line[:5].lower() == b"from:") > 1:
        raise ValueError("the raw message has more than one From header")
    return raw, mime


def _head_lines(raw: bytes) -> list[bytes]:
    end = raw.find(b"\r\n\r\n")
    end = raw.find(b"\n\n") if end < 0 else end
    return raw[: end if end >= 0 else 64 * 1024][: 256 * 1024].splitlines()


def _body_text(f: Mapping[str, Any], mime: MimeMail | None, content_type: str) -> tuple[str, bool]:
    """The body a person reads, and whether it was cut: the raw message's; else a text field
    that is a real alternative (not when the message's ``content_type`` says it had only
    HTML); else an HTML field as text; else a provider's stripped reply."""
    if mime is not None:
        return mime.text, mime.truncated
    cut = False
    html_only = content_type.partition(";")[0].strip().lower() in HTML_ONLY_TYPES
    text = None if html_only and any(_s(f, k) for k in HTML_FIELDS) else _first(*(_s(f, k) for k in TEXT_FIELDS))
    if text is None and (html := _first(*(_s(f, k) for k in HTML_FIELDS))):
        text, cut = html_text(html)
    if text is None:
        text = _first(*(_s(f, k) for k in STRIPPED_TEXT_FIELDS))
    if text is None and (html := _s(f, "stripped-html")):
        text, cut = html_text(html)
    return bounded(text or _s(f, "body") or "", cut=cut)


def _attachments(f: Mapping[str, Any], files: Sequence[str], mime: MimeMail | None) -> tuple[str, ...]:
    """Names of what was attached and not read: form files, the raw message's attachments,
    Postmark's ``Attachments`` list."""
    names = list(files) + list(mime.attachments if mime else ())
    listed = f.get("attachments")
    if isinstance(listed, list):
        names += [attachment_name(a.get("Name") or a.get("name")) for a in listed if isinstance(a, dict)]
    return tuple(names[:MAX_NAMES])


def normalise(fields: Mapping[str, Any], *, files: Sequence[str] = ()) -> InboundEmail:
    """One :class:`InboundEmail` from a provider's fields, whatever their shape."""
    f = {str(k).lower(): v for k, v in fields.items()}
    raw, mime = _raw_message(f)
    h = {**_headers(f.get("headers") or f.get("message-headers")), **(mime.headers if mime else {})}
    raw_envelope = f.get("envelope")
    envelope = (
        _json_object(raw_envelope)
        if isinstance(raw_envelope, str)
        else (raw_envelope if isinstance(raw_envelope, dict) else {})
    )
    full = f.get("fromfull")
    # With the raw message, its own From: is the sender (the one a DKIM signature covers).
    sender = _first(
        h.get("from") if mime else None,
        _s(f, "from"),
        _str_or_none(full.get("Email")) if isinstance(full, dict) else None,
        h.get("from"),
        _s(f, "sender"),
        _str_or_none(envelope.get("from")),
    )
    if sender is None:
        raise ValueError("no sender")
    to = _first(_s(f, "to"), _s(f, "recipient"), h.get("to"))
    refs = _first(h.get("references"), _s(f, "references")) or ""
    text, truncated = _body_text(f, mime, h.get("content-type", ""))
    return InboundEmail(
        sender=single_address(sender),
        recipient=_any_address(to),
        subject=(_first(h.get("subject") if mime else None, _s(f, "subject"), h.get("subject")) or "")[:300],
        text=text,
        truncated=truncated,
        message_id=_one_id(_first(h.get("message-id"), _s(f, "message-id"), _s(f, "message_id"))),
        in_reply_to=_one_id(_first(h.get("in-reply-to"), _s(f, "in-reply-to"), _s(f, "in_reply_to"))),
        references=tuple(_IDS.findall(refs))[:50],
        # Verdicts only from the provider's own fields: ``headers`` is the sender's message,
        # where anyone can write "Authentication-Results: dkim=pass".
        spf=_first(_s(f, "spf"), _s(f, "x-mailgun-spf")),
        dkim=_first(_s(f, "dkim"), _s(f, "x-mailgun-dkim-check-result")),
        dmarc=_first(_s(f, "dmarc"), _s(f, "x-mailgun-dmarc")),
        attachments=_attachments(f, files, mime),
        raw=raw,
    )


def _s(f: Mapping[str, Any], key: str) -> str | None:
    value = f.get(key)
    if value is None or isinstance(value, str):
        return value
    if key == "references" and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return " ".join(value)
    raise ValueError(f"{key} must be a string")


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _first(*values: str | None) -> str | None:
    return next((v for v in values if v and v.strip()), None)


def _headers(value: Any) -> dict[str, str]:
    """Headers as lower-case name → first value, from a raw block, a JSON list of pairs or a dict."""
    if isinstance(value, str) and value.lstrip().startswith("["):
        value = json.loads(value) if _json_list(value) else []
    pairs: list[tuple[Any, Any]] = []
    if isinstance(value, str):
        pairs = list(HeaderParser().parsestr(value).items())
    elif isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, list | tuple) and len(item) == 2:
                pairs.append((item[0], item[1]))
            elif isinstance(item, dict):
                pairs.append((item.get("Name") or item.get("name"), item.get("Value") or item.get("value")))
    out: dict[str, str] = {}
    for name, v in pairs:
        if isinstance(name, str) and isinstance(v, str):
            out.setdefault(name.lower(), " ".join(v.split()))
    return out


def _json_list(text: str) -> bool:
    try:
        return isinstance(json.loads(text), list)
    except (ValueError, RecursionError):
        return False


def single_address(value: str) -> str:
    """Exactly one well-formed address (display names allowed); ``ValueError`` otherwise."""
    if len(value) > MAX_ADDRESS_FIELD:
        raise ValueError("the sender field is too long")
    if value.count("@") != 1:
        raise ValueError("the sender must be exactly one address")
    found = [a for _n, a in getaddresses([value]) if a]
    if len(found) != 1 or not _ADDRESS.match(found[0]):
        raise ValueError("the sender is not a valid address")
    return found[0]


def _any_address(value: str | None) -> str | None:
    if value and len(value) > MAX_ADDRESS_FIELD:
        return None
    found = [a for _n, a in getaddresses([value or ""]) if a and _ADDRESS.match(a)]
    return found[0] if found else None


def _one_id(value: str | None) -> str | None:
    ids = _IDS.findall(value or "")
    return ids[0] if ids else None


def thread_ref(customer_id: str, root: str) -> str:
    ref = f"email:{customer_id}:{root}"
    return ref if len(ref) <= 200 else f"email:{customer_id}:sha256:{hashlib.sha256(root.encode()).hexdigest()}"


def delivery_id(mail: InboundEmail) -> str:
    """The dedup key, per sender and Message-ID (another sender reusing a Message-ID is another
    message); a digest when it is long or the message has no Message-ID."""
    sender = mail.sender.lower()
    if mail.message_id:
        key = f"email:{sender}:{mail.message_id}"
        return key if len(key) <= 200 else f"email:sha256:{hashlib.sha256(key.encode()).hexdigest()}"
    digest = hashlib.sha256(json.dumps([sender, mail.subject, mail.text]).encode())
    return f"email:sha256:{digest.hexdigest()}"
