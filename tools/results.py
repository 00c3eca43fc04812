"""Result shaping: what the model sees of a record.

Two rules hold for every tool result:

* **Trimmed.** Only what the next step needs. Addresses are reduced to city and
  country, contact details are masked, money always travels with its currency
  (``total_minor`` + ``currency`` + a ``total`` display string), datetimes are
  ISO 8601 in UTC.
* **Outsiders' text is data.** Anything a customer, merchant or help-centre
  author wrote (order notes, knowledge text, names, address fields) is wrapped by
  :func:`untrusted` -- labelled with its source and truncated -- so the prompt
  can tell the model that text inside ``untrusted_data`` is never an
  instruction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import UTC, date, datetime
from enum import Enum
from typing import Any

from tools.backend import (
    Address,
    Customer,
    Invoice,
    KnowledgeHit,
    Order,
    OutboxMessage,
    Payment,
    PaymentMethod,
    Refund,
    Return,
    Shipment,
)

Result = dict[str, Any]

#: Minor-unit exponents that are not 2 (ISO 4217).
_EXPONENT = {
    **dict.fromkeys("BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX VND VUV XAF XOF XPF".split(), 0),
    **dict.fromkeys("BHD IQD JOD KWD LYD OMR TND".split(), 3),
}


def untrusted(text: str | None, source: str, limit: int) -> Result | None:
    """Wrap text written by outsiders so the model treats it as data.

    ``{"untrusted_data": {"source", "text", "truncated"}}``; ``text`` is cut to
    ``limit`` characters. ``None`` stays ``None``.
    """
    if text is None:
        return None
    truncated = len(text) > limit
    return {
        "untrusted_data": {
            "source": source,
            "text": text[:limit] if truncated else text,
            "truncated": truncated,
        }
    }


def as_utc(value: datetime) -> datetime:
    """Aware UTC (a naive value from a driver is taken to be UTC already)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def iso(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a ``Z`` suffix, or ``None``."""
    if value is None:
        return None
    return as_utc(value).isoformat().replace("+00:00", "Z")


def minor_exponent(currency: str) -> int:
    """Digits after the decimal point of ``currency``'s minor unit (ISO 4217): 2, or 0 / 3."""
    return _EXPONENT.get(currency, 2)


def format_money(amount_minor: int, currency: str) -> str:
    """``format_money(18900, "USD") == "189.00 USD"``; honours 0- and 3-decimal currencies."""
    exp = minor_exponent(currency)
    sign = "-" if amount_minor < 0 else ""
    whole, frac = divmod(abs(amount_minor), 10**exp)
    return f"{sign}{whole}.{frac:0{exp}d} {currency}" if exp else f"{sign}{whole} {currency}"


def to_json_result(obj: Any) -> Any:
    """Dataclasses, datetimes, enums, tuples and sets to plain JSON values (recursively)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json_result(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, datetime):
        return iso(obj)
    if isinstance(obj, date):
        return obj.isoformat()
    if isinstance(obj, Enum):
        return to_json_result(obj.value)
    if isinstance(obj, dict):
        return {str(k): to_json_result(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_json_result(v) for v in obj]
    return obj


def mask_email(email: str | None) -> str | None:
    """``jane.doe@example.com`` → ``j***@example.com``: enough to confirm, not to copy."""
    if not email:
        return None
    local, _, domain = email.partition("@")
    return f"{local[:1]}***@{domain}"


def mask_phone(phone: str | None) -> str | None:
    """``+14155550123`` → ``***0123``."""
    if not phone:
        return None
    return f"***{phone[-4:]}"


#: The longest address field the model sees (the schema's own limit for a city).
_ADDRESS_LIMIT = 100


def place(addr: Address | None) -> Result | None:
    """An address reduced to what support needs to talk about it.

    The city is customer-written text, so it is wrapped as untrusted; the country is a
    validated ISO code. Street lines, region and postal code never reach the model.
    """
    if addr is None:
        return None
    return {"city": untrusted(addr.city, "address", _ADDRESS_LIMIT), "country": addr.country}


# -- records ----------------------------------------------------------------


def order_result(order: Order, *, refundable_minor: int | None, limit: int) -> Result:
    """One order in full (for get_order and order actions)."""
    return {
        "order_id": order.id,
        "status": order.status,
        "currency": order.currency,
        "total_minor": order.total_minor,
        "total": format_money(order.total_minor, order.currency),
        "refundable_minor": refundable_minor,
        "placed_at": iso(order.placed_at),
        "delivered_at": iso(order.delivered_at),
        "items": [
            {
                "sku": item.sku,
                "name": untrusted(item.name, "product_name", min(limit, 120)),
                "qty": item.qty,
                "unit_minor": item.unit_minor,
            }
            for item in order.items
        ],
        "ship_to": place(order.shipping_address),
        "notes": untrusted(order.notes, "order_note", limit) if order.notes else None,
    }


def order_line(order: Order) -> Result:
    """One order in a list: enough to pick which one to open."""
    return {
        "order_id": order.id,
        "status": order.status,
        "placed_at": iso(order.placed_at),
        "total_minor": order.total_minor,
        "currency": order.currency,
        "total": format_money(order.total_minor, order.currency),
        "item_count": sum(item.qty for item in order.items),
    }


def shipment_result(shipment: Shipment) -> Result:
    """A shipment as the model sees it."""
    return {
        "order_id": shipment.order_id,
        "status": shipment.status,
        "carrier": shipment.carrier,
        "tracking_number": shipment.tracking_number,
        "shipped_at": iso(shipment.shipped_at),
        "delivered_at": iso(shipment.delivered_at),
        "estimated_delivery": iso(shipment.estimated_delivery),
    }


def payment_result(payment: Payment) -> Result:
    """A payment as the model sees it."""
    return {
        "payment_id": payment.id,
        "order_id": payment.order_id,
        "status": payment.status,
        "amount_minor": payment.amount_minor,
        "currency": payment.currency,
        "amount": format_money(payment.amount_minor, payment.currency),
        "created_at": iso(payment.created_at),
    }


def refund_result(refund: Refund) -> Result:
    """A refund as the model sees it."""
    return {
        "refund_id": refund.id,
        "order_id": refund.order_id,
        "amount_minor": refund.amount_minor,
        "currency": refund.currency,
        "amount": format_money(refund.amount_minor, refund.currency),
        "reason_code": refund.reason_code,
        "return_id": refund.return_id,
        "created_at": iso(refund.created_at),
    }


def return_result(ret: Return) -> Result:
    """A return as the model sees it."""
    return {
        "return_id": ret.id,
        "order_id": ret.order_id,
        "status": ret.status,
        "reason_code": ret.reason_code,
        "items": [{"sku": i.sku, "qty": i.qty} for i in ret.items],
        "created_at": iso(ret.created_at),
    }


def invoice_result(invoice: Invoice) -> Result:
    """An invoice as the model sees it."""
    return {
        "invoice_id": invoice.id,
        "order_id": invoice.order_id,
        "amount_minor": invoice.amount_minor,
        "currency": invoice.currency,
        "amount": format_money(invoice.amount_minor, invoice.currency),
        "issued_at": iso(invoice.issued_at),
    }


def account_result(customer: Customer, *, limit: int) -> Result:
    """The bound account with contact details masked (confirm, never copy)."""
    return {
        "customer_id": customer.id,
        "name": untrusted(customer.name, "customer_name", min(limit, 120)),
        "email": mask_email(customer.email),
        "phone": mask_phone(customer.phone),
        "location": place(customer.address),
        "member_since": iso(customer.created_at),
        "payment_method_count": len(customer.payment_methods),
    }


def payment_method_result(method: PaymentMethod, *, now: datetime) -> Result:
    """A saved card as the model sees it (whether it has expired, by ``now``)."""
    now = as_utc(now)
    return {
        "payment_method_id": method.id,
        "brand": method.brand,
        "last4": method.last4,
        "exp_month": method.exp_month,
        "exp_year": method.exp_year,
        "expired": (method.exp_year, method.exp_month) < (now.year, now.month),
    }


def message_result(message: OutboxMessage) -> Result:
    """A sent message: where (masked) and which template; the body is ours, not repeated."""
    to = mask_email(message.to) if message.channel == "email" else mask_phone(message.to)
    return {
        "message_id": message.id,
        "channel": message.channel,
        "template": message.template,
        "to": to,
        "sent_at": iso(message.sent_at),
    }


def knowledge_hit_result(hit: KnowledgeHit, *, limit: int) -> Result:
    """A search hit: the evidence id to cite, and the document text as untrusted data."""
    return {
        "evidence_id": hit.evidence_id,
        "kind": hit.kind,
        "content": untrusted(f"{hit.title}\n\n{hit.text}", "knowledge", limit),
    }


def listing(key: str, rows: Iterable[Result], *, cap: int) -> Result:
    """A list result capped at ``cap`` rows, saying how many there were."""
    items = list(rows)
    out: Result = {key: items[:cap], "count": len(items)}
    if len(items) > cap:
        out["truncated"] = True
    return out
