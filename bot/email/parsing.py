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
from typing import Any
from urllib.parse import parse_qsl

MAX_TEXT = 4000
_ADDRESS = re.compile(r"^[^@\s<>(),;:\"\[\]\\]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}\.)*[A-Za-z0-9-]{1,63}$")
_IDS = re.compile(r"<[^<>\s]{1,900}>")
_QUOTE_HEADS = (
    re.compile(r"^On\b.*\bwrote:\s*$"),
    re.compile(r"^-{2,}\s*Original Message\s*-{2,}", re.I),
    re.compile(r"^_{10,}\s*$"),
    re.compile(r"^From:\s.+$"),
    re.compile(r"^Le\b.*a écrit\s*:\s*$"),
    re.compile(r"^Am\b.*schrieb.*:\s*$"),
)
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
    spf: str | None
    dkim: str | None


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
        spf=_first(_s(f, "spf"), _s(f, "x-mailgun-spf"), _auth_result(h, "spf"), _word(h.get("received-spf"))),
        dkim=_first(_s(f, "dkim"), _s(f, "x-mailgun-dkim-check-result"), _auth_result(h, "dkim")),
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
    if value.count("@") != 1:
        raise ValueError("the sender must be exactly one address")
    found = [a for _n, a in getaddresses([value]) if a]
    if len(found) != 1 or not _ADDRESS.match(found[0]):
        raise ValueError("the sender is not a valid address")
    return found[0]


def _any_address(value: str | None) -> str | None:
    found = [a for _n, a in getaddresses([value or ""]) if a and _ADDRESS.match(a)]
    return found[0] if found else None


def _one_id(value: str | None) -> str | None:
    ids = _IDS.findall(value or "")
    return ids[0] if ids else None


def _auth_result(h: Mapping[str, str], method: str) -> str | None:
    m = re.search(rf"\b{method}=([a-z]+)", h.get("authentication-results", ""), re.I)
    return m.group(1) if m else None


def _word(value: str | None) -> str | None:
    return value.split()[0] if value and value.split() else None


def failed_check(mail: InboundEmail) -> str | None:
    """ "SPF" or "DKIM" when the provider's verdict failed; ``None`` when it passed or was not given."""
    if mail.spf and mail.spf.strip().lower() in _BAD_VERDICTS:
        return "SPF"
    if mail.dkim:
        domain = mail.sender.rpartition("@")[2].lower()
        verdicts = re.findall(r"@?([a-z0-9.-]+)\s*:\s*([a-z]+)", mail.dkim.lower())
        own = [v for d, v in verdicts if d == domain]
        if own:  # a signature by the sender's own domain decides
            failed = any(v in _BAD_VERDICTS for v in own)
        else:  # only third-party signatures (or a bare verdict): refuse when none passed
            results = [v for _d, v in verdicts] or [mail.dkim.strip().lower()]
            failed = "pass" not in results and any(v in _BAD_VERDICTS for v in results)
        if failed:
            return "DKIM"
    return None


def strip_quoted(text: str) -> str:
    """The new part of a reply: no quoted lines, no "On … wrote:" history, no signature."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    kept: list[str] = []
    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.rstrip() == "--" or any(p.match(line.strip()) for p in _QUOTE_HEADS):
            break
        if line.strip().startswith("On ") and nxt.strip().endswith("wrote:"):
            break
        if line.lstrip().startswith(">"):
            continue
        kept.append(line)
    return "\n".join(kept).strip()[:MAX_TEXT]


def thread_ref(customer_id: str, root: str) -> str:
    ref = f"email:{customer_id}:{root}"
    return ref if len(ref) <= 200 else f"email:{customer_id}:sha256:{hashlib.sha256(root.encode()).hexdigest()}"


def delivery_id(mail: InboundEmail) -> str:
    """The dedup key: the Message-ID, or a digest of the message when it has none."""
    if mail.message_id and len(mail.message_id) <= 200:
        return f"email:{mail.message_id}"
    digest = hashlib.sha256(json.dumps([mail.message_id, mail.sender, mail.subject, mail.text]).encode())
    return f"email:sha256:{digest.hexdigest()}"
