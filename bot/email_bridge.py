"""The email inbox bridge: ``POST /email/inbound`` → the runtime → a reply over SMTP.

Accepts the inbound-parse shapes providers send (JSON; multipart/form-data or
URL-encoded forms with SendGrid fields ``from, to, subject, text, headers,
envelope, SPF, dkim`` or Mailgun fields ``sender, recipient, subject,
body-plain, Message-Id, In-Reply-To, References``) and normalises them to one
:class:`InboundEmail`. In order, a message is refused with nothing stored when

1. the body is too large (413);
2. the HMAC signature is missing, wrong or outside a 5-minute window (401):
   ``X-Signoff-Signature: sha256=HEX(HMAC-SHA256(secret, "<X-Signoff-Timestamp>." + raw body))``;
3. it cannot be read (415/422);
4. the provider reports a failed SPF or DKIM verdict (403);
5. the sender is not a customer's address on file (403).

A redelivered Message-ID does nothing more (``processed_events``). Replies
thread by Message-ID / In-Reply-To / References into one conversation; a
pending confirmation is answered by its 6-character code or a plain "yes".
"""

from __future__ import annotations

import codecs
import dataclasses
import hashlib
import hmac
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email import policy
from email.parser import BytesParser, HeaderParser
from email.utils import getaddresses
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from agent import queries
from agent.gates import CODE_ALPHABET
from bot import api_wording as say
from bot.api import read_limited
from bot.api_wording import ApiError
from bot.app import App
from bot.smtp import Mailer, OutgoingEmail, SmtpConfig, conversation_of, new_message_id, reply_subject, valid_message_id
from storage.events import first_time
from storage.records import Confirmation, Conversation
from tools.backend import Customer
from tools.context import Principal

log = logging.getLogger(__name__)

MAX_EMAIL_BODY = 1024 * 1024
MAX_TEXT = 4000
_ADDRESS = re.compile(r"^[^@\s<>(),;:\"\[\]\\]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}\.)*[A-Za-z0-9-]{1,63}$")
_IDS = re.compile(r"<[^<>\s]{1,900}>")
_CODE = re.compile(rf"\b[{CODE_ALPHABET}]{{6}}\b")
_NEGATIVE = frozenset({"no", "not", "nope", "don't", "dont", "stop", "decline", "never", "wait"})
_QUOTE_HEADS = (re.compile(r"^On\b.*\bwrote:\s*$"), re.compile(r"^-{2,}\s*Original Message\s*-{2,}", re.I),
                re.compile(r"^_{10,}\s*$"), re.compile(r"^From:\s.+$"), re.compile(r"^Le\b.*a écrit\s*:\s*$"),
                re.compile(r"^Am\b.*schrieb.*:\s*$"))
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


def smtp_config(settings: Any) -> SmtpConfig | None:
    """The SMTP settings, with ``SIGNOFF_EMAIL_FROM`` as the shop's address unless the URL names one."""
    url = settings.signoff_smtp_url
    if not url:
        return None
    cfg = SmtpConfig.from_url(url)
    if cfg.from_address is None and settings.signoff_email_from:
        cfg = dataclasses.replace(cfg, from_address=settings.signoff_email_from)
    return cfg


@dataclass(frozen=True, kw_only=True)
class EmailConfig:
    secret: str | None = None
    smtp: SmtpConfig | None = None
    tolerance_s: int = 300
    max_body: int = MAX_EMAIL_BODY

    @classmethod
    def from_settings(cls, settings: Any) -> EmailConfig:
        if settings is None:
            return cls()
        return cls(secret=settings.signoff_email_secret, smtp=smtp_config(settings))


# -- signature --------------------------------------------------------------------------

def sign(secret: str, body: bytes, timestamp: int | str) -> str:
    """The ``X-Signoff-Signature`` value for ``body`` sent at ``timestamp`` (Unix seconds)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def signature_ok(secret: str, body: bytes, signature: str | None, timestamp: str | None, *, now: float,
                 tolerance_s: int = 300) -> bool:
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
    envelope = _json_object(raw_envelope) if isinstance(raw_envelope, str) else (
        raw_envelope if isinstance(raw_envelope, dict) else {})
    sender = _first(_s(f, "from"), h.get("from"), _s(f, "sender"), _str_or_none(envelope.get("from")))
    if sender is None:
        raise ValueError("no sender")
    to = _first(_s(f, "to"), _s(f, "recipient"), h.get("to"))
    refs = _first(h.get("references"), _s(f, "references")) or ""
    return InboundEmail(
        sender=single_address(sender), recipient=_any_address(to),
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
    """"SPF" or "DKIM" when the provider's verdict failed; ``None`` when it passed or was not given."""
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


def answer_by_code(text: str, pending: list[Confirmation]) -> tuple[Confirmation, bool] | None:
    """The pending confirmation a reply names by code, and whether it says yes (any negation: no)."""
    codes = {c.code.upper(): c for c in pending}
    for token in _CODE.findall(text.upper()):
        if token in codes:
            words = set(re.findall(r"[a-z']+", text.lower()))
            negative = bool(words & _NEGATIVE) or any(w.endswith("n't") for w in words)
            return codes[token], not negative
    return None


def thread_ref(customer_id: str, root: str) -> str:
    ref = f"email:{customer_id}:{root}"
    return ref if len(ref) <= 200 else f"email:{customer_id}:sha256:{hashlib.sha256(root.encode()).hexdigest()}"


def delivery_id(mail: InboundEmail) -> str:
    """The dedup key: the Message-ID, or a digest of the message when it has none."""
    if mail.message_id and len(mail.message_id) <= 200:
        return f"email:{mail.message_id}"
    digest = hashlib.sha256(json.dumps([mail.message_id, mail.sender, mail.subject, mail.text]).encode())
    return f"email:sha256:{digest.hexdigest()}"


# -- the bridge ---------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Processed:
    status: str  # processed | duplicate
    conversation_id: str | None = None
    reply_sent: bool = False


class EmailBridge:
    """Turns one authenticated inbound email into a runtime call and an emailed reply."""

    def __init__(self, app: App, config: EmailConfig, *, mailer: Mailer | None,
                 now: Callable[[], float] = time.time) -> None:
        self.app = app
        self.config = config
        self.mailer = mailer
        self.now = now

    async def handle(self, request: web.Request) -> web.Response:
        raw = await read_limited(request, self.config.max_body)
        if not self.config.secret:
            raise ApiError("unavailable", say.EMAIL_NOT_CONFIGURED)
        if not signature_ok(self.config.secret, raw, request.headers.get("X-Signoff-Signature"),
                            request.headers.get("X-Signoff-Timestamp"), now=self.now(),
                            tolerance_s=self.config.tolerance_s):
            raise ApiError("unauthorized", say.EMAIL_BAD_SIGNATURE)
        try:
            mail = parse_inbound(request.content_type, request.headers.get("Content-Type", ""), raw)
        except LookupError:
            raise ApiError("unsupported_media_type", say.WRONG_EMAIL_CONTENT_TYPE) from None
        except ValueError as exc:
            raise ApiError("invalid", say.EMAIL_UNPARSEABLE.format(reason=str(exc)[:120])) from None
        if check := failed_check(mail):
            raise ApiError("forbidden", say.EMAIL_AUTH_FAILED.format(check=check))
        customer = await self.app.backend.find_customer_by_email(mail.sender)
        if customer is None or customer.email.strip().lower() != mail.sender.lower():
            raise ApiError("forbidden", say.EMAIL_UNKNOWN_SENDER)
        done = await self.process(mail, customer)
        return web.json_response({"status": done.status, "conversationId": done.conversation_id,
                                  "replySent": done.reply_sent})

    async def process(self, mail: InboundEmail, customer: Customer) -> Processed:
        rt = self.app.runtime
        if not await first_time(self.app.db, delivery_id(mail), "email"):
            return Processed(status="duplicate")
        principal = Principal(kind="customer", id=customer.id, customer_id=customer.id)
        conv = await self._thread(mail, principal)
        text = strip_quoted(mail.text) or mail.subject.strip() or "(empty message)"
        pending = await queries.pending_confirmations(rt, conv.id, principal.key)
        answer = answer_by_code(text, pending)
        if answer is not None:
            settled = await rt.confirm(answer[0].id, actor=principal, accept=answer[1], via="code",
                                       deliver_later=True)
            reply = settled.turn.answer if settled.turn else ""
        else:
            result = await rt.chat(principal=principal, channel="email", message=text,
                                   conversation_id=conv.id, deliver_later=True)
            reply = result.notice if result.outcome == "asked" else result.answer
        # The mail lists every waiting confirmation with its code (the runtime's text, not the model's).
        waiting = await queries.pending_confirmations(rt, conv.id, principal.key)
        sent = await self._reply(mail, customer, conv, reply, waiting)
        if sent:
            await rt.mark_shown([c.id for c in waiting])
        return Processed(status="processed", conversation_id=conv.id, reply_sent=sent)

    async def _thread(self, mail: InboundEmail, principal: Principal) -> Conversation:
        rt = self.app.runtime
        for mid in (*reversed(mail.references), mail.in_reply_to):
            cid = conversation_of(mid) if mid else None
            if cid and (conv := await queries.visible_conversation(rt, principal, cid)) is not None:
                return conv
        root = next(iter(mail.references), None) or mail.in_reply_to or mail.message_id or delivery_id(mail)
        meta = {"email": {"root": root, "subject": mail.subject, "message_ids": []}}
        return await rt.open_conversation(principal=principal, channel="email",
                                          external_ref=thread_ref(principal.id, root), meta=meta)

    async def _reply(self, mail: InboundEmail, customer: Customer, conv: Conversation, reply: str,
                     waiting: list[Confirmation]) -> bool:
        sender = (self.config.smtp.from_address if self.config.smtp else None) or mail.recipient \
            or "signoff@localhost"
        message_id = new_message_id(conv.id, sender)
        refs = tuple(r for r in (*mail.references, mail.message_id) if r and valid_message_id(r))[-20:]
        await self._remember(conv.id, [i for i in (mail.message_id, message_id) if i], mail.subject)
        if self.mailer is None:
            log.warning("no SIGNOFF_SMTP_URL: reply in %s not emailed", conv.id)
            return False
        body = (reply or say.EMPTY_REPLY) + confirm_hints(waiting) + say.EMAIL_SIGNATURE
        try:
            await self.mailer.send(OutgoingEmail(
                to=customer.email, from_address=sender, subject=reply_subject(mail.subject), body=body,
                message_id=message_id, in_reply_to=mail.message_id, references=refs))
        except Exception:  # the turn is stored; a lost reply is logged, never retried into a second turn
            log.exception("reply for %s could not be sent", conv.id)
            return False
        return True

    async def _remember(self, conversation_id: str, ids: list[str], subject: str) -> None:
        conv = await self.app.runtime.s.conversations.get(conversation_id)
        if conv is None:
            return
        thread = dict(conv.meta.get("email") or {})
        seen = [i for i in thread.get("message_ids", []) if isinstance(i, str)]
        thread["message_ids"] = (seen + [i for i in ids if i not in seen])[-100:]
        thread.setdefault("subject", subject)
        await self.app.runtime.s.conversations.set_meta(conversation_id, {**conv.meta, "email": thread})


def confirm_hints(waiting: list[Confirmation]) -> str:
    if len(waiting) == 1:
        return "\n\n" + say.CONFIRM_HINT.format(code=waiting[0].code, summary=waiting[0].summary)
    if waiting:
        return "\n\n" + say.CONFIRM_HINT_MANY + "".join(f"\n  {c.code}: {c.summary}" for c in waiting)
    return ""


EMAIL: web.AppKey[EmailBridge] = web.AppKey("signoff_email", EmailBridge)


async def inbound(request: web.Request) -> web.Response:
    """``POST /email/inbound``."""
    return await request.app[EMAIL].handle(request)


__all__ = ["EMAIL", "EmailBridge", "EmailConfig", "InboundEmail", "answer_by_code", "failed_check", "inbound",
           "normalise", "parse_inbound", "sign", "signature_ok", "strip_quoted"]
