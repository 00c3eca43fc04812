"""Signed webhooks as Shopify sends them, and the staff actions in the Shopify admin that
emit them (a refund, a cancellation, a return request made by a person, not by signoff).

Payloads are the REST-style JSON of the real topics (numeric ``id`` plus
``admin_graphql_api_id``); headers are ``X-Shopify-Topic``, ``X-Shopify-Hmac-Sha256`` (base64
HMAC-SHA256 of the raw body with the app's secret), ``X-Shopify-Shop-Domain``,
``X-Shopify-API-Version``, ``X-Shopify-Webhook-Id``, ``X-Shopify-Event-Id`` and
``X-Shopify-Triggered-At``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiohttp

from tests.fakes.shopify.schema import API_VERSION
from tests.fakes.shopify.state import Order, Refund, Return, Shop, Transaction, amount, gid, iso

#: The staff member the admin actions are made by (``user_id`` in payloads).
STAFF_USER_ID = 70001


def sign(body: bytes, secret: str) -> str:
    """``X-Shopify-Hmac-Sha256``: base64 of the HMAC-SHA256 of the raw body."""
    return base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest()).decode()


@dataclass(frozen=True, kw_only=True)
class Webhook:
    """One delivery: topic, raw JSON body and its ids (a redelivery keeps the event id)."""

    topic: str
    body: bytes
    shop_domain: str
    triggered_at: datetime
    event_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    webhook_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def payload(self) -> dict[str, Any]:
        """The body, parsed."""
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed

    def headers(self, secret: str) -> dict[str, str]:
        """The delivery's headers, signed with ``secret``."""
        return {
            "Content-Type": "application/json",
            "X-Shopify-Topic": self.topic,
            "X-Shopify-Hmac-Sha256": sign(self.body, secret),
            "X-Shopify-Shop-Domain": self.shop_domain,
            "X-Shopify-API-Version": API_VERSION,
            "X-Shopify-Webhook-Id": self.webhook_id,
            "X-Shopify-Event-Id": self.event_id,
            "X-Shopify-Triggered-At": iso(self.triggered_at) or "",
        }


def webhook(shop: Shop, topic: str, payload: dict[str, Any], at: datetime) -> Webhook:
    """A delivery of ``payload`` on ``topic`` from ``shop``."""
    return Webhook(topic=topic, body=json.dumps(payload).encode(), shop_domain=shop.domain, triggered_at=at)


async def deliver(url: str, hook: Webhook, secret: str, *, session: aiohttp.ClientSession | None = None) -> int:
    """POST ``hook`` to ``url`` as Shopify would; the HTTP status the receiver answered."""
    own = session is None
    session = session or aiohttp.ClientSession()
    try:
        async with session.post(url, data=hook.body, headers=hook.headers(secret)) as response:
            return response.status
    finally:
        if own:
            await session.close()


def _transaction_json(order: Order, t: Transaction) -> dict[str, Any]:
    return {
        "id": t.id,
        "admin_graphql_api_id": gid("OrderTransaction", t.id),
        "order_id": order.id,
        "kind": t.kind.lower(),
        "gateway": t.gateway,
        "status": t.status.lower(),
        "amount": amount(t.amount_minor),
        "currency": order.currency,
        "created_at": iso(t.created_at),
        "processed_at": iso(t.created_at),
        "parent_id": t.parent_id,
        "user_id": STAFF_USER_ID,
        "source_name": "web",
        "test": False,
    }


def refund_json(order: Order, r: Refund) -> dict[str, Any]:
    """A ``refunds/create`` payload."""
    return {
        "id": r.id,
        "admin_graphql_api_id": gid("Refund", r.id),
        "order_id": order.id,
        "created_at": iso(r.created_at),
        "processed_at": iso(r.created_at),
        "note": r.note,
        "user_id": STAFF_USER_ID if r.by_staff else None,
        "restock": False,
        "refund_line_items": [
            {"id": li_id * 10 + 1, "line_item_id": li_id, "quantity": q, "restock_type": "no_restock"}
            for li_id, q in r.lines
        ],
        "transactions": [_transaction_json(order, t) for t in r.transactions],
        "order_adjustments": [],
        "duties": [],
        "return": {"id": r.return_id, "admin_graphql_api_id": gid("Return", r.return_id)} if r.return_id else None,
    }


def order_json(shop: Shop, order: Order) -> dict[str, Any]:
    """An ``orders/*`` payload (the order resource)."""
    customer = shop.customers.get(order.customer_id) if order.customer_id is not None else None
    return {
        "id": order.id,
        "admin_graphql_api_id": gid("Order", order.id),
        "name": order.name,
        "order_number": order.id,
        "email": order.email,
        "created_at": iso(order.created_at),
        "updated_at": iso(order.updated_at),
        "cancelled_at": iso(order.cancelled_at),
        "cancel_reason": order.cancel_reason.lower() if order.cancel_reason else None,
        "currency": order.currency,
        "presentment_currency": order.currency,
        "financial_status": order.financial_status().lower(),
        "fulfillment_status": "fulfilled" if order.fulfilled else None,
        "total_price": amount(order.total_minor),
        "customer": None
        if customer is None
        else {
            "id": customer.id,
            "admin_graphql_api_id": gid("Customer", customer.id),
            "email": customer.email,
            "first_name": customer.first_name,
            "last_name": customer.last_name,
        },
        "line_items": [
            {
                "id": li.id,
                "admin_graphql_api_id": gid("LineItem", li.id),
                "sku": li.sku,
                "name": li.title,
                "quantity": li.quantity,
                "price": amount(li.unit_minor),
            }
            for li in order.line_items
        ],
        "refunds": [refund_json(order, r) for r in order.refunds],
    }


def return_json(order: Order, r: Return) -> dict[str, Any]:
    """A ``returns/request`` payload."""
    return {
        "id": r.id,
        "admin_graphql_api_id": gid("Return", r.id),
        "name": r.name,
        "status": r.status.lower(),
        "order": {"id": order.id, "admin_graphql_api_id": gid("Order", order.id)},
        "total_return_line_items": len(r.lines),
        "return_line_items": [
            {
                "id": r.id * 100 + li_id % 100,
                "admin_graphql_api_id": gid("ReturnLineItem", r.id * 100 + li_id % 100),
                "fulfillment_line_item": {
                    "id": li_id,
                    "admin_graphql_api_id": gid("FulfillmentLineItem", li_id),
                    "line_item": {"id": li_id, "admin_graphql_api_id": gid("LineItem", li_id)},
                },
                "quantity": q,
                "return_reason": "unknown",
                "return_reason_note": r.reason_note,
                "customer_note": None,
            }
            for li_id, q in r.lines
        ],
        "decline": None,
    }


def compliance_webhook(shop: Shop, topic: str, at: datetime, customer_id: int | None = None) -> Webhook:
    """A mandatory compliance webhook (``customers/data_request``, ``customers/redact``,
    ``shop/redact``) as Shopify sends it for the app; customer topics name ``customer_id``."""
    base: dict[str, Any] = {"shop_id": 1, "shop_domain": shop.domain}
    if topic == "shop/redact":
        return webhook(shop, topic, base, at)
    if topic not in ("customers/data_request", "customers/redact") or customer_id is None:
        raise ValueError(f"not a compliance topic with a customer: {topic!r}")
    customer = shop.customers[customer_id]
    orders = sorted(o.id for o in shop.orders.values() if o.customer_id == customer_id)
    who = {"id": customer.id, "email": customer.email, "phone": customer.phone}
    if topic == "customers/redact":
        return webhook(shop, topic, {**base, "customer": who, "orders_to_redact": orders}, at)
    return webhook(
        shop, topic, {**base, "customer": who, "orders_requested": orders, "data_request": {"id": shop.new_id()}}, at
    )
