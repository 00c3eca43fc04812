"""The sandbox store's business rules for writes, each run inside one open transaction.

:class:`sandbox.store.SandboxStore` wraps every function here with the
idempotency check, so these only decide and change rows. An order is locked
(``SELECT … FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` already
serialises writers) before money is computed, so two different keys cannot
both refund the same captured amount.
"""

from __future__ import annotations

import re
import secrets
from collections import defaultdict
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from sandbox import codec
from sandbox.models import (
    StoreCustomerRow,
    StoreInvoiceRow,
    StoreOrderItemRow,
    StoreOrderRow,
    StoreOutboxRow,
    StorePaymentRow,
    StoreRefundRow,
    StoreReturnItemRow,
    StoreReturnRow,
)
from tools.backend import (
    Address,
    BackendError,
    Customer,
    MessageChannel,
    Order,
    OutboxMessage,
    Payment,
    Refund,
    Return,
    ReturnItem,
)

CANCELLABLE = ("PENDING", "PAID")
ADDRESS_CHANGEABLE = ("PENDING", "PAID")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_PHONE = re.compile(r"^\+?[0-9][0-9 ().-]{5,24}$")


def new_id(prefix: str) -> str:
    """A short random id such as ``R-9f2c41d07a``."""
    return f"{prefix}-{secrets.token_hex(5)}"


def not_found(what: str = "order") -> BackendError:
    """The one refusal for both "missing" and "someone else's" (S1)."""
    return BackendError("not_found", f"no such {what}")


async def owned_order(s: AsyncSession, customer_id: str, order_id: str, *, lock: bool = True) -> StoreOrderRow:
    """The customer's order, locked for update; ``not_found`` otherwise."""
    stmt = select(StoreOrderRow).where(StoreOrderRow.id == order_id, StoreOrderRow.customer_id == customer_id)
    if lock:
        stmt = stmt.with_for_update()
    row = (await s.execute(stmt)).scalar_one_or_none()
    if row is None:
        raise not_found()
    return row


async def money_on(s: AsyncSession, order_id: str) -> tuple[int, int]:
    """``(captured, refunded)`` for an order; refunded payments were captured once."""
    captured = await s.scalar(
        select(func.coalesce(func.sum(StorePaymentRow.amount_minor), 0)).where(
            StorePaymentRow.order_id == order_id,
            StorePaymentRow.status.in_(("captured", "refunded")),
        )
    )
    refunded = await s.scalar(
        select(func.coalesce(func.sum(StoreRefundRow.amount_minor), 0)).where(StoreRefundRow.order_id == order_id)
    )
    return int(captured or 0), int(refunded or 0)


async def _add_refund(
    s: AsyncSession,
    now: datetime,
    order: StoreOrderRow,
    amount: int,
    *,
    reason_code: str | None,
    return_id: str | None,
    captured: int,
    refunded: int,
    kind: str = "refund",
) -> StoreRefundRow:
    row = StoreRefundRow(
        id=new_id("R"),
        order_id=order.id,
        amount_minor=amount,
        currency=order.currency,
        reason_code=reason_code,
        return_id=return_id,
        kind=kind,
        created_at=now,
    )
    s.add(row)
    if refunded + amount >= captured:
        await s.execute(
            update(StorePaymentRow)
            .where(StorePaymentRow.order_id == order.id, StorePaymentRow.status == "captured")
            .values(status="refunded")
        )
    await s.flush()
    return row


async def issue_refund(
    s: AsyncSession,
    now: datetime,
    customer_id: str,
    order_id: str,
    *,
    amount_minor: int,
    currency: str,
    reason_code: str,
    return_id: str | None,
) -> Refund:
    """Refund up to captured − refunded; a full refund marks the payments refunded."""
    order = await owned_order(s, customer_id, order_id)
    if amount_minor <= 0:
        raise BackendError("invalid_amount", "a refund must be a positive amount", amount_minor=amount_minor)
    if currency != order.currency:
        raise BackendError("currency_mismatch", f"the order is in {order.currency}", order_currency=order.currency)
    captured, refunded = await money_on(s, order.id)
    refundable = max(0, captured - refunded)
    if amount_minor > refundable:
        raise BackendError(
            "amount_exceeds_refundable",
            f"at most {refundable} can be refunded",
            refundable_minor=refundable,
            currency=order.currency,
        )
    if return_id is not None:
        ret = await s.scalar(
            select(StoreReturnRow).where(StoreReturnRow.id == return_id, StoreReturnRow.order_id == order.id)
        )
        if ret is None:
            raise not_found("return")
        if ret.status in ("refunded", "rejected"):
            raise BackendError("return_not_eligible", f"the return is {ret.status}", status=ret.status)
        ret.status = "refunded"
    row = await _add_refund(
        s,
        now,
        order,
        amount_minor,
        reason_code=reason_code,
        return_id=return_id,
        captured=captured,
        refunded=refunded,
    )
    return codec.refund(row)


async def cancel_order(s: AsyncSession, now: datetime, customer_id: str, order_id: str, *, reason_code: str) -> Order:
    """Cancel a PENDING or PAID order; money already captured is refunded in full."""
    order = await owned_order(s, customer_id, order_id)
    if order.status not in CANCELLABLE:
        raise BackendError(
            "order_not_cancellable",
            f"a {order.status} order cannot be cancelled",
            status=order.status,
        )
    captured, refunded = await money_on(s, order.id)
    if captured > refunded:
        await _add_refund(
            s,
            now,
            order,
            captured - refunded,
            reason_code=reason_code,
            return_id=None,
            captured=captured,
            refunded=refunded,
            kind="cancellation",
        )
    order.status = "CANCELLED"
    await s.flush()
    return codec.order(order)


async def update_shipping_address(s: AsyncSession, customer_id: str, order_id: str, *, address: Address) -> Order:
    """Change where an order ships, until it has shipped."""
    order = await owned_order(s, customer_id, order_id)
    if order.status not in ADDRESS_CHANGEABLE:
        raise BackendError(
            "address_change_not_allowed",
            f"the address of a {order.status} order cannot change",
            status=order.status,
        )
    order.shipping_address = codec.address_to_json(address)
    await s.flush()
    return codec.order(order)


async def create_reorder(s: AsyncSession, now: datetime, customer_id: str, order_id: str) -> Order:
    """A new PENDING order with the same items and address (notes are not copied)."""
    source = await owned_order(s, customer_id, order_id, lock=False)
    row = StoreOrderRow(
        id=new_id("O"),
        customer_id=customer_id,
        status="PENDING",
        currency=source.currency,
        total_minor=sum(i.qty * i.unit_minor for i in source.items),
        placed_at=now,
        shipping_address=source.shipping_address,
        notes=None,
        items=[
            StoreOrderItemRow(position=n, sku=i.sku, name=i.name, qty=i.qty, unit_minor=i.unit_minor)
            for n, i in enumerate(source.items)
        ],
    )
    s.add(row)
    await s.flush()
    return codec.order(row)


async def create_return(
    s: AsyncSession,
    now: datetime,
    customer_id: str,
    order_id: str,
    *,
    items: list[ReturnItem],
    reason_code: str,
) -> Return:
    """Request a return of delivered items not already returned."""
    order = await owned_order(s, customer_id, order_id)
    if order.status != "DELIVERED":
        raise BackendError("order_not_delivered", f"a {order.status} order cannot be returned", status=order.status)
    if not items:
        raise BackendError("invalid_items", "name at least one item to return")
    available: dict[str, int] = defaultdict(int)
    for line in order.items:
        available[line.sku] += line.qty
    earlier = await s.scalars(
        select(StoreReturnRow).where(StoreReturnRow.order_id == order.id, StoreReturnRow.status != "rejected")
    )
    for ret in earlier:
        for ri in ret.items:
            available[ri.sku] -= ri.qty
    wanted: dict[str, int] = defaultdict(int)
    for item in items:
        wanted[item.sku] += item.qty
    for sku, qty in wanted.items():
        if sku not in available or qty < 1 or qty > available[sku]:
            raise BackendError(
                "invalid_items",
                f"{sku!r} x{qty} cannot be returned from this order",
                sku=sku,
                qty=qty,
                returnable_qty=max(0, available.get(sku, 0)),
            )
    row = StoreReturnRow(
        id=new_id("RT"),
        order_id=order.id,
        status="requested",
        reason_code=reason_code,
        created_at=now,
        items=[StoreReturnItemRow(position=n, sku=i.sku, qty=i.qty) for n, i in enumerate(items)],
    )
    s.add(row)
    await s.flush()
    return codec.return_(row)


async def retry_payment(s: AsyncSession, now: datetime, customer_id: str, order_id: str) -> Payment:
    """Charge again what the latest failed payment tried to; never for an order already paid."""
    order = await owned_order(s, customer_id, order_id)
    failed = await s.scalar(
        select(StorePaymentRow)
        .where(StorePaymentRow.order_id == order.id, StorePaymentRow.status == "failed")
        .order_by(StorePaymentRow.created_at.desc(), StorePaymentRow.id.desc())
        .limit(1)
    )
    if failed is None or order.status == "CANCELLED":
        raise BackendError("nothing_to_retry", "this order has no failed payment to retry", status=order.status)
    captured, _ = await money_on(s, order.id)
    if captured >= order.total_minor:
        raise BackendError("nothing_to_retry", "this order is already paid", status=order.status)
    row = StorePaymentRow(
        id=new_id("P"),
        order_id=order.id,
        amount_minor=failed.amount_minor,
        currency=failed.currency,
        status="captured",
        created_at=now,
    )
    s.add(row)
    s.add(
        StoreInvoiceRow(
            id=new_id("INV"),
            order_id=order.id,
            amount_minor=failed.amount_minor,
            currency=order.currency,
            issued_at=now,
        )
    )
    if order.status == "PENDING":
        order.status = "PAID"
    await s.flush()
    return codec.payment(row)


async def _customer(s: AsyncSession, customer_id: str, *, lock: bool = False) -> StoreCustomerRow:
    stmt = select(StoreCustomerRow).where(StoreCustomerRow.id == customer_id)
    row = (await s.execute(stmt.with_for_update() if lock else stmt)).scalar_one_or_none()
    if row is None:
        raise not_found("customer")
    return row


async def update_contact_details(
    s: AsyncSession, customer_id: str, *, email: str | None, phone: str | None
) -> Customer:
    """Replace the email and/or phone on file."""
    row = await _customer(s, customer_id, lock=True)
    if email is None and phone is None:
        raise BackendError("nothing_to_update", "give a new email or phone")
    if email is not None:
        email = email.strip()
        if not _EMAIL.match(email) or len(email) > 320:
            raise BackendError("invalid_email", "that is not an email address")
        taken = await s.scalar(
            select(StoreCustomerRow.id).where(
                func.lower(StoreCustomerRow.email) == email.lower(),
                StoreCustomerRow.id != customer_id,
            )
        )
        if taken is not None:
            raise BackendError("email_unavailable", "that email address cannot be used for this account")
        row.email = email
    if phone is not None:
        phone = phone.strip()
        if not _PHONE.match(phone):
            raise BackendError("invalid_phone", "that is not a phone number")
        row.phone = phone
    await s.flush()
    return codec.customer(row)


async def send_message(
    s: AsyncSession,
    now: datetime,
    customer_id: str,
    *,
    channel: MessageChannel,
    template: str,
    body: str,
) -> OutboxMessage:
    """Queue a message to the contact detail on file for ``channel``; there is no other address."""
    row = await _customer(s, customer_id)
    to = row.email if channel == "email" else row.phone if channel == "sms" else None
    if not to:
        raise BackendError("no_contact_on_file", f"no {channel} contact on file", channel=channel)
    msg = StoreOutboxRow(
        id=new_id("M"),
        customer_id=customer_id,
        channel=channel,
        to=to,
        template=template,
        body=body,
        sent_at=now,
    )
    s.add(msg)
    await s.flush()
    return codec.outbox(msg)
