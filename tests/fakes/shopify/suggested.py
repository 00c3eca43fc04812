"""``Order.suggestedRefund``: what Shopify proposes to give back, spread over the order's
successful sales (each up to what it has left after earlier refunds)."""

from __future__ import annotations

from typing import Any

from graphql import GraphQLResolveInfo

from tests.fakes.shopify.connections import NotImplementedByFake
from tests.fakes.shopify.state import Order, Shop, Transaction, money, parse_gid
from tests.fakes.shopify.views import line_item_view, transaction_view


def _left_on(order: Order, sale: Transaction) -> int:
    refunded = sum(
        t.amount_minor
        for t in order.transactions
        if t.kind == "REFUND" and t.status == "SUCCESS" and t.parent_id == sale.id
    )
    return max(sale.amount_minor - refunded, 0)


def suggested_refund(shop: Shop, order: Order, info: GraphQLResolveInfo, **args: Any) -> dict[str, Any]:
    """The ``SuggestedRefund`` for ``suggestFullRefund`` or ``refundLineItems`` (else nothing)."""
    if args.get("refundDuties") or args.get("refundShipping") or args.get("shippingAmount") is not None:
        raise NotImplementedByFake("Order.suggestedRefund with duties or shipping")
    if args.get("refundMethodAllocation") not in (None, "ORIGINAL_PAYMENT_METHODS"):
        raise NotImplementedByFake("Order.suggestedRefund(refundMethodAllocation: STORE_CREDIT)")
    lines = []
    for item in args.get("refundLineItems") or []:
        li = next((x for x in order.line_items if x.id == parse_gid(item["lineItemId"], "LineItem")), None)
        if li is not None:
            lines.append((li, min(item["quantity"], li.quantity - li.refunded_quantity)))
    subtotal = sum(li.unit_minor * q for li, q in lines)
    wanted = order.refundable_minor if args.get("suggestFullRefund") else min(subtotal, order.refundable_minor)
    suggestions, left = [], wanted
    for sale in (t for t in order.transactions if t.kind in ("SALE", "CAPTURE") and t.status == "SUCCESS"):
        share = min(left, _left_on(order, sale))
        if share > 0:
            suggestions.append(
                {
                    "kind": "SUGGESTED_REFUND",
                    "gateway": sale.gateway,
                    "formattedGateway": "Shopify Payments",
                    "amountSet": money(share, order.currency),
                    "maximumRefundableSet": money(_left_on(order, sale), order.currency),
                    "parentTransaction": transaction_view(shop, order, sale),
                }
            )
            left -= share
    return {
        "amountSet": money(wanted, order.currency),
        "maximumRefundableSet": money(order.refundable_minor, order.currency),
        "subtotalSet": money(subtotal, order.currency),
        "discountedSubtotalSet": money(subtotal, order.currency),
        "totalTaxSet": money(0, order.currency),
        "totalCartDiscountAmountSet": money(0, order.currency),
        "totalDutiesSet": money(0, order.currency),
        "suggestedTransactions": suggestions,
        "refundLineItems": [
            {
                "lineItem": line_item_view(order, li),
                "quantity": q,
                "restockType": "NO_RESTOCK",
                "restocked": False,
                "priceSet": money(li.unit_minor, order.currency),
                "subtotalSet": money(li.unit_minor * q, order.currency),
                "totalTaxSet": money(0, order.currency),
            }
            for li, q in lines
        ],
    }
