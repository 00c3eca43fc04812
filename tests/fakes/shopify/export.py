"""A fake store read back as a sandbox dataset (JSON), the inverse of :mod:`tests.fakes.shopify.seed`.

The evaluation judges a run on the Shopify backend from this export, exactly as it judges the
sandbox store from its own: customers, orders (the status as the backend reads it), payments
(sales), refunds (a cancellation's refund as ``kind: cancellation``), returns. Ids are the
dataset's (:mod:`shopify.dataset_ids`); objects made at run time keep their store numbers. The
shop holds no invoices, knowledge, staff or messages: those are signoff's own, or not offered."""

from __future__ import annotations

import re
from typing import Any

from shopify.dataset_ids import to_dataset
from tests.fakes.shopify.state import Address, Order, Refund, Return, Shop, gid, iso

Obj = dict[str, Any]
_CODE = re.compile(r"^[a-z0-9_]{1,64}$")
_REASON = re.compile(r"reason:([a-z0-9_]{1,64})")
RETURN_STATUS = {"REQUESTED": "requested", "OPEN": "received", "CLOSED": "refunded", "DECLINED": "rejected"}


def export_dataset(shop: Shop) -> Obj:
    """The store as a dataset object (``sandbox.dataset.Dataset`` validates it)."""
    return {
        "customers": [_customer(shop, n) for n in sorted(shop.customers)],
        "orders": [_order(o) for o in shop.orders.values()],
        "payments": [p for o in shop.orders.values() for p in _payments(o)],
        "refunds": [_refund(o, r) for o in shop.orders.values() for r in o.refunds],
        "returns": [_return(o, r) for o in shop.orders.values() for r in o.returns],
    }


def _address(a: Address | None) -> Obj | None:
    if a is None:
        return None
    out = {"line1": a.address1, "line2": a.address2, "city": a.city, "region": a.province_code}
    return {k: v for k, v in out.items() if v is not None} | {"postal_code": a.zip, "country": a.country_code}


def _customer(shop: Shop, n: int) -> Obj:
    c = shop.customers[n]
    out: Obj = {
        "id": f"C-{c.id}",
        "name": f"{c.first_name} {c.last_name}".strip(),
        "email": c.email,
        "created_at": iso(c.created_at),
    }
    if c.phone:
        out["phone"] = c.phone
    if c.address is not None:
        out["address"] = _address(c.address)
    return out


def _status(o: Order) -> str:
    if o.cancelled_at is not None:
        return "CANCELLED"
    if o.fulfillments:
        return "DELIVERED" if any(f.display_status == "DELIVERED" for f in o.fulfillments) else "SHIPPED"
    return "PAID" if o.captured_minor > 0 else "PENDING"


def _order(o: Order) -> Obj:
    delivered = next((f.delivered_at for f in o.fulfillments if f.delivered_at is not None), None)
    out: Obj = {
        "id": f"O-{o.id}",
        "customer_id": f"C-{o.customer_id}",
        "status": _status(o),
        "currency": o.currency,
        "total_minor": o.total_minor,
        "placed_at": iso(o.created_at),
        "items": [
            {"sku": li.sku, "name": li.title, "qty": li.quantity, "unit_minor": li.unit_minor} for li in o.line_items
        ],  # fmt: skip
    }
    extra = {"delivered_at": iso(delivered), "shipping_address": _address(o.shipping_address), "notes": o.note}
    return out | {k: v for k, v in extra.items() if v is not None}


def _payments(o: Order) -> list[Obj]:
    refunded = o.captured_minor > 0 and o.refunded_minor >= o.captured_minor
    return [
        {
            "id": to_dataset(gid("OrderTransaction", t.id)),
            "order_id": f"O-{o.id}",
            "amount_minor": t.amount_minor,
            "currency": o.currency,
            "status": "failed" if t.status == "FAILURE" else ("refunded" if refunded else "captured"),
            "created_at": iso(t.created_at),
        }
        for t in o.transactions
        if t.kind in ("SALE", "CAPTURE") and t.status in ("SUCCESS", "FAILURE")
    ]


def _refund(o: Order, r: Refund) -> Obj:
    note = r.note or ""
    reason = note if _CODE.match(note) else next(iter(_REASON.findall(note)), None)
    out: Obj = {
        "id": f"R-{r.id}",
        "order_id": f"O-{o.id}",
        "amount_minor": r.total_minor,
        "currency": o.currency,
        "created_at": iso(r.created_at),
        "kind": "cancellation" if note == "cancellation" else "refund",
    }
    if reason and note != "cancellation":
        out["reason_code"] = reason
    if r.return_id is not None:
        out["return_id"] = f"RT-{r.return_id}"
    return out


def _return(o: Order, r: Return) -> Obj:
    sku = {li.id: li.sku for li in o.line_items}
    items: dict[str, int] = {}
    for line, qty in r.lines:
        items[sku[line]] = items.get(sku[line], 0) + qty
    out: Obj = {
        "id": f"RT-{r.id}",
        "order_id": f"O-{o.id}",
        "items": [{"sku": s, "qty": q} for s, q in items.items()],
        "status": RETURN_STATUS.get(r.status, "rejected"),
        "created_at": iso(r.created_at),
    }
    if _CODE.match(r.reason_note):
        out["reason_code"] = r.reason_note
    return out
