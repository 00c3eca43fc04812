"""Messages to the shop's customers over signoff's own mail (Shopify has no messaging API).

This package sends no mail itself: the composition root injects a :class:`MessageSender` (SMTP,
and signoff's own record of what went out). Without one, ``send_message`` is not offered.

* The recipient is the customer's email on file, read from the shop (the ``Customer``
  document); the call has no address to give. Email only: SMS is not available.
* Crash safety with the ledger's key: the Message-ID is derived from the key
  (:func:`message_id`), so a resend after a crash carries the same Message-ID (mail clients
  show it once). The key is recorded only after the send; a call again with the same key finds
  the record and sends nothing, and ``lookup_write(key)`` answers from it."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from tools.backend import BackendError, Customer, MessageChannel, OutboxMessage, WriteRecord

#: The tools a :class:`MessageSender` adds to the backend's ``supported_tools``.
MESSAGE_TOOLS = frozenset({"send_message"})
_DOMAIN = re.compile(r"^[A-Za-z0-9.-]{1,200}$")
SUBJECTS = {
    "order_update": "An update on your order",
    "shipping_delay": "Your order is delayed",
    "return_label": "Your return label",
    "refund_confirmation": "Your refund",
    "password_reset": "Reset your password",
    "payment_link": "Update your payment details",
    "widget_code": "Your verification code",
    "slack_link_code": "Your link code",
}
DEFAULT_SUBJECT = "A message from our shop"


@dataclass(frozen=True, kw_only=True)
class ShopMail:
    """One message to a customer's email on file."""

    to: str
    subject: str
    body: str
    template: str
    message_id: str


class MessageSender(Protocol):
    """What the composition root injects: the mail out, and signoff's record of it."""

    @property
    def from_address(self) -> str:
        """The shop's address messages come from."""
        ...

    async def send(self, mail: ShopMail) -> None:
        """Hand ``mail`` to the mail server (raises when it was not accepted)."""
        ...

    async def record(self, message_id: str, *, customer_id: str) -> None:
        """Remember that ``message_id`` went to ``customer_id`` (after the send; idempotent)."""
        ...

    async def sent_at(self, message_id: str) -> datetime | None:
        """When ``message_id`` was recorded as sent; ``None``: never."""
        ...


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def message_id(key: str, from_address: str) -> str:
    """The Message-ID of the message sent with ledger key ``key`` (the same for every resend)."""
    domain = from_address.rpartition("@")[2].strip("<> ")
    return f"<signoff-msg.{_digest(key)[:32]}@{domain if _DOMAIN.match(domain) else 'signoff.invalid'}>"


def message_ref(key: str) -> str:
    """The id the tool shows for that message (``M-…``, from the same key)."""
    return f"M-{_digest(key)[:20]}"


async def send(
    sender: MessageSender,
    customer: Customer | None,
    *,
    channel: MessageChannel,
    template: str,
    body: str,
    idempotency_key: str,
) -> OutboxMessage:
    """Send ``body`` to ``customer``'s email on file once per key; a repeat answers from the record."""
    if customer is None:
        raise BackendError("not_found", "no such customer")
    if channel != "email":
        raise BackendError("channel_not_available", "this shop sends messages by email only", channel=channel)
    if not customer.email:
        raise BackendError("no_contact_on_file", "no email contact on file", channel=channel)
    mid = message_id(idempotency_key, sender.from_address)
    sent_at = await sender.sent_at(mid)
    if sent_at is None:
        subject = SUBJECTS.get(template, DEFAULT_SUBJECT)
        await sender.send(ShopMail(to=customer.email, subject=subject, body=body, template=template, message_id=mid))
        await sender.record(mid, customer_id=customer.id)
        sent_at = await sender.sent_at(mid)
        if sent_at is None:
            raise RuntimeError(f"the record of {mid} was not kept")
    return OutboxMessage(
        id=message_ref(idempotency_key),
        customer_id=customer.id,
        channel="email",
        to=customer.email,
        template=template,
        body=body,
        sent_at=sent_at,
    )


async def lookup(sender: MessageSender | None, key: str) -> WriteRecord | None:
    """The message sent with ``key``, if the record says it went out."""
    if sender is None or await sender.sent_at(message_id(key, sender.from_address)) is None:
        return None
    return WriteRecord(key=key, operation="send_message", result={"message_id": message_ref(key)})
