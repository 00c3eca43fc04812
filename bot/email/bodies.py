"""Message bodies as text: raw MIME (Python's ``email``, ``policy.default``) and HTML (``lxml``
to drop quoted blocks, ``inscriptis`` to render the rest as a person sees it).

Every charset and transfer encoding a part declares is decoded by ``email``'s content manager
(ISO-8859-1, Shift_JIS, ISO-2022-JP, quoted-printable, base64, …); an unknown charset reads
as UTF-8 with replacement characters rather than failing the mail. Attachments are never
read: their names are kept so that the reply can say so. Pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from email import policy
from email.message import EmailMessage, Message
from email.parser import BytesParser
from typing import Any

#: One text body (a part or a field) is read up to this many characters; the rest is cut
#: before the reply is extracted (the reply itself is capped again, see ``replies.MAX_TEXT``)
#: and the customer is told that only the beginning was read.
MAX_PART = 512 * 1024
#: HTML is read up to this many characters before parsing (beyond it: cut, and said so).
MAX_HTML = 2 * 1024 * 1024
#: At most this many attachment names are kept, each at most 80 characters.
MAX_NAMES = 10
#: HTML elements that hold quoted history only (dropped before rendering); the customer's
#: inline answers sit between them and stay. Other clients' history markers are text rules.
QUOTED_HTML = ("//blockquote", "//div[contains(concat(' ', normalize-space(@class), ' '), ' yahoo_quoted ')]")
#: Messages above this size have their bulk base64 runs (an attachment's data, never read)
#: removed before parsing: ``email``'s parser takes seconds over 25 MB of base64 lines.
#: A run is at least 20,000 lines (~1.5 MB); no text body we read is that long.
BULK_FROM = 2 * 1024 * 1024
BULK_LINES = 20_000
_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\r\n"


@dataclass(frozen=True, kw_only=True)
class MimeMail:
    """What a raw message says: its headers (lower-case name → first value), the body a person
    reads (text/plain when it is a real alternative, else its HTML as text) and the names of
    the attachments that were not read."""

    headers: dict[str, str]
    text: str
    attachments: tuple[str, ...]
    #: The body was longer than we read (``MAX_PART`` of text, ``MAX_HTML`` of HTML).
    truncated: bool = False


def html_to_text(markup: str) -> str:
    """HTML as the text a person reads, quoted blocks (``blockquote``, Yahoo's) left out."""
    if not markup.strip():
        return ""
    # Imported at the first HTML body, not at start: lxml and inscriptis are ~4.6 MB of a
    # serving process's memory, which a shop whose mail never carries HTML need not hold.
    from inscriptis import Inscriptis
    from inscriptis.model.config import ParserConfig
    from lxml import etree
    from lxml import html as lxml_html

    try:
        # Lone surrogates (JSON allows them) would end lxml's text at the first one.
        doc = lxml_html.document_fromstring(markup[:MAX_HTML].encode("utf-8", "replace").decode("utf-8"))
        for element in [e for path in QUOTED_HTML for e in doc.xpath(path)]:
            if element.getparent() is not None:
                element.drop_tree()
        return str(Inscriptis(doc, ParserConfig(display_links=False, display_images=False)).get_text())
    except (etree.ParserError, ValueError, RecursionError):
        return ""


def bounded(text: str, *, cut: bool = False) -> tuple[str, bool]:
    """``text`` up to ``MAX_PART`` characters, and whether anything was cut (here or before)."""
    return text[:MAX_PART], cut or len(text) > MAX_PART


def html_text(markup: str) -> tuple[str, bool]:
    """:func:`html_to_text`, bounded, and whether the markup or its text was cut."""
    return bounded(html_to_text(markup), cut=len(markup) > MAX_HTML)


def attachment_name(value: Any) -> str:
    """A file name fit to show back to the customer: one line, printable, bounded."""
    name = "".join(c for c in str(value or "") if c.isprintable())
    return " ".join(name.split())[:80] or "attachment"


def read_mime(raw: bytes) -> MimeMail:
    """Parse a whole message (RFC 5322/MIME); ``ValueError`` if it is not one."""
    msg = BytesParser(policy=policy.default).parsebytes(without_bulk(raw) if len(raw) > BULK_FROM else raw)
    if not isinstance(msg, EmailMessage) or not msg.keys():
        raise ValueError("the raw message has no headers")
    headers: dict[str, str] = {}
    for name in msg.keys():
        headers.setdefault(name.lower(), _header(msg, name))
    plain: str | None = None
    html: str | None = None
    names: list[str] = []
    for part in msg.walk():
        if part.is_multipart():
            continue
        ctype, disposition = part.get_content_type(), part.get_content_disposition()
        if disposition == "attachment" or (part.get_filename() and not ctype.startswith("text/")):
            if disposition == "attachment" or part.get("Content-ID") is None:  # not a logo the HTML shows
                names.append(attachment_name(part.get_filename()))
        elif ctype == "text/plain" and plain is None:
            plain = content(part)
        elif ctype == "text/html" and html is None:
            html = content(part)
    text, cut = bounded(plain) if plain and plain.strip() else html_text(html or "")
    return MimeMail(headers=headers, text=text, attachments=tuple(names[:MAX_NAMES]), truncated=cut)


def without_bulk(raw: bytes) -> bytes:
    """``raw`` without runs of ``BULK_LINES`` or more base64 lines (40–100 characters each).
    One pass over the lines, each tested in C (``bytes.translate``): linear, never a regex
    that could backtrack over a nearly matching run."""
    keep: list[bytes] = []
    pos, run_start, run = 0, 0, 0
    while pos < len(raw):
        end = raw.find(b"\n", pos)
        end = len(raw) if end < 0 else end + 1
        if 42 <= end - pos <= 102 and not raw[pos:end].translate(None, _B64):
            run_start, run = (run_start, run + 1) if run else (pos, 1)
        else:
            if run:
                keep.append(raw[run_start:pos] if run < BULK_LINES else b"")
                run = 0
            keep.append(raw[pos:end])
        pos = end
    if run:
        keep.append(raw[run_start:] if run < BULK_LINES else b"")
    return b"".join(keep)


def _header(msg: Message, name: str) -> str:
    try:
        value = str(msg.get(name, ""))
    except (ValueError, LookupError, IndexError, AttributeError):  # a malformed header: skipped
        return ""
    return " ".join(value.split())[:2000]


def content(part: Message) -> str:
    """A text part's content, its transfer encoding and charset decoded; at most one character
    more than ``MAX_HTML`` (so that a cut can be told)."""
    limit = MAX_HTML + 1
    try:
        value = part.get_content()  # type: ignore[attr-defined]
        if isinstance(value, str):
            return value[:limit]
    except (LookupError, UnicodeError, ValueError, AssertionError):
        pass
    payload = part.get_payload(decode=True)
    return payload[:limit].decode("utf-8", "replace") if isinstance(payload, bytes) else ""


__all__ = [
    "MAX_HTML",
    "MAX_PART",
    "MimeMail",
    "attachment_name",
    "bounded",
    "content",
    "html_text",
    "html_to_text",
    "read_mime",
    "without_bulk",
]
