"""The sandbox dataset as a Shopify store, so the eval suite can run the same shop on either
backend (the ids' mapping is :mod:`shopify.dataset_ids`; :mod:`tests.fakes.shopify.export` reads
a store back as a dataset).

- customer ``C-7`` → ``gid://shopify/Customer/7``; ``name`` split at its first space into
  first and last name.
- order ``O-1042`` → ``gid://shopify/Order/1042``, named ``#1042``; its lines are
  ``LineItem/<1042*100+n>`` (n from 1); fulfillment line items carry the same numbers.
- status ``PENDING`` / ``PAID`` → unfulfilled; the financial status comes from the
  transactions (no successful sale: ``PENDING``).
- status ``SHIPPED`` / ``DELIVERED`` → fulfilled: one ``Fulfillment/<order>`` (``IN_TRANSIT`` /
  ``DELIVERED``) with the tracking the sandbox derives (``sandbox.codec.shipment_of``).
- status ``CANCELLED`` → ``cancelledAt`` = placed + 1 h, ``cancelReason: CUSTOMER``.
- payment ``P-1042`` / ``P-1042-2`` → ``OrderTransaction/10421`` / ``10422``: ``SALE``,
  ``SUCCESS`` (captured or refunded) or ``FAILURE`` (failed).
- refund ``R-3001`` → ``Refund/3001`` with one ``REFUND`` transaction
  ``OrderTransaction/3001000`` (parent: the order's first successful sale).
- return ``RT-2001`` → ``Return/2001`` named ``#<order>-R<n>``; requested → ``REQUESTED``,
  received → ``OPEN``, refunded → ``CLOSED``, rejected → ``DECLINED``; lines by SKU.
- knowledge ``refund-policy``, ``shipping-policy``, ``privacy`` → shop policies
  ``REFUND_POLICY``, ``SHIPPING_POLICY``, ``PRIVACY_POLICY``; every other doc → an Online
  Store page whose ``handle`` is the doc id.
- objects made at run time get ids above 900,000,000.

A policy's or page's body is HTML: one ``<section id="<section id>" data-version="<version>">``
per knowledge section, the text HTML-escaped in a ``<p>``. Times shift by ``rebase_to - as_of``
when a ``rebase_to`` is given, as the sandbox loader does.
"""

from __future__ import annotations

import html
from datetime import datetime, timedelta

from sandbox.codec import shipment_of
from sandbox.dataset import AddressRecord, Dataset, KnowledgeDocRecord, OrderRecord
from shopify.dataset_ids import number, transaction_number
from tests.fakes.shopify.state import (
    Address,
    Customer,
    Fulfillment,
    LineItem,
    Order,
    Page,
    Policy,
    Refund,
    Return,
    Shop,
    Transaction,
)
from tools.backend import Address as BackendAddress
from tools.backend import Order as BackendOrder
from tools.backend import OrderItem

POLICY_TYPES = {"refund-policy": "REFUND_POLICY", "shipping-policy": "SHIPPING_POLICY", "privacy": "PRIVACY_POLICY"}
RETURN_STATUS = {"requested": "REQUESTED", "received": "OPEN", "refunded": "CLOSED", "rejected": "DECLINED"}
TRACKING_URLS = {
    "UPS": "https://www.ups.com/track?tracknum={}",
    "FedEx": "https://www.fedex.com/fedextrack/?trknbr={}",
    "USPS": "https://tools.usps.com/go/TrackConfirmAction?tLabels={}",
    "DHL": "https://www.dhl.com/track?tracking-id={}",
}


def seed_shop(dataset: Dataset, *, rebase_to: datetime | None = None) -> Shop:
    """A shop holding the dataset's customers, orders, money, returns and knowledge."""
    shift = rebase_to - dataset.as_of if rebase_to is not None and dataset.as_of is not None else timedelta(0)
    shop = Shop()
    for c in dataset.customers:
        first, _, last = c.name.partition(" ")
        shop.customers[number(c.id)] = Customer(
            id=number(c.id),
            first_name=first,
            last_name=last,
            email=c.email,
            phone=c.phone,
            address=_address(c.address),
            created_at=(c.created_at or dataset.as_of or datetime.fromtimestamp(0)) + shift,
        )
    for o in dataset.orders:
        shop.orders[number(o.id)] = _order(shop, o, shift)
    _money(shop, dataset, shift)
    _returns(shop, dataset, shift)
    for doc in dataset.knowledge:
        _knowledge(shop, doc, (dataset.as_of or datetime.fromtimestamp(0)) + shift)
    return shop


def _address(a: AddressRecord | None) -> Address | None:
    if a is None:
        return None
    return Address(
        address1=a.line1,
        address2=a.line2,
        city=a.city,
        province_code=a.region,
        zip=a.postal_code,
        country_code=a.country,
    )


def _order(shop: Shop, o: OrderRecord, shift: timedelta) -> Order:
    n = number(o.id)
    customer = shop.customers.get(number(o.customer_id))
    order = Order(
        id=n,
        customer_id=customer.id if customer else None,
        email=customer.email if customer else None,
        currency=o.currency,
        created_at=o.placed_at + shift,
        total_minor=o.total_minor,
        line_items=[
            LineItem(id=n * 100 + i, sku=it.sku, title=it.name, quantity=it.qty, unit_minor=it.unit_minor)
            for i, it in enumerate(o.items, start=1)
        ],
        shipping_address=_address(o.shipping_address),
        note=o.notes,
    )
    if o.status == "CANCELLED":
        order.cancelled_at, order.cancel_reason = order.created_at + timedelta(hours=1), "CUSTOMER"
    if o.status in ("SHIPPED", "DELIVERED"):
        order.fulfillments.append(_fulfillment(o, shift))
    return order


def _fulfillment(o: OrderRecord, shift: timedelta) -> Fulfillment:
    backend = BackendOrder(
        id=o.id,
        customer_id=o.customer_id,
        status=o.status,
        currency=o.currency,
        total_minor=o.total_minor,
        placed_at=o.placed_at + shift,
        delivered_at=o.delivered_at + shift if o.delivered_at else None,
        items=tuple(OrderItem(sku=i.sku, name=i.name, qty=i.qty, unit_minor=i.unit_minor) for i in o.items),
        shipping_address=BackendAddress(**o.shipping_address.model_dump()) if o.shipping_address else None,
    )
    s = shipment_of(backend)
    url = TRACKING_URLS[s.carrier].format(s.tracking_number) if s.carrier and s.tracking_number else None
    return Fulfillment(
        id=number(o.id),
        created_at=s.shipped_at or backend.placed_at,
        display_status="DELIVERED" if o.status == "DELIVERED" else "IN_TRANSIT",
        company=s.carrier,
        number=s.tracking_number,
        url=url,
        delivered_at=s.delivered_at,
        estimated_delivery_at=s.estimated_delivery,
    )


def _money(shop: Shop, dataset: Dataset, shift: timedelta) -> None:
    for p in dataset.payments:
        shop.orders[number(p.order_id)].transactions.append(
            Transaction(
                id=transaction_number(p.id),
                kind="SALE",
                status="FAILURE" if p.status == "failed" else "SUCCESS",
                amount_minor=p.amount_minor,
                created_at=p.created_at + shift,
            )
        )
    for r in dataset.refunds:
        order = shop.orders[number(r.order_id)]
        parent = next((t.id for t in order.transactions if t.kind == "SALE" and t.status == "SUCCESS"), None)
        tx = Transaction(
            id=number(r.id) * 1000,
            kind="REFUND",
            status="SUCCESS",
            amount_minor=r.amount_minor,
            created_at=r.created_at + shift,
            parent_id=parent,
        )
        order.refunds.append(
            Refund(
                id=number(r.id),
                created_at=r.created_at + shift,
                transactions=[tx],
                note=r.reason_code,
                return_id=number(r.return_id) if r.return_id else None,
            )
        )
        order.transactions.append(tx)


def _returns(shop: Shop, dataset: Dataset, shift: timedelta) -> None:
    for r in dataset.returns:
        order = shop.orders[number(r.order_id)]
        by_sku = {li.sku: li.id for li in order.line_items}
        order.returns.append(
            Return(
                id=number(r.id),
                name=f"{order.name}-R{len(order.returns) + 1}",
                status=RETURN_STATUS[r.status],
                created_at=r.created_at + shift,
                lines=[(by_sku[i.sku], i.qty) for i in r.items],
                reason_note=r.reason_code or "",
            )
        )


def knowledge_html(doc: KnowledgeDocRecord) -> str:
    """A knowledge doc as the HTML body of a policy or page (one section element a section)."""
    return "".join(
        f'<section id="{html.escape(s.id)}" data-version="{doc.version}"><p>{html.escape(s.text)}</p></section>'
        for s in doc.sections
    )


def _knowledge(shop: Shop, doc: KnowledgeDocRecord, at: datetime) -> None:
    body = knowledge_html(doc)
    kind = POLICY_TYPES.get(doc.id)
    if kind is not None:
        shop.policies.append(
            Policy(id=len(shop.policies) + 1, type=kind, title=doc.title, body=body, created_at=at, updated_at=at)
        )
        return
    page_id = len(shop.pages) + 1
    shop.pages[page_id] = Page(id=page_id, handle=doc.id, title=doc.title, body=body, created_at=at, updated_at=at)
