"""What staff do in the Shopify admin, outside signoff: each action changes the shop and
returns the webhook Shopify would send for it (``refunds/create``, ``orders/cancelled``,
``returns/request``), for the test to deliver with :func:`~tests.fakes.shopify.webhooks.deliver`."""

from __future__ import annotations

from datetime import datetime

from tests.fakes.shopify.state import Order, Refund, Return, Shop, Transaction
from tests.fakes.shopify.webhooks import Webhook, order_json, refund_json, return_json, webhook


class AdminActionRefused(ValueError):
    """The admin would not allow this (the test asked for something impossible)."""


def _order(shop: Shop, order_id: int) -> Order:
    order = shop.orders.get(order_id)
    if order is None:
        raise AdminActionRefused(f"no order {order_id}")
    return order


def staff_refund(shop: Shop, order_id: int, amount_minor: int, now: datetime, note: str | None = None) -> Webhook:
    """Staff refund ``amount_minor`` on the order's first successful sale."""
    order = _order(shop, order_id)
    if not 0 < amount_minor <= order.refundable_minor:
        raise AdminActionRefused(f"{amount_minor} is not refundable on order {order_id} ({order.refundable_minor})")
    sale = next(t for t in order.transactions if t.kind in ("SALE", "CAPTURE") and t.status == "SUCCESS")
    tx = Transaction(
        id=shop.new_id(), kind="REFUND", status="SUCCESS", amount_minor=amount_minor, created_at=now, parent_id=sale.id
    )
    refund = Refund(id=shop.new_id(), created_at=now, transactions=[tx], note=note, by_staff=True)
    order.refunds.append(refund)
    order.transactions.append(tx)
    return webhook(shop, "refunds/create", refund_json(order, refund), now)


def staff_cancel(shop: Shop, order_id: int, now: datetime, reason: str = "CUSTOMER") -> Webhook:
    """Staff cancel an open, unfulfilled order (refunding what was paid)."""
    order = _order(shop, order_id)
    if order.cancelled_at is not None or order.fulfilled:
        raise AdminActionRefused(f"order {order_id} cannot be cancelled")
    if order.refundable_minor:
        sale = next(t for t in order.transactions if t.kind in ("SALE", "CAPTURE") and t.status == "SUCCESS")
        tx = Transaction(
            id=shop.new_id(),
            kind="REFUND",
            status="SUCCESS",
            amount_minor=order.refundable_minor,
            created_at=now,
            parent_id=sale.id,
        )
        order.refunds.append(Refund(id=shop.new_id(), created_at=now, transactions=[tx], by_staff=True))
        order.transactions.append(tx)
    order.cancelled_at, order.cancel_reason = now, reason
    return webhook(shop, "orders/cancelled", order_json(shop, order), now)


def staff_return(shop: Shop, order_id: int, now: datetime, note: str = "") -> Webhook:
    """A return of every line of a fulfilled order, requested through the admin."""
    order = _order(shop, order_id)
    if not order.fulfilled:
        raise AdminActionRefused(f"order {order_id} has nothing fulfilled to return")
    ret = Return(
        id=shop.new_id(),
        name=f"{order.name}-R{len(order.returns) + 1}",
        status="REQUESTED",
        created_at=now,
        lines=[(li.id, li.quantity) for li in order.line_items],
        reason_note=note,
    )
    order.returns.append(ret)
    return webhook(shop, "returns/request", return_json(order, ret), now)


def staff_approve_return(shop: Shop, return_id: int, now: datetime) -> Webhook:
    """Staff approve a requested return (``REQUESTED`` → ``OPEN``): the ``returns/approve`` webhook."""
    found = shop.return_(return_id)
    if found is None or found[1].status != "REQUESTED":
        raise AdminActionRefused(f"return {return_id} is not awaiting approval")
    order, ret = found
    ret.status = "OPEN"
    return webhook(shop, "returns/approve", return_json(order, ret), now)


def order_updated(shop: Shop, order_id: int, now: datetime, note: str) -> Webhook:
    """Staff edit an order's note in the admin: the ``orders/updated`` webhook."""
    order = _order(shop, order_id)
    order.note = note
    return webhook(shop, "orders/updated", order_json(shop, order), now)
