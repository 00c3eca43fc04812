"""The email inbox bridge: ``POST /email/inbound`` accepts a mail; the worker answers it.

Reading the provider's webhook is :mod:`bot.email.parsing`. In order, a message is
refused with nothing stored when

1. the body is larger than ``MAX_EMAIL_BODY`` (64 MiB, beyond any provider's post: 413);
2. the HMAC signature is missing, wrong or outside a 5-minute window (401):
   ``X-Signoff-Signature: sha256=HEX(HMAC-SHA256(secret, "<X-Signoff-Timestamp>." + raw body))``;
3. it cannot be read (415/422);
4. the provider reports an explicit SPF or own-domain DKIM failure (403);
5. the sender is not a customer's address on file (403).

Otherwise the mail is accepted durably (``Inbox.accept(face="email")``, keyed by sender +
Message-ID, so a redelivery does nothing more) and the webhook answers at once; the turn
and the reply are :mod:`bot.email.turns`' job in the worker. Whether the sender is vouched
for (a provider DMARC pass, a DKIM pass by the ``From:`` domain, or our own aligned DKIM
check of the raw message: :mod:`bot.email.senders`) is judged here and travels with the
mail: unvouched mail is answered from public knowledge only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from agent.face_port import FacePort
from bot.email import wording as say
from bot.email.config import SmtpConfig
from bot.email.parsing import InboundEmail, delivery_id, parse_inbound, signature_ok
from bot.email.replies import extract_reply
from bot.email.senders import TxtLookup, dns_txt, own_check
from bot.email.turns import FACE, answer_by_code, confirm_hints
from bot.settings import reveal
from bot.web import ApiError, InboxFull, read_limited
from tools.backend import CommerceBackend, Customer

log = logging.getLogger(__name__)

#: The largest webhook body read. Providers post at most ~30 MB messages (base64 grows them
#: by a third): a mail with a 25 MB attachment is read, its attachment dropped, its words kept.
MAX_EMAIL_BODY = 64 * 1024 * 1024
#: Bodies above this are parsed in a thread, off the event loop.
INLINE_PARSE = 256 * 1024


@dataclass(frozen=True, kw_only=True)
class EmailConfig:
    secret: str | None = field(default=None, repr=False)
    smtp: SmtpConfig | None = None
    tolerance_s: int = 300
    max_body: int = MAX_EMAIL_BODY
    #: DNS TXT lookups for our own DKIM check (tests stub it).
    txt_lookup: TxtLookup = dns_txt

    @classmethod
    def from_settings(cls, settings: Any) -> EmailConfig:
        if settings is None:
            return cls()
        return cls(secret=reveal(settings.signoff_email_secret), smtp=settings.smtp_config())


# -- the bridge ---------------------------------------------------------------------------


#: The webhook's path (INTERFACES.md "Email bridge").
INBOUND_PATH = "/email/inbound"


class EmailBridge:
    """Checks one inbound webhook and accepts the mail for the worker (see the module): it holds
    the runtime as the email face's :class:`FacePort`, the shop (senders on file) and its config."""

    def __init__(
        self,
        port: FacePort,
        backend: CommerceBackend,
        config: EmailConfig,
        *,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.port = port
        self.backend = backend
        self.config = config
        self.now = now

    def routes(self) -> list[web.RouteDef]:
        """``POST /email/inbound``: always served, 503 ``unavailable`` without a secret."""
        return [web.post(INBOUND_PATH, self.handle)]

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
        mail, reply = await self._parse(request, raw)
        # Our own DKIM check may ask DNS and hash a large body: in a thread, off the loop.
        check = await asyncio.to_thread(own_check, mail, self.config.txt_lookup)
        if check.verdict == "failed":
            raise ApiError("forbidden", say.EMAIL_AUTH_FAILED.format(check=check.reason))
        customer = await self.backend.find_customer_by_email(mail.sender)
        if customer is None or customer.email.strip().lower() != mail.sender.lower():
            raise ApiError("forbidden", say.EMAIL_UNKNOWN_SENDER)
        verified = check.verdict == "verified"
        accepted = await self.port.accept(
            FACE,
            [delivery_id(mail)],
            inbound_payload(mail, customer, verified=verified, check=check.reason, text=reply),
        )
        if accepted.full:  # 503 + Retry-After: the provider redelivers later
            raise InboxFull(self.port.retry_after_s)
        if not verified:
            log.info("email %s accepted unverified (%s): public answers only", accepted.id, check.reason)
        return web.json_response(
            {"status": "accepted" if accepted.fresh else "duplicate", "id": accepted.id, "verified": verified}
        )

    async def _parse(self, request: web.Request, raw: bytes) -> tuple[InboundEmail, str]:
        """The mail and its extracted reply; a large body is read in a thread, off the loop."""
        args = (request.content_type, request.headers.get("Content-Type", ""), raw)
        try:
            if len(raw) > INLINE_PARSE:
                return await asyncio.to_thread(read_mail, *args)
            return read_mail(*args)
        except LookupError:
            raise ApiError("unsupported_media_type", say.WRONG_EMAIL_CONTENT_TYPE) from None
        except ValueError as exc:
            raise ApiError("invalid", say.EMAIL_UNPARSEABLE.format(reason=str(exc)[:120])) from None


def read_mail(content_type: str, content_type_header: str, raw: bytes) -> tuple[InboundEmail, str]:
    """A provider's payload read (:func:`parse_inbound`) and the reply a person reads in it."""
    mail = parse_inbound(content_type, content_type_header, raw)
    return mail, extract_reply(mail.text)


def inbound_payload(
    mail: InboundEmail, customer: Customer, *, verified: bool, check: str, text: str | None = None
) -> dict[str, Any]:
    """What the worker needs of a mail: its new text only (the reply extracted here, bounded),
    its thread ids, the names of attachments not read, whether the body was cut, and the
    verdict. The raw body is not stored."""
    return {
        "customer_id": customer.id,
        "verified": verified,
        "check": check,
        "subject": mail.subject,
        "text": extract_reply(mail.text) if text is None else text,
        "attachments": list(mail.attachments),
        "truncated": mail.truncated,
        "message_id": mail.message_id,
        "in_reply_to": mail.in_reply_to,
        "references": list(mail.references),
    }


__all__ = [
    "INBOUND_PATH",
    "EmailBridge",
    "EmailConfig",
    "answer_by_code",
    "confirm_hints",
    "inbound_payload",
    "read_mail",
]
