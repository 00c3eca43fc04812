"""Reading an inbound-parse webhook: its signature, the provider's shapes, the sender's verdicts.

Accepts the shapes providers send (JSON; multipart/form-data or URL-encoded forms with
SendGrid fields ``from, to, subject, text, headers, envelope, SPF, dkim`` or Mailgun
fields ``sender, recipient, subject, body-plain, Message-Id, In-Reply-To, References``)
and normalises them to one :class:`InboundEmail`. Pure functions: nothing here stores
or sends anything.
"""

from __future__ import annotations

import codecs
import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from email import policy
from email.parser import BytesParser, HeaderParser
from email.utils import getaddresses
from typing import Any, Literal
from urllib.parse import parse_qsl

MAX_TEXT = 4000
_ADDRESS = re.compile(r"^[^@\s<>(),;:\"\[\]\\]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}\.)*[A-Za-z0-9-]{1,63}$")
_IDS = re.compile(r"<[^<>\s]{1,900}>")
#: A quote header ("On … wrote:") is one short line; longer lines are never taken for one.
MAX_HEAD_LINE = 400
#: Quote-stripping reads at most this much of a body (the webhook's limit is 1 MiB).
MAX_INPUT = 1024 * 1024
#: Provider verdict fields longer than this are cut before they are read.
MAX_VERDICT = 2000
#: Address header fields longer than this are not an address (bounded work for the parser).
MAX_ADDRESS_FIELD = 1000
_BAD_VERDICTS = frozenset({"fail", "softfail", "permerror"})


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
        return normalise(_multipart(content_type_header, raw))
    if content_type == "application/x-www-form-urlencoded":
        try:
            return normalise(dict(parse_qsl(raw.decode("utf-8"), max_num_fields=200)))
        except UnicodeDecodeError:
            raise ValueError("the form is not UTF-8") from None
    raise LookupError(content_type)


def _multipart(content_type_header: str, raw: bytes) -> dict[str, str]:
    head = b"Content-Type: " + " ".join(content_type_header.split()).encode("latin-1", "replace") + b"\r\n\r\n"
    msg = BytesParser(policy=policy.HTTP).parsebytes(head + raw)
    if not msg.is_multipart():
        raise ValueError("the form has no parts")
    parts: dict[str, bytes] = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str) and part.get_filename() is None and name not in parts:
            payload = part.get_payload(decode=True)
            parts[name] = payload if isinstance(payload, bytes) else b""
    charsets = _json_object(parts.get("charsets", b"{}").decode("utf-8", "replace"))
    return {k: v.decode(_charset(charsets.get(k)), "replace") for k, v in parts.items()}


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


def normalise(fields: Mapping[str, Any]) -> InboundEmail:
    f = {str(k).lower(): v for k, v in fields.items()}
    h = _headers(f.get("headers") or f.get("message-headers"))
    raw_envelope = f.get("envelope")
    envelope = (
        _json_object(raw_envelope)
        if isinstance(raw_envelope, str)
        else (raw_envelope if isinstance(raw_envelope, dict) else {})
    )
    sender = _first(_s(f, "from"), h.get("from"), _s(f, "sender"), _str_or_none(envelope.get("from")))
    if sender is None:
        raise ValueError("no sender")
    to = _first(_s(f, "to"), _s(f, "recipient"), h.get("to"))
    refs = _first(h.get("references"), _s(f, "references")) or ""
    return InboundEmail(
        sender=single_address(sender),
        recipient=_any_address(to),
        subject=(_first(_s(f, "subject"), h.get("subject")) or "")[:300],
        text=_first(_s(f, "text"), _s(f, "body-plain"), _s(f, "textbody"), _s(f, "body")) or "",
        message_id=_one_id(_first(h.get("message-id"), _s(f, "message-id"), _s(f, "message_id"))),
        in_reply_to=_one_id(_first(h.get("in-reply-to"), _s(f, "in-reply-to"), _s(f, "in_reply_to"))),
        references=tuple(_IDS.findall(refs))[:50],
        # Verdicts only from the provider's own fields: ``headers`` is the sender's message,
        # where anyone can write "Authentication-Results: dkim=pass".
        spf=_first(_s(f, "spf"), _s(f, "x-mailgun-spf")),
        dkim=_first(_s(f, "dkim"), _s(f, "x-mailgun-dkim-check-result")),
        dmarc=_first(_s(f, "dmarc"), _s(f, "x-mailgun-dmarc")),
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


def _verdict(value: str | None) -> str:
    """A provider's one-word verdict, lower case ("pass", "fail", "none", …); "" when absent."""
    words = (value or "")[:200].strip().lower().split()
    return words[0].strip(";,") if words else ""


def dkim_results(value: str | None) -> list[tuple[str, str]]:
    """(signing domain, verdict) pairs from a SendGrid-style ``{@example.com : pass, @x.net : fail}``;
    a bare verdict (Mailgun's ``Pass``) names no domain (``""``). Linear: split, never a regex."""
    pairs: list[tuple[str, str]] = []
    for part in (value or "")[:MAX_VERDICT].strip().strip("{}").split(","):
        domain, colon, verdict = part.partition(":")
        if colon:
            pairs.append((domain.strip().lstrip("@").lower(), _verdict(verdict)))
        elif part.strip():
            pairs.append(("", _verdict(part)))
    return pairs


@dataclass(frozen=True, kw_only=True)
class SenderCheck:
    """Whether the provider vouched for the ``From:`` address.

    ``verified``: a DMARC pass, or a DKIM pass by the ``From:`` domain itself (aligned);
    ``failed``: an explicit SPF or own-domain DKIM failure (refused); ``unverified``:
    anything else — no verdict, ``none``, ``neutral``, SPF alone, another domain's DKIM,
    ``dmarc=fail``. ``reason`` says which, for logs and the audit of the turn.
    """

    verdict: Literal["verified", "unverified", "failed"]
    reason: str


def sender_check(mail: InboundEmail) -> SenderCheck:
    """Judge the sender from the provider's own verdict fields (never the message's headers)."""
    domain = mail.sender.rpartition("@")[2].lower()
    dmarc = _verdict(mail.dmarc)
    if dmarc == "pass":
        return SenderCheck(verdict="verified", reason="dmarc=pass")
    results = dkim_results(mail.dkim)
    own = [v for d, v in results if d == domain]
    if dmarc != "fail" and "pass" in own:
        return SenderCheck(verdict="verified", reason=f"dkim=pass d={domain}")
    if _verdict(mail.spf) in _BAD_VERDICTS:
        return SenderCheck(verdict="failed", reason="SPF")
    if any(v in _BAD_VERDICTS for v in own) or any(not d and v in _BAD_VERDICTS for d, v in results):
        return SenderCheck(verdict="failed", reason="DKIM")
    if dmarc:
        return SenderCheck(verdict="unverified", reason=f"dmarc={dmarc}")
    return SenderCheck(verdict="unverified", reason=f"no DMARC pass and no DKIM pass by {domain}")


def failed_check(mail: InboundEmail) -> str | None:
    """ "SPF" or "DKIM" when the provider reported an explicit failure for the sender."""
    check = sender_check(mail)
    return check.reason if check.verdict == "failed" else None


def _opens_with(line: str, word: str) -> bool:
    """``line`` starts with ``word`` as a whole word."""
    return line.startswith(word) and (len(line) == len(word) or not line[len(word)].isalnum())


def _quote_head(line: str) -> bool:
    """Whether a (stripped) line opens quoted history: "On … wrote:", "Le … a écrit :",
    "Am … schrieb …:", "-----Original Message-----", a rule of underscores, "From: …".
    String tests only (no backtracking), and only on lines short enough to be a header."""
    if len(line) > MAX_HEAD_LINE:
        return False
    low = line.lower()
    return (
        (_opens_with(line, "On") and line.endswith("wrote:"))
        or (line.startswith("--") and "original message" in low)
        or (len(line) >= 10 and line.strip("_") == "")
        or (line.startswith("From:") and len(line) > 6 and line[5].isspace())
        or (_opens_with(line, "Le") and "".join(low.split()).endswith("aécrit:"))
        or (_opens_with(line, "Am") and "schrieb" in low and line.endswith(":"))
    )


def strip_quoted(text: str) -> str:
    """The new part of a reply: no quoted lines, no "On … wrote:" history, no signature.

    One pass over the lines with string tests, stopping once ``MAX_TEXT`` characters are
    kept: linear in the input and bounded by it (a 1 MiB mail costs milliseconds)."""
    text = text[:MAX_INPUT]
    kept: list[str] = []
    size = 0
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for i, line in enumerate(lines):
        stripped = line.strip()
        if line.rstrip() == "--" or _quote_head(stripped):
            break
        if stripped.startswith("On ") and i + 1 < len(lines) and lines[i + 1].strip().endswith("wrote:"):
            if len(stripped) <= MAX_HEAD_LINE:
                break
        if line.lstrip().startswith(">"):
            continue
        kept.append(line)
        size += len(line) + 1
        if size > MAX_TEXT:
            break
    return "\n".join(kept).strip()[:MAX_TEXT]


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
