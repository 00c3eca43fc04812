"""The email inbox bridge: ``POST /email/inbound`` → the runtime → a reply over SMTP.

Reading the provider's webhook is :mod:`bot.email.parsing`. In order, a message is
refused with nothing stored when

1. the body is too large (413);
2. the HMAC signature is missing, wrong or outside a 5-minute window (401):
   ``X-Signoff-Signature: sha256=HEX(HMAC-SHA256(secret, "<X-Signoff-Timestamp>." + raw body))``;
3. it cannot be read (415/422);
4. the provider reports a failed SPF or DKIM verdict (403);
5. the sender is not a customer's address on file (403).

A redelivered Message-ID does nothing more (``processed_events``). Replies
thread by Message-ID / In-Reply-To / References into one conversation; a
pending confirmation is answered only by its 6-character code.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from agent import queries
from agent.gates import CODE_ALPHABET
from bot.app import App
from bot.email import wording as say
from bot.email.parsing import (
    InboundEmail,
    delivery_id,
    failed_check,
    parse_inbound,
    signature_ok,
    strip_quoted,
    thread_ref,
)
from bot.email.smtp import (
    Mailer,
    OutgoingEmail,
    SmtpConfig,
    conversation_of,
    new_message_id,
    reply_subject,
    valid_message_id,
)
from bot.web import ApiError, read_limited
from storage.events import first_time
from storage.records import Confirmation, Conversation
from tools.backend import Customer
from tools.context import Principal

log = logging.getLogger(__name__)

MAX_EMAIL_BODY = 1024 * 1024
_CODE = re.compile(rf"\b[{CODE_ALPHABET}]{{6}}\b")
_NEGATIVE = frozenset({"no", "not", "nope", "don't", "dont", "stop", "decline", "never", "wait"})


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


def answer_by_code(text: str, pending: list[Confirmation]) -> tuple[Confirmation, bool] | None:
    """The pending confirmation a reply names by code, and whether it says yes (any negation: no)."""
    codes = {c.code.upper(): c for c in pending}
    for token in _CODE.findall(text.upper()):
        if token in codes:
            words = set(re.findall(r"[a-z']+", text.lower()))
            negative = bool(words & _NEGATIVE) or any(w.endswith("n't") for w in words)
            return codes[token], not negative
    return None


# -- the bridge ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Processed:
    status: str  # processed | duplicate
    conversation_id: str | None = None
    reply_sent: bool = False


class EmailBridge:
    """Turns one authenticated inbound email into a runtime call and an emailed reply."""

    def __init__(
        self, app: App, config: EmailConfig, *, mailer: Mailer | None, now: Callable[[], float] = time.time
    ) -> None:
        self.app = app
        self.config = config
        self.mailer = mailer
        self.now = now

    async def handle(self, request: web.Request) -> web.Response:
        raw = await read_limited(request, self.config.max_body)
        if not self.config.secret:
            raise ApiError("unavailable", say.EMAIL_NOT_CONFIGURED)
        if not signature_ok(
            self.config.secret,
            raw,
            request.headers.get("X-Signoff-Signature"),
            request.headers.get("X-Signoff-Timestamp"),
            now=self.now(),
            tolerance_s=self.config.tolerance_s,
        ):
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
        return web.json_response(
            {"status": done.status, "conversationId": done.conversation_id, "replySent": done.reply_sent}
        )

    async def process(self, mail: InboundEmail, customer: Customer) -> Processed:
        rt = self.app.runtime
        if not await first_time(self.app.db, delivery_id(mail), "email", at=rt.s.clock()):
            return Processed(status="duplicate")
        principal = Principal(kind="customer", id=customer.id, customer_id=customer.id)
        conv = await self._thread(mail, principal)
        text = strip_quoted(mail.text) or mail.subject.strip() or "(empty message)"
        pending = await queries.pending_confirmations(rt, conv.id, principal.key)
        answer = answer_by_code(text, pending)
        if answer is not None:
            settled = await rt.confirm(answer[0].id, actor=principal, accept=answer[1], via="code", deliver_later=True)
            reply = settled.turn.answer if settled.turn else ""
        else:
            result = await rt.chat(
                principal=principal, channel="email", message=text, conversation_id=conv.id, deliver_later=True
            )
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
        return await rt.open_conversation(
            principal=principal, channel="email", external_ref=thread_ref(principal.id, root), meta=meta
        )

    async def _reply(
        self, mail: InboundEmail, customer: Customer, conv: Conversation, reply: str, waiting: list[Confirmation]
    ) -> bool:
        sender = (self.config.smtp.from_address if self.config.smtp else None) or mail.recipient or "signoff@localhost"
        message_id = new_message_id(conv.id, sender)
        refs = tuple(r for r in (*mail.references, mail.message_id) if r and valid_message_id(r))[-20:]
        await self._remember(conv.id, [i for i in (mail.message_id, message_id) if i], mail.subject)
        if self.mailer is None:
            log.warning("no SIGNOFF_SMTP_URL: reply in %s not emailed", conv.id)
            return False
        body = (reply or say.EMPTY_REPLY) + confirm_hints(waiting) + say.EMAIL_SIGNATURE
        try:
            await self.mailer.send(
                OutgoingEmail(
                    to=customer.email,
                    from_address=sender,
                    subject=reply_subject(mail.subject),
                    body=body,
                    message_id=message_id,
                    in_reply_to=mail.message_id,
                    references=refs,
                )
            )
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


__all__ = ["EMAIL", "EmailBridge", "EmailConfig", "answer_by_code", "inbound"]
