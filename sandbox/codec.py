"""Conversions between sandbox-store rows and the domain dataclasses of ``tools.backend``.

Also the JSON codec for stored write results: :func:`encode` turns a frozen
dataclass into JSON-ready data and :func:`decode` re-hydrates it, so a repeated
idempotency key returns exactly the dataclass the first call returned.
"""

from __future__ import annotations

import hashlib
import types
from dataclasses import fields, is_dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any, TypeVar, Union, cast, get_args, get_origin, get_type_hints

from sandbox.models import (
    StoreCustomerRow,
    StoreInvoiceRow,
    StoreOrderRow,
    StoreOutboxRow,
    StorePaymentRow,
    StoreRefundRow,
    StoreReturnRow,
)
from tools.backend import (
    Address,
    Customer,
    Invoice,
    MessageChannel,
    Order,
    OrderItem,
    OrderStatus,
    OutboxMessage,
    Payment,
    PaymentMethod,
    PaymentStatus,
    Refund,
    Return,
    ReturnItem,
    ReturnStatus,
    Shipment,
    ShipmentStatus,
)

T = TypeVar("T")


def address_from_json(data: dict[str, Any] | None) -> Address | None:
    """An :class:`Address` from its stored JSON (``None`` stays ``None``)."""
    if data is None:
        return None
    return Address(
        line1=data["line1"],
        line2=data.get("line2"),
        city=data["city"],
        region=data.get("region"),
        postal_code=data["postal_code"],
        country=data["country"],
    )


def address_to_json(address: Address | None) -> dict[str, Any] | None:
    """The stored JSON of an address, optional parts left out when empty."""
    if address is None:
        return None
    return {f.name: getattr(address, f.name) for f in fields(address) if getattr(address, f.name) is not None}


def customer(row: StoreCustomerRow) -> Customer:
    """The domain view of a customer row (payment methods included)."""
    return Customer(
        id=row.id,
        name=row.name,
        email=row.email,
        phone=row.phone,
        address=address_from_json(row.address),
        created_at=row.created_at,
        payment_methods=tuple(
            PaymentMethod(id=m.id, brand=m.brand, last4=m.last4, exp_month=m.exp_month, exp_year=m.exp_year)
            for m in row.payment_methods
        ),
    )


def order(row: StoreOrderRow) -> Order:
    """The domain view of an order row with its items."""
    return Order(
        id=row.id,
        customer_id=row.customer_id,
        status=cast(OrderStatus, row.status),
        currency=row.currency,
        total_minor=row.total_minor,
        placed_at=row.placed_at,
        delivered_at=row.delivered_at,
        shipping_address=address_from_json(row.shipping_address),
        notes=row.notes,
        items=tuple(OrderItem(sku=i.sku, name=i.name, qty=i.qty, unit_minor=i.unit_minor) for i in row.items),
    )


def payment(row: StorePaymentRow) -> Payment:
    """The domain view of a payment row."""
    return Payment(
        id=row.id,
        order_id=row.order_id,
        amount_minor=row.amount_minor,
        currency=row.currency,
        status=cast(PaymentStatus, row.status),
        created_at=row.created_at,
    )


def refund(row: StoreRefundRow) -> Refund:
    """The domain view of a refund row."""
    return Refund(
        id=row.id,
        order_id=row.order_id,
        amount_minor=row.amount_minor,
        currency=row.currency,
        created_at=row.created_at,
        reason_code=row.reason_code,
        return_id=row.return_id,
        kind="cancellation" if row.kind == "cancellation" else "refund",
    )


def return_(row: StoreReturnRow) -> Return:
    """The domain view of a return row with its items."""
    return Return(
        id=row.id,
        order_id=row.order_id,
        status=cast(ReturnStatus, row.status),
        created_at=row.created_at,
        reason_code=row.reason_code,
        items=tuple(ReturnItem(sku=i.sku, qty=i.qty) for i in row.items),
    )


def invoice(row: StoreInvoiceRow) -> Invoice:
    """The domain view of an invoice row."""
    return Invoice(
        id=row.id,
        order_id=row.order_id,
        amount_minor=row.amount_minor,
        currency=row.currency,
        issued_at=row.issued_at,
    )


def outbox(row: StoreOutboxRow) -> OutboxMessage:
    """The domain view of an outbox row."""
    return OutboxMessage(
        id=row.id,
        customer_id=row.customer_id,
        channel=cast(MessageChannel, row.channel),
        to=row.to,
        template=row.template,
        body=row.body,
        sent_at=row.sent_at,
    )


def _encode_value(value: object) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if is_dataclass(value) and not isinstance(value, type):
        return encode(value)
    if isinstance(value, tuple | list):
        return [_encode_value(v) for v in value]
    return value


def encode(obj: object) -> dict[str, Any]:
    """A frozen dataclass as JSON-ready data (times as ISO 8601, tuples as lists)."""
    assert is_dataclass(obj) and not isinstance(obj, type)
    return {f.name: _encode_value(getattr(obj, f.name)) for f in fields(obj)}


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _decode_value(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(tp) if a is not type(None)]
        return _decode_value(inner[0], value)
    if origin is tuple:
        return tuple(_decode_value(get_args(tp)[0], v) for v in value)
    if tp is datetime:
        return datetime.fromisoformat(value)
    if isinstance(tp, type) and is_dataclass(tp):
        return decode(tp, value)
    return value


def decode(cls: type[T], data: dict[str, Any]) -> T:
    """Re-hydrate a dataclass written by :func:`encode`."""
    hints = _hints(cast(type, cls))
    return cls(**{name: _decode_value(hints[name], value) for name, value in data.items() if name in hints})


CARRIERS = ("UPS", "FedEx", "USPS", "DHL")
SHIP_AFTER = timedelta(days=1)
DELIVERY_ESTIMATE = timedelta(days=5)
_SHIPMENT_STATUS: dict[str, ShipmentStatus] = {
    "PENDING": "not_shipped",
    "PAID": "not_shipped",
    "SHIPPED": "in_transit",
    "DELIVERED": "delivered",
    "CANCELLED": "cancelled",
}


def shipment_of(order: Order) -> Shipment:
    """The shipment view of an order: carrier and tracking number are derived from its id."""
    status = _SHIPMENT_STATUS[order.status]
    if status in ("not_shipped", "cancelled"):
        eta = order.placed_at + DELIVERY_ESTIMATE if status == "not_shipped" else None
        return Shipment(
            order_id=order.id,
            status=status,
            carrier=None,
            tracking_number=None,
            shipped_at=None,
            delivered_at=None,
            estimated_delivery=eta,
        )
    digest = hashlib.sha256(order.id.encode()).hexdigest()
    carrier = CARRIERS[int(digest[:8], 16) % len(CARRIERS)]
    number = str(int(digest[8:24], 16)).zfill(20)[:18]
    tracking = f"1Z{digest[24:40].upper()}" if carrier == "UPS" else number
    shipped = order.placed_at + SHIP_AFTER
    if order.delivered_at is not None:
        shipped = min(shipped, order.delivered_at)
    return Shipment(
        order_id=order.id,
        status=status,
        carrier=carrier,
        tracking_number=tracking,
        shipped_at=shipped,
        delivered_at=order.delivered_at,
        estimated_delivery=order.placed_at + DELIVERY_ESTIMATE,
    )
