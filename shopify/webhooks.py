"""The store's webhooks: the HMAC check, the delivery's identity, and what a delivery means.

Shopify signs the raw body with the app's secret (HMAC-SHA256, base64, in
``X-Shopify-Hmac-Sha256``); each delivery names its event (``X-Shopify-Event-Id``, else
``X-Shopify-Webhook-Id``) and topic. :func:`staff_action` reads a refund, a cancellation or a
return and says whether staff made it outside signoff: signoff's own writes carry the ledger
key (a refund's note, an order's ``signoff.operations`` metafield, a return line's note)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shopify import mapping
from shopify.money import to_minor

#: Topics signoff subscribes (``signoff shopify webhooks install``) and acts on.
TOPICS = ("orders/updated", "orders/cancelled", "refunds/create", "returns/request", "returns/approve",
          "customers/update")  # fmt: skip
#: Set in the app's configuration (``shopify.app.toml``), not through the Admin API.
COMPLIANCE_TOPICS = ("customers/data_request", "customers/redact", "shop/redact")
_CANCEL_REASONS = {"customer": "customer_request", "declined": "payment_issue", "inventory": "customer_request"}
_RETURN_REASONS = {
    "defective": "defective",
    "wrong_item": "wrong_item",
    "not_as_described": "not_as_described",
    "size_too_small": "wrong_size",
    "size_too_large": "wrong_size",
    "unwanted": "changed_mind",
}


def verify(secret: str, body: bytes, signature: str | None) -> bool:
    """Whether ``signature`` is the base64 HMAC-SHA256 of ``body`` under ``secret`` (constant time)."""
    if not signature or not secret:
        return False
    expected = base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest()).decode()
    return hmac.compare_digest(expected, signature.strip())


def sign(secret: str, body: bytes) -> str:
    """The ``X-Shopify-Hmac-Sha256`` of ``body`` (tests, and a fake store)."""
    return base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest()).decode()


def event_id(headers: Mapping[str, str]) -> str | None:
    """The delivery's dedup id: the event id, else the webhook id."""
    value = headers.get("X-Shopify-Event-Id") or headers.get("X-Shopify-Webhook-Id")
    return value.strip()[:100] if value and value.strip() else None


@dataclass(frozen=True, kw_only=True)
class OutsideAction:
    """A staff action made in the shop's admin, in the catalogue's terms."""

    tool: str
    arguments: dict[str, Any]
    customer_id: str | None


def order_gid(body: Mapping[str, Any]) -> str | None:
    """The order a refunds/create or orders/* body is about, as a GID."""
    raw = body.get("admin_graphql_api_id") if "name" in body else None
    if isinstance(raw, str) and raw.startswith("gid://shopify/Order/"):
        return raw
    number = body.get("order_id") if "order_id" in body else body.get("id")
    if isinstance(number, str) and number.isdigit():
        number = int(number)
    return f"gid://shopify/Order/{number}" if isinstance(number, int) and not isinstance(number, bool) else None


def refund_action(body: Mapping[str, Any], order: Mapping[str, Any]) -> OutsideAction | None:
    """A refunds/create delivery: ``None`` when it is signoff's own (its note carries a key)."""
    if "signoff:" in str(body.get("note") or ""):
        return None
    currency = str(order.get("currencyCode") or "")
    amount = 0
    for t in body.get("transactions") or ():
        if isinstance(t, Mapping) and t.get("kind") == "refund" and t.get("status") in ("success", None):
            amount += to_minor(str(t.get("amount") or "0"), str(t.get("currency") or currency))
    if amount <= 0:
        return None
    args = {"order_id": str(order["name"]), "amount_minor": amount, "currency": currency}
    return OutsideAction(tool="issue_refund", arguments=args, customer_id=_owner(order))


def cancel_action(body: Mapping[str, Any], order: Mapping[str, Any]) -> OutsideAction | None:
    """An orders/cancelled delivery: ``None`` when signoff cancelled it (its key on the order)."""
    if any(e.get("op") == "cancel_order" for e in mapping.operations(dict(order))):
        return None
    reason = _CANCEL_REASONS.get(str(body.get("cancel_reason") or "").lower(), "customer_request")
    args = {"order_id": str(order["name"]), "reason_code": reason}
    return OutsideAction(tool="cancel_order", arguments=args, customer_id=_owner(order))


def return_action(ret: Mapping[str, Any], order: Mapping[str, Any]) -> OutsideAction | None:
    """A returns/* delivery: ``None`` when signoff opened it (its key on the return's lines)."""
    lines = (ret.get("returnLineItems") or {}).get("nodes") or ()
    notes = [str(li.get(f) or "") for li in lines for f in ("customerNote", "returnReasonNote")]
    if any(n.startswith("signoff:") for n in notes):
        return None
    parsed = mapping.return_(dict(ret), str(order["name"]))
    reason = _RETURN_REASONS.get(str(parsed.reason_code or ""), "changed_mind")
    items = [{"sku": i.sku, "qty": i.qty} for i in parsed.items]
    args = {"order_id": str(order["name"]), "items": items, "reason_code": reason}
    return OutsideAction(tool="create_return", arguments=args, customer_id=_owner(order))


def _owner(order: Mapping[str, Any]) -> str | None:
    owner = (order.get("customer") or {}).get("id")
    return str(owner) if owner else None
