"""The Shopify backend's ``send_message`` over signoff's own SMTP (Shopify has no messaging API).

:class:`SmtpShopMessages` is the :class:`shopify.messages.MessageSender` the composition root
injects when SMTP is configured (``SIGNOFF_SMTP_URL`` and the shop's address): the mail goes
out through the one :class:`~bot.email.smtp.Mailer`, and is then recorded in ``sent_mail``
under its Message-ID (derived from the ledger's key by the backend), which is what
``lookup_write`` reads back. A customer's reply to such a mail does not thread into a
conversation: the record names none (:data:`NO_CONVERSATION`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from bot.email.smtp import Mailer, OutgoingEmail, SmtpMailer
from shopify.messages import ShopMail
from storage.mailbox import SentMail

if TYPE_CHECKING:
    from bot.settings import Settings

#: The ``conversation_id`` of a shop message's record: a message, not a conversation's reply.
NO_CONVERSATION = "shop-message"


@dataclass(frozen=True)
class SmtpShopMessages:
    """Sends over SMTP from the shop's address; records in signoff's ``sent_mail``."""

    mailer: Mailer
    from_address: str
    sent: SentMail

    async def send(self, mail: ShopMail) -> None:
        await self.mailer.send(
            OutgoingEmail(
                to=mail.to,
                from_address=self.from_address,
                subject=mail.subject,
                body=mail.body,
                message_id=mail.message_id,
            )
        )

    async def record(self, message_id: str, *, customer_id: str) -> None:
        await self.sent.record(message_id, conversation_id=NO_CONVERSATION, principal=f"customer:{customer_id}")

    async def sent_at(self, message_id: str) -> datetime | None:
        return await self.sent.sent_at(message_id)


def shop_sender(settings: Settings, sent: SentMail) -> SmtpShopMessages | None:
    """The sender for ``settings``: SMTP from the shop's address (``SIGNOFF_EMAIL_FROM`` or the
    URL's ``from=``); ``None`` without both, and ``send_message`` is then not offered."""
    cfg = settings.smtp_config()
    if cfg is None or not cfg.from_address:
        return None
    return SmtpShopMessages(mailer=SmtpMailer(cfg), from_address=cfg.from_address, sent=sent)
