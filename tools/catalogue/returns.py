"""The ``returns`` group: read the bound customer's returns and start new ones."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from tools.backend import ReturnItem
from tools.catalogue._common import (
    action_meta,
    backend_errors,
    not_found,
    owned_order,
    read_meta,
    write_key,
)
from tools.context import ToolContext, ToolFailure
from tools.registry import ToolDef
from tools.results import as_utc, iso, listing, return_result
from tools.schemas import RETURN_REASONS, enum, obj, order_id, return_id, return_items

Result = dict[str, Any]

LIST_CAP = 20


async def _get_return(args: dict[str, Any], ctx: ToolContext) -> Result:
    with backend_errors():
        ret = await ctx.backend.get_return(ctx.customer_id, args["return_id"])
    if ret is None:
        raise not_found("return", args["return_id"])
    return return_result(ret)


async def _list_returns(args: dict[str, Any], ctx: ToolContext) -> Result:
    with backend_errors():
        returns = await ctx.backend.list_returns(ctx.customer_id)
    returns.sort(key=lambda r: r.created_at, reverse=True)
    return listing("returns", (return_result(r) for r in returns), cap=LIST_CAP)


# -- create_return (tier 1) -----------------------------------------------------------


def _wanted(args: dict[str, Any]) -> Counter[str]:
    wanted: Counter[str] = Counter()
    for item in args["items"]:
        wanted[item["sku"]] += item["qty"]
    return wanted


def _return_key(args: dict[str, Any], ctx: ToolContext) -> str:
    items = ",".join(f"{sku}x{qty}" for sku, qty in sorted(_wanted(args).items()))
    return f"return:{args['order_id']}:{items}"


async def _return_check(args: dict[str, Any], ctx: ToolContext) -> None:
    order = await owned_order(ctx, args["order_id"])
    if order.status != "DELIVERED":
        raise ToolFailure("order_not_delivered", "Only delivered orders can be returned.", status=order.status)
    delivered = as_utc(order.delivered_at or order.placed_at)
    if as_utc(ctx.now) - delivered > timedelta(days=ctx.rules.return_window_days):
        raise ToolFailure(
            "outside_return_window",
            "The return window for this order has closed.",
            delivered_at=iso(delivered),
        )
    ordered: Counter[str] = Counter()
    for item in order.items:
        ordered[item.sku] += item.qty
    with backend_errors():
        earlier = [
            r
            for r in await ctx.backend.list_returns(ctx.customer_id)
            if r.order_id == order.id and r.status != "rejected"
        ]
    for ret in earlier:
        for ri in ret.items:
            ordered[ri.sku] -= ri.qty
    for sku, qty in sorted(_wanted(args).items()):
        returnable = max(ordered.get(sku, 0), 0)
        if qty > returnable:
            # Same code and details as the store's own refusal.
            raise ToolFailure(
                "invalid_items",
                "That SKU or quantity cannot be returned from this order.",
                sku=sku,
                qty=qty,
                returnable_qty=returnable,
            )


async def _create_return(args: dict[str, Any], ctx: ToolContext) -> Result:
    items = [ReturnItem(sku=sku, qty=qty) for sku, qty in sorted(_wanted(args).items())]
    with backend_errors():
        ret = await ctx.backend.create_return(
            ctx.customer_id,
            args["order_id"],
            items=items,
            reason_code=args["reason_code"],
            idempotency_key=write_key(_return_key, args, ctx),
        )
    return return_result(ret)


def _return_summary(args: dict[str, Any]) -> str:
    items = ", ".join(f"{qty} x {sku}" for sku, qty in sorted(_wanted(args).items()))
    return f"Return {items} from {args['order_id']} ({args['reason_code']})"


TOOLS: tuple[ToolDef, ...] = (
    ToolDef(
        name="get_return",
        description=(
            "Read one of the bound customer's returns: status (requested, received, refunded, "
            "rejected), items and dates. A return not on this account is reported as not found."
        ),
        input_schema=obj({"return_id": return_id()}, required=("return_id",)),
        meta=read_meta("returns", "returns:read"),
        handler=_get_return,
    ),
    ToolDef(
        name="list_returns",
        description=(
            "List the bound customer's returns, newest first (up to 20). Use it when the "
            "customer asks about a return without giving its id."
        ),
        input_schema=obj({}),
        meta=read_meta("returns", "returns:read"),
        handler=_list_returns,
    ),
    ToolDef(
        name="create_return",
        description=(
            "Start a return for items of a delivered order, inside the return window. Check the "
            "order with get_order first and use SKUs and quantities exactly as it lists them. "
            "The customer must confirm. A return does not refund by itself; the refund follows "
            "the shop's return policy."
        ),
        input_schema=obj(
            {
                "order_id": order_id(),
                "items": return_items(),
                "reason_code": enum(RETURN_REASONS, "Why the items are returned."),
            },
            required=("order_id", "items", "reason_code"),
        ),
        meta=action_meta("returns", "returns:write", 1),
        done_status="RETURN_CREATED",
        id_field="return_id",
        claim=(
            r"\b(i|we)('ve| have)? (opened|created|started) (a|the|your)? ?return\b|\breturn (has been|was) "
            r"(created|opened)\b"
        ),
        done_phrase="opened return {id} for {order}",
        handler=_create_return,
        check=_return_check,
        key=_return_key,
        target=lambda args: f"order:{args['order_id']}",
        summary=_return_summary,
    ),
)
