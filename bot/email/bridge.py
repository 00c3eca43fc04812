"""The email inbox bridge: ``POST /email/inbound`` accepts a mail; the worker answers it.

Reading the provider's webhook is :mod:`bot.email.parsing`. In order, a message is
refused with nothing stored when

1. the body is too large (413);
2. the HMAC signature is missing, wrong or outside a 5-minute window (401):
   ``X-Signoff-Signature: sha256=HEX(HMAC-SHA256(secret, "<X-Signoff-Timestamp>." + raw body))``;
3. it cannot be read (415/422);
4. the provider reports an explicit SPF or own-domain DKIM failure (403);
5. the sender is not a customer's address on file (403).

Otherwise the mail is accepted durably (``Inbox.accept(face="email")``, keyed by sender +
Message-ID, so a redelivery does nothing more) and the webhook answers at once; the turn
and the reply are :mod:`bot.email.turns`' job in the worker. Whether the provider vouched
for the sender (a DMARC pass, or a DKIM pass by the ``From:`` domain) is judged here from
the provider's own fields and travels with the mail: unvouched mail is answered from
public knowledge only.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from bot.app import App
from bot.email import wording as say
from bot.email.parsing import (
    InboundEmail,
    delivery_id,
    parse_inbound,
    sender_check,
    signature_ok,
    strip_quoted,
)
from bot.email.smtp import SmtpConfig
from bot.email.turns import FACE, answer_by_code, confirm_hints
from bot.web import ApiError, InboxFull, read_limited
from tools.backend import Customer

log = logging.getLogger(__name__)

MAX_EMAIL_BODY = 1024 * 1024


def smtp_config(settings: Any) -> SmtpConfig | None:
    """The SMTP settings; the shop's address is ``SIGNOFF_EMAIL_FROM`` (else the URL's ``from=``)."""
    url = settings.signoff_smtp_url
    if not url:
        return None
    cfg = SmtpConfig.from_url(url)
    if settings.signoff_email_from:
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


# -- the bridge ---------------------------------------------------------------------------


class EmailBridge:
    """Checks one inbound webhook and accepts the mail for the worker (see the module)."""

    def __init__(self, app: App, config: EmailConfig, *, now: Callable[[], float] = time.time) -> None:
        self.app = app
        self.config = config
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
        check = sender_check(mail)
        if check.verdict == "failed":
            raise ApiError("forbidden", say.EMAIL_AUTH_FAILED.format(check=check.reason))
        customer = await self.app.backend.find_customer_by_email(mail.sender)
        if customer is None or customer.email.strip().lower() != mail.sender.lower():
            raise ApiError("forbidden", say.EMAIL_UNKNOWN_SENDER)
        verified = check.verdict == "verified"
        accepted = await self.app.runtime.accept_inbound(
            FACE, [delivery_id(mail)], inbound_payload(mail, customer, verified=verified, check=check.reason)
        )
        if accepted.full:  # 503 + Retry-After: the provider redelivers later
            raise InboxFull(self.app.runtime.s.policy.inbound.retry_after_s)
        if not verified:
            log.info("email %s accepted unverified (%s): public answers only", accepted.id, check.reason)
        return web.json_response(
            {"status": "accepted" if accepted.fresh else "duplicate", "id": accepted.id, "verified": verified}
        )


def inbound_payload(mail: InboundEmail, customer: Customer, *, verified: bool, check: str) -> dict[str, Any]:
    """What the worker needs of a mail: its new text only (quotes stripped here, bounded), its
    thread ids, and the verdict. The raw body is not stored."""
    return {
        "customer_id": customer.id,
        "verified": verified,
        "check": check,
        "subject": mail.subject,
        "text": strip_quoted(mail.text),
        "message_id": mail.message_id,
        "in_reply_to": mail.in_reply_to,
        "references": list(mail.references),
    }


EMAIL: web.AppKey[EmailBridge] = web.AppKey("signoff_email", EmailBridge)


async def inbound(request: web.Request) -> web.Response:
    """``POST /email/inbound``."""
    return await request.app[EMAIL].handle(request)


__all__ = ["EMAIL", "EmailBridge", "EmailConfig", "answer_by_code", "confirm_hints", "inbound", "inbound_payload"]
