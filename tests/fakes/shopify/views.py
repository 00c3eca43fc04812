"""The fake shop's records in the Admin API's shapes: dicts the executor reads field by
field (a callable value is a field with arguments or a lazy link, called as
``value(info, **args)``). A field left out of a view is one the fake does not answer."""

from __future__ import annotations

import json
import zlib
from typing import Any

from tests.fakes.shopify.connections import connection
from tests.fakes.shopify.state import (
    Address,
    Customer,
    Fulfillment,
    LineItem,
    Metafield,
    Order,
    Page,
    Policy,
    Refund,
    Return,
    Shop,
    Transaction,
    WebhookSubscription,
    amount,
    gid,
    iso,
    money,
)

COUNTRY_NAMES = {
    "US": "United States",
    "CA": "Canada",
    "GB": "United Kingdom",
    "DE": "Germany",
    "FR": "France",
    "NL": "Netherlands",
    "IE": "Ireland",
    "AU": "Australia",
}


def shop_view(shop: Shop) -> dict[str, Any]:
    """``Shop``."""
    return {
        "id": gid("Shop", 1),
        "name": shop.name,
        "myshopifyDomain": shop.domain,
        "currencyCode": shop.currency,
        "email": shop.email,
        "contactEmail": shop.email,
        "ianaTimezone": "Etc/UTC",
        "primaryDomain": {
            "id": gid("Domain", 1),
            "host": shop.domain,
            "url": f"https://{shop.domain}",
            "sslEnabled": True,
        },
        "shopPolicies": [policy_view(shop, p) for p in shop.policies],
    }


def policy_view(shop: Shop, p: Policy) -> dict[str, Any]:
    """``ShopPolicy``."""
    slug = p.type.lower().replace("_", "-")
    return {
        "id": gid("ShopPolicy", p.id),
        "type": p.type,
        "title": p.title,
        "body": p.body,
        "url": f"https://{shop.domain}/policies/{slug}",
        "createdAt": iso(p.created_at),
        "updatedAt": iso(p.updated_at),
    }


def page_view(p: Page) -> dict[str, Any]:
    """``Page`` (Online Store)."""
    return {
        "id": gid("Page", p.id),
        "handle": p.handle,
        "title": p.title,
        "body": p.body,
        "bodySummary": p.body[:150],
        "createdAt": iso(p.created_at),
        "updatedAt": iso(p.updated_at),
        "publishedAt": iso(p.created_at),
        "isPublished": True,
    }


def address_view(a: Address | None, owner: str) -> dict[str, Any] | None:
    """``MailingAddress``."""
    if a is None:
        return None
    name = " ".join(x for x in (a.first_name, a.last_name) if x) or None
    lines = [x for x in (name, a.address1, a.address2, f"{a.city} {a.province_code or ''} {a.zip}".replace("  ", " "))]
    return {
        "id": f"gid://shopify/MailingAddress/{zlib.crc32(owner.encode())}?model_name=Address",
        "address1": a.address1,
        "address2": a.address2,
        "city": a.city,
        "province": a.province_code,
        "provinceCode": a.province_code,
        "zip": a.zip,
        "country": COUNTRY_NAMES.get(a.country_code, a.country_code),
        "countryCodeV2": a.country_code,
        "firstName": a.first_name,
        "lastName": a.last_name,
        "name": name,
        "company": None,
        "phone": a.phone,
        "formatted": lambda info, **_: [x for x in lines if x] + [COUNTRY_NAMES.get(a.country_code, a.country_code)],
    }


def metafield_view(m: Metafield, owner_type: str) -> dict[str, Any]:
    """``Metafield``."""
    try:
        json_value: Any = json.loads(m.value)
    except ValueError:
        json_value = m.value
    return {
        "id": gid("Metafield", m.id),
        "namespace": m.namespace,
        "key": m.key,
        "type": m.type,
        "value": m.value,
        "jsonValue": json_value,
        "ownerType": owner_type,
        "createdAt": iso(m.created_at),
        "updatedAt": iso(m.updated_at),
    }


def _metafield_fields(metafields: dict[tuple[str, str], Metafield], owner_type: str) -> dict[str, Any]:
    def one(info: Any, namespace: str | None = None, key: str = "") -> dict[str, Any] | None:
        m = metafields.get((namespace or "$app", key))
        return metafield_view(m, owner_type) if m else None

    def many(info: Any, namespace: str | None = None, keys: list[str] | None = None, **args: Any) -> dict[str, Any]:
        chosen = [
            m
            for m in metafields.values()
            if (namespace is None or m.namespace == namespace) and (keys is None or f"{m.namespace}.{m.key}" in keys)
        ]
        return connection(chosen, lambda m: metafield_view(m, owner_type), args)

    return {"metafield": one, "metafields": many}


def customer_view(shop: Shop, c: Customer) -> dict[str, Any]:
    """``Customer`` (with the deprecated ``email``/``phone`` too: 2026-10 still answers them)."""
    orders = [o for o in shop.orders.values() if o.customer_id == c.id]
    return {
        "id": gid("Customer", c.id),
        "legacyResourceId": str(c.id),
        "firstName": c.first_name,
        "lastName": c.last_name,
        "displayName": f"{c.first_name} {c.last_name}".strip(),
        "email": c.email,
        "phone": c.phone,
        "defaultEmailAddress": {"emailAddress": c.email, "validFormat": True},
        "defaultPhoneNumber": {"phoneNumber": c.phone} if c.phone else None,
        "defaultAddress": address_view(c.address, f"customer-{c.id}"),
        "createdAt": iso(c.created_at),
        "updatedAt": iso(c.created_at),
        "note": c.note,
        "tags": list(c.tags),
        "state": "ENABLED",
        "verifiedEmail": True,
        "numberOfOrders": str(len(orders)),
        "orders": lambda info, **args: connection(orders, lambda o: order_view(shop, o), args),
        **_metafield_fields(c.metafields, "CUSTOMER"),
    }


def transaction_view(shop: Shop, order: Order, t: Transaction) -> dict[str, Any]:
    """``OrderTransaction``."""
    parent = next((p for p in order.transactions if p.id == t.parent_id), None)
    return {
        "id": gid("OrderTransaction", t.id),
        "kind": t.kind,
        "status": t.status,
        "gateway": t.gateway,
        "formattedGateway": "Shopify Payments",
        "amountSet": money(t.amount_minor, order.currency),
        "createdAt": iso(t.created_at),
        "processedAt": iso(t.created_at),
        "test": False,
        "errorCode": "CARD_DECLINED" if t.status == "FAILURE" else None,
        "parentTransaction": (lambda info: transaction_view(shop, order, parent)) if parent else None,
        "order": lambda info: order_view(shop, order),
    }


def line_item_view(order: Order, li: LineItem) -> dict[str, Any]:
    """``LineItem``."""
    current = li.quantity - li.refunded_quantity
    unfulfilled = 0 if order.fulfilled else current
    return {
        "id": gid("LineItem", li.id),
        "name": li.title,
        "title": li.title,
        "sku": li.sku,
        "quantity": li.quantity,
        "currentQuantity": current,
        "refundableQuantity": current,
        "unfulfilledQuantity": unfulfilled,
        "requiresShipping": True,
        "originalUnitPriceSet": money(li.unit_minor, order.currency),
        "discountedUnitPriceSet": money(li.unit_minor, order.currency),
        "originalTotalSet": money(li.unit_minor * li.quantity, order.currency),
        "discountedTotalSet": lambda info, **_: money(li.unit_minor * li.quantity, order.currency),
    }


def refund_view(shop: Shop, order: Order, r: Refund) -> dict[str, Any]:
    """``Refund``."""
    lines = {li.id: li for li in order.line_items}
    ret = next((x for x in order.returns if x.id == r.return_id), None)
    return {
        "id": gid("Refund", r.id),
        "legacyResourceId": str(r.id),
        "createdAt": iso(r.created_at),
        "updatedAt": iso(r.created_at),
        "processedAt": iso(r.created_at),
        "note": r.note,
        "totalRefundedSet": money(r.total_minor, order.currency),
        "transactions": lambda info, **args: connection(
            r.transactions, lambda t: transaction_view(shop, order, t), args
        ),
        "refundLineItems": lambda info, **args: connection(
            r.lines,
            lambda pair: {
                "id": gid("RefundLineItem", pair[0] * 10 + 1),
                "lineItem": line_item_view(order, lines[pair[0]]),
                "quantity": pair[1],
                "restockType": "NO_RESTOCK",
                "restocked": False,
                "priceSet": money(lines[pair[0]].unit_minor, order.currency),
                "subtotalSet": money(lines[pair[0]].unit_minor * pair[1], order.currency),
            },
            args,
        ),
        "order": lambda info: order_view(shop, order),
        "return": (lambda info: return_view(shop, order, ret)) if ret else None,
        "staffMember": None,
    }


def fulfillment_line_view(order: Order, li: LineItem, quantity: int | None = None) -> dict[str, Any]:
    """``FulfillmentLineItem``: the fake gives it its line item's number."""
    q = li.quantity if quantity is None else quantity
    return {
        "id": gid("FulfillmentLineItem", li.id),
        "lineItem": line_item_view(order, li),
        "quantity": q,
        "originalTotalSet": money(li.unit_minor * q, order.currency),
        "discountedTotalSet": money(li.unit_minor * q, order.currency),
    }


def fulfillment_view(shop: Shop, order: Order, f: Fulfillment) -> dict[str, Any]:
    """``Fulfillment`` with its tracking."""
    tracking = [{"company": f.company, "number": f.number, "url": f.url}] if f.number else []
    return {
        "id": gid("Fulfillment", f.id),
        "legacyResourceId": str(f.id),
        "name": f"{order.name}-F1",
        "status": "SUCCESS",
        "displayStatus": f.display_status,
        "createdAt": iso(f.created_at),
        "updatedAt": iso(f.delivered_at or f.created_at),
        "inTransitAt": iso(f.created_at),
        "deliveredAt": iso(f.delivered_at),
        "estimatedDeliveryAt": iso(f.estimated_delivery_at),
        "requiresShipping": True,
        "totalQuantity": sum(li.quantity for li in order.line_items),
        "trackingInfo": lambda info, first=None: tracking[:first] if first is not None else tracking,
        "fulfillmentLineItems": lambda info, **args: connection(
            order.line_items, lambda li: fulfillment_line_view(order, li), args
        ),
        "order": lambda info: order_view(shop, order),
    }


def return_view(shop: Shop, order: Order, r: Return) -> dict[str, Any]:
    """``Return``."""
    lines = {li.id: li for li in order.line_items}

    def line(pair: tuple[int, int]) -> dict[str, Any]:
        li_id, qty = pair
        done = qty if r.status == "CLOSED" else 0
        return {
            "__typename": "ReturnLineItem",
            "id": gid("ReturnLineItem", r.id * 100 + li_id % 100),
            "quantity": qty,
            "returnReasonNote": r.reason_note,
            "customerNote": None,
            "fulfillmentLineItem": fulfillment_line_view(order, lines[li_id], qty),
            "processedQuantity": done,
            "unprocessedQuantity": qty - done,
            "processableQuantity": qty - done,
            "refundableQuantity": qty - done,
            "refundedQuantity": done,
        }

    return {
        "id": gid("Return", r.id),
        "name": r.name,
        "status": r.status,
        "createdAt": iso(r.created_at),
        "closedAt": iso(r.created_at) if r.status == "CLOSED" else None,
        "totalQuantity": sum(q for _, q in r.lines),
        "returnLineItems": lambda info, **args: connection(r.lines, line, args),
        "refunds": lambda info, **args: connection(
            [x for x in order.refunds if x.return_id == r.id], lambda x: refund_view(shop, order, x), args
        ),
        "order": lambda info: order_view(shop, order),
    }


def order_view(shop: Shop, o: Order) -> dict[str, Any]:
    """``Order``."""
    from tests.fakes.shopify.suggested import suggested_refund  # it builds on this module's views

    customer = shop.customers.get(o.customer_id) if o.customer_id is not None else None
    refunded, captured = o.refunded_minor, o.captured_minor
    current = max(o.total_minor - refunded, 0)

    return {
        "id": gid("Order", o.id),
        "legacyResourceId": str(o.id),
        "name": o.name,
        "number": o.id,
        "email": o.email,
        "phone": None,
        "note": o.note,
        "tags": list(o.tags),
        "test": False,
        "createdAt": iso(o.created_at),
        "processedAt": iso(o.created_at),
        "updatedAt": iso(o.updated_at),
        "cancelledAt": iso(o.cancelled_at),
        "cancelReason": o.cancel_reason,
        "closed": o.closed_at is not None,
        "closedAt": iso(o.closed_at),
        "confirmed": True,
        "currencyCode": o.currency,
        "presentmentCurrencyCode": o.currency,
        "displayFinancialStatus": o.financial_status(),
        "displayFulfillmentStatus": "FULFILLED" if o.fulfilled else "UNFULFILLED",
        "fullyPaid": captured >= o.total_minor,
        "unpaid": captured == 0,
        "refundable": o.refundable_minor > 0,
        "customer": (lambda info: customer_view(shop, customer)) if customer else None,
        "totalPriceSet": money(o.total_minor, o.currency),
        "originalTotalPriceSet": money(o.total_minor, o.currency),
        "currentTotalPriceSet": money(current, o.currency),
        "subtotalPriceSet": money(sum(li.quantity * li.unit_minor for li in o.line_items), o.currency),
        "totalReceivedSet": money(captured, o.currency),
        "totalRefundedSet": money(refunded, o.currency),
        "netPaymentSet": money(captured - refunded, o.currency),
        "totalOutstandingSet": money(max(o.total_minor - captured, 0) if o.cancelled_at is None else 0, o.currency),
        "totalPrice": amount(o.total_minor),
        "shippingAddress": address_view(o.shipping_address, f"order-{o.id}"),
        "lineItems": lambda info, **args: connection(o.line_items, lambda li: line_item_view(o, li), args),
        "transactions": lambda info, first=None, **_: [transaction_view(shop, o, t) for t in o.transactions][:first],
        "refunds": lambda info, first=None: [refund_view(shop, o, r) for r in o.refunds][:first],
        "fulfillments": lambda info, first=None, query=None: [fulfillment_view(shop, o, f) for f in o.fulfillments][
            :first
        ],
        "returns": lambda info, **args: connection(o.returns, lambda r: return_view(shop, o, r), args),
        "suggestedRefund": lambda info, **args: suggested_refund(shop, o, info, **args),
        **_metafield_fields(o.metafields, "ORDER"),
    }


def webhook_view(w: WebhookSubscription) -> dict[str, Any]:
    """``WebhookSubscription``."""
    return {
        "id": gid("WebhookSubscription", w.id),
        "legacyResourceId": str(w.id),
        "topic": w.topic,
        "uri": w.uri,
        "format": "JSON",
        "name": None,
        "filter": None,
        "includeFields": [],
        "metafieldNamespaces": [],
        "apiVersion": {"handle": "2026-10", "displayName": "2026-10", "supported": True},
        "createdAt": iso(w.created_at),
        "updatedAt": iso(w.created_at),
    }
