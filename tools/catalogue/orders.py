"""The ``orders`` group: look up, track, cancel, re-address, reorder, and message
the customer about an order.

``send_message`` takes no address and no free text: the template is an enum,
the body is rendered here from the store's records, and the backend delivers
it to the contact on file (S3).
"""

from __future__ import annotations

from typing import Any

from tools.backend import Address
from tools.catalogue._common import (
    HOUR,
    action_meta,
    backend_errors,
    bound_customer,
    contact_on_file,
    day,
    digest,
    on_order,
    operation,
    owned_order,
    read_meta,
    write_key,
)
from tools.context import ToolContext, ToolFailure
from tools.registry import Money, ToolDef
from tools.results import (
    format_money,
    iso,
    listing,
    message_result,
    order_line,
    order_result,
    place,
    shipment_result,
)
from tools.schemas import (
    CANCEL_REASONS,
    MESSAGE_CHANNELS,
    MESSAGE_TEMPLATES,
    ORDER_STATUSES,
    address,
    enum,
    evidence,
    obj,
    order_id,
)

Result = dict[str, Any]

LIST_CAP = 20
CANCELLABLE = ("PENDING", "PAID")


# -- reads ----------------------------------------------------------------------


async def _order_view(ctx: ToolContext, oid: str) -> Result:
    order = await owned_order(ctx, oid)
    with backend_errors():
        refundable = await ctx.backend.refundable_minor(ctx.customer_id, order.id)
    return order_result(order, refundable_minor=refundable, limit=ctx.rules.untrusted_text_limit)


async def _get_order(args: dict[str, Any], ctx: ToolContext) -> Result:
    return await _order_view(ctx, args["order_id"])


async def _list_orders(args: dict[str, Any], ctx: ToolContext) -> Result:
    with backend_errors():
        orders = await ctx.backend.list_orders(ctx.customer_id, status=args.get("status"))
    orders.sort(key=lambda o: o.placed_at, reverse=True)
    return listing("orders", (order_line(o) for o in orders), cap=LIST_CAP)


async def _track_shipment(args: dict[str, Any], ctx: ToolContext) -> Result:
    with backend_errors():
        shipment = await ctx.backend.track_shipment(ctx.customer_id, args["order_id"])
    if shipment is None:
        await owned_order(ctx, args["order_id"])  # not_found when not owned
        raise ToolFailure("no_shipment", "This order has no shipment yet.", order_id=args["order_id"])
    return shipment_result(shipment)


# -- cancel_order (tier 2) ---------------------------------------------------------


def _cancel_key(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"cancel:{args['order_id']}"


async def _cancel_check(args: dict[str, Any], ctx: ToolContext) -> None:
    order = await owned_order(ctx, args["order_id"])
    if order.status not in CANCELLABLE:
        raise ToolFailure(
            "order_not_cancellable",
            "Only orders that have not shipped can be cancelled.",
            status=order.status,
        )


async def _cancel_money(args: dict[str, Any], ctx: ToolContext) -> Money | None:
    """Cancelling a paid order refunds what was captured: that is the money at stake."""
    with backend_errors():
        refundable = await ctx.backend.refundable_minor(ctx.customer_id, args["order_id"])
        order = await ctx.backend.get_order(ctx.customer_id, args["order_id"])
    if order is None or not refundable:
        return None
    return Money(amount_minor=refundable, currency=order.currency)


async def _cancel_order(args: dict[str, Any], ctx: ToolContext) -> Result:
    with backend_errors():
        order = await ctx.backend.cancel_order(
            ctx.customer_id,
            args["order_id"],
            reason_code=args["reason_code"],
            idempotency_key=write_key(_cancel_key, args, ctx),
        )
    return {"order_id": order.id, "status": order.status, "cancelled": order.status == "CANCELLED"}


# -- update_shipping_address (tier 1) ---------------------------------------------


def _canonical_address(raw: dict[str, Any]) -> dict[str, str]:
    out = {k: " ".join(str(v).split()) for k, v in raw.items() if v is not None and str(v).strip()}
    if "country" in out:
        out["country"] = out["country"].upper()
    return out


def _address_key(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"address:{args['order_id']}:{operation(ctx, _canonical_address(args['address']))}"


async def _address_check(args: dict[str, Any], ctx: ToolContext) -> None:
    order = await owned_order(ctx, args["order_id"])
    if order.status not in CANCELLABLE:
        raise ToolFailure(
            "address_change_not_allowed",
            "The delivery address can only change before the order ships.",
            status=order.status,
        )
    current = order.shipping_address
    if current is not None and digest(_canonical_address(vars(current))) == digest(_canonical_address(args["address"])):
        raise ToolFailure("no_change", "The order already ships to this address.")


async def _update_shipping_address(args: dict[str, Any], ctx: ToolContext) -> Result:
    fields = _canonical_address(args["address"])
    with backend_errors():
        order = await ctx.backend.update_shipping_address(
            ctx.customer_id,
            args["order_id"],
            address=Address(**fields),
            idempotency_key=write_key(_address_key, args, ctx),
        )
    return {"order_id": order.id, "status": order.status, "ship_to": place(order.shipping_address)}


def _address_summary(args: dict[str, Any]) -> str:
    a = _canonical_address(args["address"])
    parts = [a.get("line1"), a.get("line2"), a.get("city"), a.get("region"), a.get("postal_code")]
    line = ", ".join(p for p in parts if p)
    return f"Ship {args['order_id']} to {line}, {a.get('country', '')}"


# -- create_reorder (tier 1) -------------------------------------------------------


def _reorder_key(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"reorder:{args['order_id']}:{day(ctx)}"


async def _reorder_check(args: dict[str, Any], ctx: ToolContext) -> None:
    await owned_order(ctx, args["order_id"])


async def _create_reorder(args: dict[str, Any], ctx: ToolContext) -> Result:
    with backend_errors():
        order = await ctx.backend.create_reorder(
            ctx.customer_id, args["order_id"], idempotency_key=write_key(_reorder_key, args, ctx)
        )
    return {"reordered_from": args["order_id"], **order_line(order)}


# -- send_message (tier 1) -----------------------------------------------------------

_STATUS_TEXT = {
    "PENDING": "waiting for payment",
    "PAID": "paid and being prepared for shipping",
    "SHIPPED": "on its way",
    "DELIVERED": "delivered",
    "CANCELLED": "cancelled",
}


def _message_key(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"message:{args['template']}:{ctx.customer_id}:{args['channel']}:{args.get('order_id') or '-'}:{day(ctx)}"


async def _render(args: dict[str, Any], ctx: ToolContext) -> str:
    """The message body, from the template and the store's records only.

    Raises the same ToolFailure the check reports, so check and send agree.
    """
    contact_on_file(await bound_customer(ctx), args["channel"])
    template = args["template"]
    if not args.get("order_id"):
        raise ToolFailure("order_id_required", f"The {template} message is about one order.")
    order = await owned_order(ctx, args["order_id"])
    if template == "order_update":
        return f"Update on your order {order.id}: it is {_STATUS_TEXT[order.status]}."
    if template == "shipping_delay":
        return await _render_delay(ctx, order.id, order.status)
    if template == "return_label":
        with backend_errors():
            returns = [
                r
                for r in await ctx.backend.list_returns(ctx.customer_id)
                if r.order_id == order.id and r.status == "requested"
            ]
        if not returns:
            raise ToolFailure("no_return_for_order", "There is no open return for this order.")
        ret = max(returns, key=lambda r: r.created_at)
        return (
            f"Your return {ret.id} for order {order.id} is registered. Print your prepaid "
            f"label at https://shop.example/returns/{ret.id}/label and drop the parcel off "
            "at any carrier point."
        )
    with backend_errors():
        refunds = await ctx.backend.list_refunds(ctx.customer_id, order_id=order.id)
    if not refunds:
        raise ToolFailure("no_refund_for_order", "No refund has been issued for this order.")
    refund = max(refunds, key=lambda r: r.created_at)
    return (
        f"We refunded {format_money(refund.amount_minor, refund.currency)} for order "
        f"{order.id} (refund {refund.id}). It can take 5-10 business days to show on "
        "your statement."
    )


async def _render_delay(ctx: ToolContext, oid: str, status: str) -> str:
    if status in ("DELIVERED", "CANCELLED"):
        raise ToolFailure("template_not_applicable", "The order is no longer in transit.", status=status)
    with backend_errors():
        shipment = await ctx.backend.track_shipment(ctx.customer_id, oid)
    eta = iso(shipment.estimated_delivery) if shipment else None
    when = f" The new estimated delivery date is {eta[:10]}." if eta else ""
    return f"Your order {oid} is delayed. We are sorry for the wait.{when}"


async def _message_check(args: dict[str, Any], ctx: ToolContext) -> None:
    await _render(args, ctx)


async def _send_message(args: dict[str, Any], ctx: ToolContext) -> Result:
    body = await _render(args, ctx)
    with backend_errors():
        message = await ctx.backend.send_message(
            ctx.customer_id,
            channel=args["channel"],
            template=args["template"],
            body=body,
            idempotency_key=write_key(_message_key, args, ctx),
        )
    return message_result(message)


def _message_summary(args: dict[str, Any]) -> str:
    about = f" about {args['order_id']}" if args.get("order_id") else ""
    return f"Send the {args['template']} {args['channel']}{about} to the contact on file"


TOOLS: tuple[ToolDef, ...] = (
    ToolDef(
        name="get_order",
        description=(
            "Read one of the bound customer's orders: status, items, total, amount still "
            "refundable, placed and delivered dates, destination city. Use it before any "
            "action on an order. An order that is not on this account is reported as not found."
        ),
        input_schema=obj({"order_id": order_id()}, required=("order_id",)),
        meta=read_meta("orders", "orders:read"),
        handler=_get_order,
    ),
    ToolDef(
        name="list_orders",
        description=(
            "List the bound customer's orders, newest first (up to 20), optionally by status. "
            "Use it when the customer does not give an order id."
        ),
        input_schema=obj({"status": enum(ORDER_STATUSES, "Only orders in this status.")}),
        meta=read_meta("orders", "orders:read"),
        handler=_list_orders,
    ),
    ToolDef(
        name="track_shipment",
        description=(
            "Track the shipment of one of the bound customer's orders: carrier, tracking "
            "number, shipped and delivered dates, estimated delivery. Use it for 'where is my "
            "order' once you know the order id."
        ),
        input_schema=obj({"order_id": order_id()}, required=("order_id",)),
        meta=read_meta("orders", "orders:read"),
        handler=_track_shipment,
    ),
    ToolDef(
        name="cancel_order",
        description=(
            "Cancel an order that has not shipped yet (status PENDING or PAID); any captured "
            "payment is refunded by the shop. Use only when the customer asks to cancel, after "
            "get_order, and cite the cancellation policy you retrieved with search_knowledge "
            "in evidence. The customer must confirm; some cancellations need approval. For "
            "shipped orders offer a return instead."
        ),
        input_schema=obj(
            {
                "order_id": order_id(),
                "reason_code": enum(CANCEL_REASONS, "Why the customer cancels."),
                "evidence": evidence(),
            },
            required=("order_id", "reason_code"),
        ),
        meta=action_meta("orders", "orders:write", 2, approval_expiry_s=4 * HOUR),
        done_status="CANCELLED",
        id_field="order_id",
        claim=r"\b(i|we)('ve| have)? cancell?ed\b|\b(order|it)( o-\w+)? (has been|was|is now) cancell?ed\b",
        done_phrase="cancelled order {order}",
        handler=_cancel_order,
        check=_cancel_check,
        key=_cancel_key,
        money_at_stake=_cancel_money,
        money=lambda args: None,
        money_kind="cancellation",
        target=on_order,
        summary=lambda args: f"Cancel {args['order_id']} ({args['reason_code']})",
    ),
    ToolDef(
        name="update_shipping_address",
        description=(
            "Change where an order that has not shipped yet will be delivered. Use only with "
            "an address the customer gave for this order; the customer must confirm it. Not "
            "possible once the order has shipped. It does not change the account's address."
        ),
        input_schema=obj({"order_id": order_id(), "address": address()}, required=("order_id", "address")),
        meta=action_meta("orders", "orders:write", 1),
        done_status="UPDATED",
        id_field="order_id",
        done_phrase="updated the shipping address of {order}",
        handler=_update_shipping_address,
        check=_address_check,
        key=_address_key,
        target=on_order,
        summary=_address_summary,
    ),
    ToolDef(
        name="create_reorder",
        description=(
            "Place a new order with the same items as an earlier order of the bound customer; "
            "the new order waits for payment. Use when the customer asks to order the same "
            "thing again, not as a replacement for a damaged item (use a return or refund)."
        ),
        input_schema=obj({"order_id": order_id()}, required=("order_id",)),
        meta=action_meta("orders", "orders:write", 1),
        done_status="CREATED",
        id_field="order_id",
        done_phrase="placed a new order",
        handler=_create_reorder,
        check=_reorder_check,
        key=_reorder_key,
        target=on_order,
        summary=lambda args: f"Place a new order with the items of {args['order_id']}",
    ),
    ToolDef(
        name="send_message",
        description=(
            "Send the customer a standard message about an order, by email or SMS, to the "
            "contact details on file. You choose a template, not the text: order_update (current "
            "status), shipping_delay (delay notice with new estimate), return_label (label for "
            "an open return), refund_confirmation (the latest refund). It cannot send to any "
            "other address; never promise to."
        ),
        input_schema=obj(
            {
                "channel": enum(MESSAGE_CHANNELS, "email or sms, to the contact on file."),
                "template": enum(MESSAGE_TEMPLATES, "Which standard message to send."),
                "order_id": order_id(),
            },
            required=("channel", "template"),
        ),
        meta=action_meta("orders", "messages:send", 1),
        done_status="SENT",
        id_field="message_id",
        done_phrase="sent the message to the contact on file",
        handler=_send_message,
        check=_message_check,
        key=_message_key,
        target=lambda args: f"message:{args['template']}:{args.get('order_id') or '-'}",
        summary=_message_summary,
    ),
)
