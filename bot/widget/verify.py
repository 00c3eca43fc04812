"""A guest proves who they are, and the session is bound to that one customer.

Two ways, both through the Slack link flow's storage and limits (``storage.identities``
``IdentityLinks``: requests capped per address and per requester, codes hashed, attempts
counted over a window, codes expiring):

* the order number and the email on that order;
* a one-time code sent to the email on file (``request_code`` then ``enter_code``).

Every answer reads the same whether or not the address is on file; a session already bound
stays bound to its customer. Each binding is audited.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from agent.face_port import FacePort
from bot.email.codes import send_code
from bot.email.smtp import Mailer
from bot.widget import events
from bot.widget.config import CHANNEL
from bot.widget.sessions import Visitor
from storage.identities import CodeCaps
from tools.backend import CommerceBackend

#: Order checks and code emails: at most 3 to one address and 5 by one session per hour.
CAPS = CodeCaps(per_address=3, per_requester=5, window=timedelta(hours=1))
CODE_TTL_S = 15 * 60
SUBJECT = "Your verification code"
_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def _email(value: str) -> str | None:
    address = value.strip().lower()
    local, at, domain = address.rpartition("@")
    if not (local and at and "." in domain) or len(address) > 254 or any(c.isspace() for c in address):
        return None
    return address


async def _bind(port: FacePort, visitor: Visitor, customer_id: str, via: str) -> str:
    store = events.store_of(port)
    if not await store.bind(visitor.session.id, customer_id=customer_id, via=via):
        return "already"
    await port.face_event(
        "widget.verified",
        {"session": visitor.session.id, "via": via, "shop": visitor.session.shop},
        principal=f"customer:{customer_id}",
    )
    return "verified"


async def by_order(port: FacePort, backend: CommerceBackend, visitor: Visitor, order_id: str, email: str) -> str:
    """``verified`` when ``order_id`` is an order of the customer whose email this is."""
    if visitor.session.customer_id is not None:
        return "already"
    address = _email(email)
    order = order_id.strip()
    if address is None or not order or len(order) > 64:
        return "not_verified"
    if not await port.links.request(CHANNEL, visitor.session.id, address, CAPS):
        return "limit"
    customer = await backend.find_customer_by_email(address)
    if customer is None or await backend.get_order(customer.id, order) is None:
        return "not_verified"
    return await _bind(port, visitor, customer.id, "order")


async def request_code(
    port: FacePort, backend: CommerceBackend, visitor: Visitor, email: str, *, mailer: Mailer | None = None
) -> str:
    """A code to the address on file, if it is one (the answer is ``code_sent`` either way): over
    SMTP when ``mailer`` is configured, else the shop's outbox."""
    if visitor.session.customer_id is not None:
        return "already"
    address = _email(email)
    if address is None:
        return "not_verified"
    if not await port.links.request(CHANNEL, visitor.session.id, address, CAPS):
        return "limit"
    customer = await backend.find_customer_by_email(address)
    if customer is not None:
        code = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(6))
        await port.links.start(CHANNEL, visitor.session.id, customer_id=customer.id, code=code, ttl_s=CODE_TTL_S)
        body = (
            f"Your verification code is {code}. Type it in the chat on our website to see your orders "
            "there. It expires in 15 minutes. If you did not ask for it, ignore this message."
        )
        await send_code(
            mailer,
            backend,
            customer,
            subject=SUBJECT,
            body=body,
            template="widget_code",
            key=f"widget-code:{visitor.session.id}:{secrets.token_hex(6)}",
        )
    return "code_sent"


async def enter_code(port: FacePort, visitor: Visitor, code: str) -> str:
    if visitor.session.customer_id is not None:
        return "already"
    links = port.links
    typed = code.strip()
    if len(typed) != 6 or not typed.isalnum() or not await links.pending(CHANNEL, visitor.session.id):
        return "code_bad"
    attempt = await links.attempt(CHANNEL, visitor.session.id, typed)
    if attempt.outcome == "linked" and attempt.customer_id is not None:
        return await _bind(port, visitor, attempt.customer_id, "code")
    return "code_locked" if attempt.outcome == "locked" else "code_bad"


__all__ = ["CAPS", "by_order", "enter_code", "request_code"]
