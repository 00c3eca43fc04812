"""Admin API objects (the fields our documents select) to signoff's domain records.

Statuses: a cancelled order (``cancelledAt``) is ``CANCELLED``; a fulfilled one is
``DELIVERED`` once a fulfilment was delivered, else ``SHIPPED``; an unfulfilled one is ``PAID``
when its financial status says money came in, else ``PENDING``. Amounts are the shop's money
(``shopMoney``), converted exactly to minor units."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from shopify.money import bag_minor
from tools.backend import (
    Address,
    Customer,
    Order,
    OrderItem,
    OrderStatus,
    Payment,
    Refund,
    Return,
    ReturnItem,
    ReturnStatus,
    Shipment,
)

Obj = dict[str, Any]
_PAID = {"PAID", "PARTIALLY_PAID", "PARTIALLY_REFUNDED", "REFUNDED"}
_SHIPPED = {"FULFILLED", "PARTIALLY_FULFILLED", "IN_PROGRESS"}
_MONEY_IN = {"SALE", "CAPTURE"}
#: REQUESTED: asked for, not yet approved; OPEN: approved, goods on their way back or received;
#: CLOSED: done (refunded); DECLINED/CANCELED: refused.
_RETURN_STATUS: dict[str, ReturnStatus] = {
    "REQUESTED": "requested",
    "OPEN": "received",
    "CLOSED": "refunded",
    "DECLINED": "rejected",
    "CANCELED": "rejected",
}
#: Seconds after ``cancelledAt`` within which a refund is the cancellation's own.
_CANCEL_REFUND_WINDOW_S = 600


def when(value: Any) -> datetime:
    """An ISO-8601 ``DateTime`` as an aware datetime."""
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def address(a: Obj | None) -> Address | None:
    """A ``MailingAddress`` as an :class:`Address` (``None`` when absent)."""
    if not a:
        return None
    return Address(
        line1=a.get("address1") or "",
        line2=a.get("address2") or None,
        city=a.get("city") or "",
        postal_code=a.get("zip") or "",
        country=a.get("countryCodeV2") or "",
        region=a.get("provinceCode") or None,
    )


def address_input(a: Address) -> Obj:
    """An :class:`Address` as a ``MailingAddressInput``."""
    out: Obj = {"address1": a.line1, "city": a.city, "zip": a.postal_code, "countryCode": a.country}
    if a.line2:
        out["address2"] = a.line2
    if a.region:
        out["provinceCode"] = a.region
    return out


def customer(c: Obj) -> Customer:
    """A ``Customer`` as a :class:`Customer`."""
    email = (c.get("defaultEmailAddress") or {}).get("emailAddress") or ""
    phone = (c.get("defaultPhoneNumber") or {}).get("phoneNumber")
    name = c.get("displayName") or " ".join(x for x in (c.get("firstName"), c.get("lastName")) if x) or email
    return Customer(
        id=str(c["id"]),
        name=name,
        email=email,
        phone=phone,
        address=address(c.get("defaultAddress")),
        created_at=when(c["createdAt"]) if c.get("createdAt") else None,
    )


def order_status(o: Obj) -> OrderStatus:
    """Our status of an ``Order`` (see the module's docstring)."""
    if o.get("cancelledAt"):
        return "CANCELLED"
    if o.get("displayFulfillmentStatus") in _SHIPPED:
        delivered = any(f.get("deliveredAt") or f.get("displayStatus") == "DELIVERED" for f in _fulfillments(o))
        return "DELIVERED" if delivered else "SHIPPED"
    return "PAID" if o.get("displayFinancialStatus") in _PAID else "PENDING"


def _fulfillments(o: Obj) -> list[Obj]:
    return [f for f in o.get("fulfillments") or () if f.get("status") not in ("CANCELLED", "ERROR", "FAILURE")]


def order(o: Obj) -> Order:
    """An ``Order`` as an :class:`Order` (its id is the name people see, ``#1001``)."""
    total, currency = bag_minor(o["totalPriceSet"])
    items = tuple(
        OrderItem(
            sku=li.get("sku") or li["id"].rsplit("/", 1)[-1],
            name=li.get("name") or "",
            qty=int(li.get("quantity") or 0),
            unit_minor=bag_minor(li["originalUnitPriceSet"])[0],
        )
        for li in (o.get("lineItems") or {}).get("nodes") or ()
    )
    delivered = [when(f["deliveredAt"]) for f in _fulfillments(o) if f.get("deliveredAt")]
    return Order(
        id=str(o["name"]),
        customer_id=str((o.get("customer") or {}).get("id") or ""),
        status=order_status(o),
        currency=currency,
        total_minor=total,
        placed_at=when(o.get("processedAt") or o["createdAt"]),
        items=items,
        delivered_at=max(delivered) if delivered else None,
        shipping_address=address(o.get("shippingAddress")),
        notes=o.get("note") or None,
    )


def _tx_minor(t: Obj) -> int:
    return bag_minor(t["amountSet"])[0]


def payments(o: Obj) -> list[Payment]:
    """The order's money-in transactions as payments (captured or failed)."""
    out = []
    for t in o.get("transactions") or ():
        if t.get("kind") not in _MONEY_IN or t.get("status") not in ("SUCCESS", "FAILURE", "ERROR"):
            continue
        minor, currency = bag_minor(t["amountSet"])
        out.append(
            Payment(
                id=str(t["id"]),
                order_id=str(o["name"]),
                amount_minor=minor,
                currency=currency,
                status="captured" if t["status"] == "SUCCESS" else "failed",
                created_at=when(t["createdAt"]),
            )
        )
    return out


def refundable(o: Obj) -> int:
    """Captured minus refunded, from the order's successful transactions."""
    txs = [t for t in o.get("transactions") or () if t.get("status") == "SUCCESS"]
    captured = sum(_tx_minor(t) for t in txs if t.get("kind") in _MONEY_IN)
    refunded = sum(_tx_minor(t) for t in txs if t.get("kind") == "REFUND")
    return max(0, captured - refunded)


def refunds(o: Obj) -> list[Refund]:
    """The order's refunds; one made with (or just after) its cancellation is a cancellation's."""
    cancelled = when(o["cancelledAt"]) if o.get("cancelledAt") else None
    out = []
    for r in o.get("refunds") or ():
        amount, currency = bag_minor(r["totalRefundedSet"])
        created = when(r.get("createdAt") or o["createdAt"])
        by_cancel = cancelled is not None and abs((created - cancelled).total_seconds()) <= _CANCEL_REFUND_WINDOW_S
        note = str(r.get("note") or "")
        out.append(
            Refund(
                id=str(r["id"]),
                order_id=str(o["name"]),
                amount_minor=amount,
                currency=currency,
                created_at=created,
                reason_code=note.rsplit("reason:", 1)[1].strip() if "reason:" in note else None,
                return_id=str((r.get("return") or {}).get("id") or "") or None,
                kind="cancellation" if by_cancel and "signoff:refund:" not in note else "refund",
            )
        )
    return out


def return_(r: Obj, order_name: str) -> Return:
    """A ``Return`` as a :class:`Return` (its id is its GID)."""
    lines = (r.get("returnLineItems") or {}).get("nodes") or ()
    status = _RETURN_STATUS.get(str(r.get("status")), "requested")
    reasons = [str(li.get("returnReason") or "").lower() for li in lines if li.get("returnReason")]  # when selected
    return Return(
        id=str(r["id"]),
        order_id=order_name,
        items=tuple(
            ReturnItem(
                sku=str(((li.get("fulfillmentLineItem") or {}).get("lineItem") or {}).get("sku") or ""),
                qty=int(li["quantity"]),
            )
            for li in lines
        ),
        status=status,
        created_at=when(r["createdAt"]),
        reason_code=reasons[0] if reasons else None,
    )


def returns(o: Obj) -> list[Return]:
    """The order's returns."""
    return [return_(r, str(o["name"])) for r in (o.get("returns") or {}).get("nodes") or ()]


def shipment(o: Obj) -> Shipment:
    """Where the order's newest fulfilment is."""
    name = str(o["name"])
    if o.get("cancelledAt"):
        return Shipment(order_id=name, status="cancelled", carrier=None, tracking_number=None,
                        shipped_at=None, delivered_at=None, estimated_delivery=None)  # fmt: skip
    live = sorted(_fulfillments(o), key=lambda f: str(f.get("createdAt")))
    if not live:
        return Shipment(order_id=name, status="not_shipped", carrier=None, tracking_number=None,
                        shipped_at=None, delivered_at=None, estimated_delivery=None)  # fmt: skip
    f = live[-1]
    info = (f.get("trackingInfo") or [{}])[0] if f.get("trackingInfo") else {}
    delivered = f.get("deliveredAt")
    return Shipment(
        order_id=name,
        status="delivered" if delivered or f.get("displayStatus") == "DELIVERED" else "in_transit",
        carrier=info.get("company"),
        tracking_number=info.get("number"),
        shipped_at=when(f.get("inTransitAt") or f["createdAt"]),
        delivered_at=when(delivered) if delivered else None,
        estimated_delivery=when(f["estimatedDeliveryAt"]) if f.get("estimatedDeliveryAt") else None,
    )


def operations(holder: Obj | None) -> list[Obj]:
    """The ``signoff.operations`` metafield of an order or customer: the keys written on it."""
    raw = ((holder or {}).get("operations") or {}).get("value")
    try:
        value = json.loads(raw) if raw else []
    except ValueError:
        return []
    return (
        [e for e in value if isinstance(e, dict) and isinstance(e.get("key"), str)] if isinstance(value, list) else []
    )


def bag_minor_of(transaction: Obj) -> int:
    """A transaction's amount in minor units."""
    return _tx_minor(transaction)


def return_marked(r: Obj, mark: str) -> bool:
    """Whether a return's lines carry ``mark`` (signoff's key): in the customer's note of a
    request (``returnRequest``), or the reason note of one a merchant opened."""
    lines = (r.get("returnLineItems") or {}).get("nodes") or ()
    return any(mark in (li.get("customerNote"), li.get("returnReasonNote")) for li in lines)
