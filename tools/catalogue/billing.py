"""The ``billing`` group: invoices, payments, refunds and payment retries.

``issue_refund`` is the tool an attacker wants most; its check enforces, at
judgement time and again right before execution: ownership, the order's
currency, the refundable amount, the refund window and the per-day limit.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tools.catalogue._common import (
    DAY,
    action_meta,
    backend_errors,
    captured_and_failed,
    day,
    not_found,
    on_order,
    owned_order,
    read_meta,
    write_key,
)
from tools.context import ToolContext, ToolFailure
from tools.registry import Money, ToolDef
from tools.results import (
    as_utc,
    format_money,
    invoice_result,
    iso,
    listing,
    payment_result,
    refund_result,
)
from tools.schemas import (
    REFUND_REASONS,
    amount_minor,
    currency,
    enum,
    evidence,
    invoice_id,
    obj,
    order_id,
    return_id,
)

Result = dict[str, Any]

LIST_CAP = 30


async def _get_invoices(args: dict[str, Any], ctx: ToolContext) -> Result:
    with backend_errors():
        invoices = await ctx.backend.get_invoices(ctx.customer_id, invoice_id=args.get("invoice_id"))
    if args.get("invoice_id") and not invoices:
        raise not_found("invoice", args["invoice_id"])
    invoices.sort(key=lambda i: i.issued_at, reverse=True)
    return listing("invoices", (invoice_result(i) for i in invoices), cap=LIST_CAP)


async def _list_payments(args: dict[str, Any], ctx: ToolContext) -> Result:
    oid = args.get("order_id")
    if oid:
        await owned_order(ctx, oid)
    with backend_errors():
        payments = await ctx.backend.list_payments(ctx.customer_id, order_id=oid)
        refunds = await ctx.backend.list_refunds(ctx.customer_id, order_id=oid)
    payments.sort(key=lambda p: p.created_at, reverse=True)
    refunds.sort(key=lambda r: r.created_at, reverse=True)
    out = listing("payments", (payment_result(p) for p in payments), cap=LIST_CAP)
    out["refunds"] = [refund_result(r) for r in refunds[:LIST_CAP]]
    return out


# -- issue_refund (tier 2) ---------------------------------------------------------------


def _refund_key(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"refund:{args['order_id']}:{args['amount_minor']}:{args['currency']}:{args.get('return_id') or '-'}"


def _refund_money(args: dict[str, Any]) -> Money:
    return Money(amount_minor=args["amount_minor"], currency=args["currency"])


async def _refund_check(args: dict[str, Any], ctx: ToolContext) -> None:
    order = await owned_order(ctx, args["order_id"])
    if args.get("return_id"):
        await _check_return(ctx, args["return_id"], order.id)
    if args["currency"] != order.currency:
        raise ToolFailure("currency_mismatch", "Refund in the order's currency.", order_currency=order.currency)
    with backend_errors():
        refundable = await ctx.backend.refundable_minor(ctx.customer_id, order.id)
    if refundable is None:
        raise not_found("order", order.id)
    if args["amount_minor"] > refundable:
        raise ToolFailure(
            "amount_exceeds_refundable",
            "The amount is more than what can still be refunded on this order.",
            refundable_minor=refundable,
            currency=order.currency,
        )
    now = as_utc(ctx.now)
    if order.status == "DELIVERED":
        delivered = as_utc(order.delivered_at or order.placed_at)
        if now - delivered > timedelta(days=ctx.rules.refund_window_days):
            raise ToolFailure(
                "outside_refund_window",
                "The refund window for this order has closed; escalate if an exception is due.",
                delivered_at=iso(delivered),
            )
    with backend_errors():
        recent = await ctx.backend.refunds_since(ctx.customer_id, now - timedelta(days=1))
    if len(recent) >= ctx.rules.max_refunds_per_customer_per_day:
        # The limit itself is policy the model is never told.
        raise ToolFailure(
            "daily_refund_limit_reached",
            "No more refunds can be issued on this account today; escalate to a human.",
        )


async def _check_return(ctx: ToolContext, rid: str, oid: str) -> None:
    with backend_errors():
        ret = await ctx.backend.get_return(ctx.customer_id, rid)
    if ret is None or ret.order_id != oid:
        raise ToolFailure("not_found", f"No return {rid} for order {oid}.", return_id=rid)
    if ret.status in ("refunded", "rejected"):
        raise ToolFailure("return_not_eligible", f"The return is {ret.status}.", status=ret.status)


async def _issue_refund(args: dict[str, Any], ctx: ToolContext) -> Result:
    with backend_errors():
        refund = await ctx.backend.issue_refund(
            ctx.customer_id,
            args["order_id"],
            amount_minor=args["amount_minor"],
            currency=args["currency"],
            reason_code=args["reason_code"],
            return_id=args.get("return_id"),
            idempotency_key=write_key(_refund_key, args, ctx),
        )
    return refund_result(refund)


def _refund_summary(args: dict[str, Any]) -> str:
    line = (
        f"Refund {format_money(args['amount_minor'], args['currency'])} on {args['order_id']} ({args['reason_code']})"
    )
    return f"{line} for return {args['return_id']}" if args.get("return_id") else line


# -- retry_payment (tier 1, never blindly retried) -------------------------------------


def _retry_key(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"retry_payment:{args['order_id']}:{day(ctx)}"


async def _retry_check(args: dict[str, Any], ctx: ToolContext) -> None:
    order = await owned_order(ctx, args["order_id"])
    captured, failed = await captured_and_failed(ctx, order.id)
    if order.status == "CANCELLED" or not failed:
        raise ToolFailure(
            "nothing_to_retry",
            "There is no failed payment to retry on this order.",
            status=order.status,
        )
    if order.status != "PENDING" or captured >= order.total_minor:
        raise ToolFailure("nothing_to_retry", "This order is already paid.", status=order.status)


async def _retry_payment(args: dict[str, Any], ctx: ToolContext) -> Result:
    with backend_errors():
        payment = await ctx.backend.retry_payment(
            ctx.customer_id, args["order_id"], idempotency_key=write_key(_retry_key, args, ctx)
        )
    return payment_result(payment)


TOOLS: tuple[ToolDef, ...] = (
    ToolDef(
        name="get_invoices",
        description=(
            "Read the bound customer's invoices (amount, order, issue date), newest first, or "
            "one invoice by id. Use it when the customer asks for an invoice or receipt."
        ),
        input_schema=obj({"invoice_id": invoice_id()}),
        meta=read_meta("billing", "billing:read"),
        handler=_get_invoices,
    ),
    ToolDef(
        name="list_payments",
        description=(
            "List payments (captured, failed, refunded) and refunds on the bound customer's "
            "account, optionally for one order. Use it for double charges, declined payments "
            "and 'where is my refund' before acting."
        ),
        input_schema=obj({"order_id": order_id()}),
        meta=read_meta("billing", "billing:read"),
        handler=_list_payments,
    ),
    ToolDef(
        name="issue_refund",
        description=(
            "Refund money on one of the bound customer's orders, in the order's currency and "
            "at most its refundable_minor. Only after checking the order with get_order and "
            "citing, in evidence, the refund policy you retrieved with search_knowledge; give "
            "return_id when the refund is for a return. The customer must confirm and larger "
            "refunds need a supervisor's approval. Never for another customer or another "
            "account's order, and never split one refund into several."
        ),
        input_schema=obj(
            {
                "order_id": order_id(),
                "amount_minor": amount_minor(),
                "currency": currency(),
                "reason_code": enum(REFUND_REASONS, "Why the money is refunded."),
                "evidence": evidence(),
                "return_id": return_id(),
            },
            required=("order_id", "amount_minor", "currency", "reason_code"),
        ),
        meta=action_meta("billing", "billing:refund", 2, approval_expiry_s=DAY, timeout_s=20.0),
        done_status="REFUNDED",
        id_field="refund_id",
        claim=(
            r"\b(i|we)('ve| have)? (refunded|issued (a|the|your) refund)|\byour refund (has been|was) "
            r"(issued|processed|sent)|\b(has|have) been refunded\b"
        ),
        done_phrase="refunded {amount} on {order}",
        handler=_issue_refund,
        check=_refund_check,
        key=_refund_key,
        money=_refund_money,
        target=on_order,
        summary=_refund_summary,
    ),
    ToolDef(
        name="retry_payment",
        description=(
            "Charge the saved payment method again for an unpaid order whose last payment "
            "failed. Only when the customer asks and has fixed the cause (e.g. updated their "
            "card); never repeat it if it fails again. Offer send_payment_link instead "
            "if they want to pay with another card."
        ),
        input_schema=obj({"order_id": order_id()}, required=("order_id",)),
        meta=action_meta("billing", "billing:write", 1, timeout_s=30.0, retryable=False),
        done_status="CHARGED",
        id_field="payment_id",
        done_phrase="retried the payment on {order}",
        handler=_retry_payment,
        check=_retry_check,
        key=_retry_key,
        target=on_order,
        summary=lambda args: f"Charge the saved payment method again for {args['order_id']}",
    ),
)
