"""One-time codes to a customer's address on file, for every face that links or verifies people
(the Slack link flow, the widget's guest verification): over SMTP when it is configured, else into
the shop's outbox (the sandbox's; a Shopify shop without SMTP offers no messages at all). Never to
an address someone typed: the customer record's own."""

from __future__ import annotations

from bot.email.smtp import Mailer, OutgoingEmail, new_message_id
from tools.backend import CommerceBackend, Customer


async def send_code(
    mailer: Mailer | None,
    backend: CommerceBackend,
    customer: Customer,
    *,
    subject: str,
    body: str,
    template: str,
    key: str,
) -> None:
    """``body`` (which carries the code) to ``customer``'s address on file, once per ``key``'s
    Message-ID over SMTP, or through the shop's ``send_message`` keyed by ``key``."""
    sender = getattr(mailer, "from_address", None)
    if mailer is not None and sender:
        message_id = new_message_id(key.replace(":", "-"), sender)
        await mailer.send(
            OutgoingEmail(to=customer.email, from_address=sender, subject=subject, body=body, message_id=message_id)
        )
        return
    await backend.send_message(customer.id, channel="email", template=template, body=body, idempotency_key=key)


__all__ = ["send_code"]
