"""Outgoing email: replies to the inbox bridge's threads, over SMTP.

``SIGNOFF_SMTP_URL`` is ``smtp://[user:pass@]host:port`` or ``smtps://…``;
query options ``starttls=1`` and ``from=support@shop.example`` (the shop's
address replies come from). Sent with :mod:`aiosmtplib` (asyncio, implicit TLS
or STARTTLS, certificates verified, one timeout for every step). A reply's Message-ID names its conversation
(``<signoff.{conversation_id}.{nonce}@domain>``), so a customer's answer that
only carries ``In-Reply-To`` still finds its thread.
"""

from __future__ import annotations

import logging
import re
import secrets
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate
from typing import Protocol

from agent.notify import EscalationNotice, ShadowNotice
from agent.outcomes import TurnResult
from bot.email.config import SmtpConfig
from storage.records import Approval, Conversation
from tools.backend import CommerceBackend

log = logging.getLogger(__name__)

_OURS = re.compile(r"^<signoff\.([A-Za-z0-9_-]{1,64})\.[0-9a-f]{8,32}@[^<>\s@]+>$")
_MSG_ID = re.compile(r"^<[^<>\s]{1,900}>$")


@dataclass(frozen=True, kw_only=True)
class OutgoingEmail:
    to: str
    from_address: str
    subject: str
    body: str
    message_id: str
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()


class Mailer(Protocol):
    async def send(self, mail: OutgoingEmail) -> None: ...


class SmtpMailer:
    """Sends over SMTP with :mod:`aiosmtplib`: ``smtps://`` is implicit TLS; ``starttls=1``
    upgrades a plain connection (and fails rather than send in the clear if the server
    cannot); without either the connection stays plain, as configured."""

    def __init__(self, config: SmtpConfig) -> None:
        self.config = config

    @property
    def from_address(self) -> str | None:
        """The shop's address mail comes from (``SIGNOFF_EMAIL_FROM`` or the URL's ``from=``)."""
        return self.config.from_address

    async def send(self, mail: OutgoingEmail) -> None:
        import aiosmtplib  # at the first mail sent: a process that never sends one does not hold it

        c = self.config
        await aiosmtplib.send(
            compose(mail),
            hostname=c.host,
            port=c.port,
            use_tls=c.ssl,
            start_tls=c.starttls and not c.ssl,
            username=c.username,
            password=c.password,
            timeout=c.timeout_s,
        )


def _header(value: str, limit: int = 300) -> str:
    """Header text from untrusted input: one line, bounded."""
    return " ".join(value.split())[:limit]


def compose(mail: OutgoingEmail) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = _header(mail.from_address)
    msg["To"] = _header(mail.to)
    msg["Subject"] = _header(mail.subject, 200)
    msg["Date"] = formatdate(localtime=False, usegmt=True)
    msg["Message-ID"] = mail.message_id
    if mail.in_reply_to:
        msg["In-Reply-To"] = mail.in_reply_to
    if mail.references:
        msg["References"] = " ".join(mail.references)
    msg["Auto-Submitted"] = "auto-replied"
    msg.set_content(mail.body)
    return msg


def reply_subject(subject: str) -> str:
    subject = _header(subject, 180) or "Your message"
    return subject if re.match(r"(?i)^re:", subject) else f"Re: {subject}"


def new_message_id(conversation_id: str, from_address: str) -> str:
    domain = from_address.rpartition("@")[2].strip("<> ") or "signoff.invalid"
    if not re.fullmatch(r"[A-Za-z0-9.-]{1,200}", domain):
        domain = "signoff.invalid"
    return f"<signoff.{conversation_id}.{secrets.token_hex(6)}@{domain}>"


def conversation_of(message_id: str) -> str | None:
    """The conversation id a reply of ours names, if ``message_id`` is one of ours."""
    m = _OURS.match(message_id)
    return m.group(1) if m else None


def valid_message_id(value: str) -> bool:
    return bool(_MSG_ID.match(value))


class EmailFollowUps:
    """The email face's :class:`Notifier`: follow-ups on email conversations (an approval decided)
    go to the customer's address on file (S3), in the conversation's mail thread. Approval cards
    and escalations are for staff surfaces; this face has none."""

    def __init__(self, *, mailer: Mailer, backend: CommerceBackend, from_address: str) -> None:
        self.mailer = mailer
        self.backend = backend
        self.from_address = from_address

    async def approval_requested(self, approval: Approval) -> None:
        return None

    async def approval_decided(self, approval: Approval) -> None:
        return None

    async def escalated(self, notice: EscalationNotice) -> None:
        return None

    async def shadow_recorded(self, notice: ShadowNotice) -> None:
        return None

    async def follow_up(self, conversation: Conversation, result: TurnResult) -> None:
        if not conversation.customer_id:
            return
        customer = await self.backend.get_customer(conversation.customer_id)
        if customer is None:
            return
        thread = conversation.meta.get("email") or {}
        ids = [i for i in thread.get("message_ids", []) if isinstance(i, str) and valid_message_id(i)]
        await self.mailer.send(
            OutgoingEmail(
                to=customer.email,
                from_address=self.from_address,
                subject=reply_subject(str(thread.get("subject", ""))),
                body=result.reply,
                message_id=new_message_id(conversation.id, self.from_address),
                in_reply_to=ids[-1] if ids else None,
                references=tuple(ids[-20:]),
            )
        )


__all__ = [
    "EmailFollowUps",
    "Mailer",
    "OutgoingEmail",
    "SmtpConfig",
    "SmtpMailer",
    "compose",
    "conversation_of",
    "new_message_id",
    "reply_subject",
    "valid_message_id",
]
