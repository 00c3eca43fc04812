"""The mutations the fake performs, with the service's rules: ``userErrors`` for what the
shop refuses, ``@idempotent(key:)`` where the schema documents it, and nothing changed when
anything is refused."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, cast

from graphql import GraphQLError, GraphQLResolveInfo, GraphQLString, value_from_ast

from tests.fakes.shopify.connections import NotImplementedByFake
from tests.fakes.shopify.schema import Checked
from tests.fakes.shopify.state import Job, Order, Refund, Shop, Transaction, amount, parse_gid
from tests.fakes.shopify.views import order_view, refund_view
from tests.fakes.shopify.webhooks import Webhook, order_json, refund_json, webhook
from tests.fakes.shopify.writes import Writes

#: Mutations whose description documents ``@idempotent`` support in 2026-10 (the schema's own list).
IDEMPOTENT_MUTATIONS = frozenset(
    {
        "appUsageRecordCreate", "inventoryActivate", "inventoryAdjustQuantities", "inventoryMoveQuantities",
        "inventorySetOnHandQuantities", "inventorySetQuantities", "inventoryShipmentAddItems",
        "inventoryShipmentCreate", "inventoryShipmentCreateInTransit", "inventoryShipmentReceive",
        "inventoryTransferCreate", "inventoryTransferCreateAsReadyToShip", "inventoryTransferDuplicate",
        "inventoryTransferSetItems", "locationActivate", "locationDeactivate", "orderCreateMandatePayment",
        "refundCreate", "subscriptionBillingAttemptCreate",
    }
)  # fmt: skip
#: Mutations that since 2026-04 refuse to run without the directive.
IDEMPOTENCY_REQUIRED = frozenset({"refundCreate", "inventoryAdjustQuantities", "inventoryShipmentReceive"})


def idempotency_error(message: str, code: str) -> GraphQLError:
    """A top-level error about the idempotency key (the field resolves to null)."""
    return GraphQLError(message, extensions={"code": code})


def idempotency_key(info: GraphQLResolveInfo) -> str | None:
    """The ``@idempotent(key:)`` on this mutation field, checked as the service checks it."""
    node = info.field_nodes[0]
    directive = next((d for d in node.directives or () if d.name.value == "idempotent"), None)
    name = info.field_name
    if directive is None:
        if name in IDEMPOTENCY_REQUIRED:
            raise idempotency_error(
                f"The @idempotent directive is required for the {name} mutation.", "IDEMPOTENCY_KEY_REQUIRED"
            )
        return None
    if name not in IDEMPOTENT_MUTATIONS:
        raise idempotency_error(
            f"The @idempotent directive is not supported on the {name} mutation.", "IDEMPOTENCY_NOT_SUPPORTED"
        )
    arg = next(a for a in directive.arguments or () if a.name.value == "key")
    variables = cast(
        dict[str, Any], getattr(info.variable_values, "coerced", info.variable_values)
    )  # graphql-core 3.3 / 3.2
    key_type = info.schema.get_directive("idempotent").args["key"].type  # type: ignore[union-attr]
    key = value_from_ast(arg.value, key_type, variables)
    if not isinstance(key, str) or not key.strip():
        raise idempotency_error("The idempotency key cannot be empty or whitespace.", "INVALID_IDEMPOTENCY_KEY")
    return key


def keys_in(checked: Checked) -> set[str]:
    """The idempotency keys an operation's root fields carry (read before it runs)."""
    keys = set()
    for sel in checked.operation.selection_set.selections:
        for d in getattr(sel, "directives", None) or ():
            arg = next((a for a in d.arguments or () if a.name.value == "key"), None)
            if d.name.value == "idempotent" and arg is not None:
                key = value_from_ast(arg.value, GraphQLString, checked.variables)
                if isinstance(key, str):
                    keys.add(key)
    return keys


@dataclass
class Idempotency:
    """Keys seen, per mutation: the input they came with and the refund they made."""

    seen: dict[tuple[str, str], tuple[str, Any]] = field(default_factory=dict)

    def replay(self, mutation: str, key: str, args: dict[str, Any]) -> tuple[bool, Any]:
        """(True, result) when this key already ran with these arguments; a mismatch raises."""
        fingerprint = json.dumps(args, sort_keys=True, default=str)
        found = self.seen.get((mutation, key))
        if found is None:
            return False, None
        if found[0] != fingerprint:
            raise idempotency_error(
                "The idempotency key was already used with different parameters.",
                "IDEMPOTENCY_KEY_PARAMETER_MISMATCH",
            )
        return True, found[1]

    def remember(self, mutation: str, key: str, args: dict[str, Any], result: Any) -> None:
        """Bind ``key`` to this input and result."""
        self.seen[(mutation, key)] = (json.dumps(args, sort_keys=True, default=str), result)


def user_error(fieldpath: list[str], message: str, code: str | None = None) -> dict[str, Any]:
    """One ``userErrors`` entry."""
    return {"field": fieldpath, "message": message, "code": code}


def parse_money(value: Any) -> int | None:
    """A ``Money`` input as minor units; None when it is not a valid amount with ≤ 2 decimals."""
    try:
        d = Decimal(str(value))
    except InvalidOperation:
        return None
    if not d.is_finite() or d < 0 or d != d.quantize(Decimal("0.01")):
        return None
    return int(d * 100)


@dataclass
class Mutations(Writes):
    """The mutation root: each method is a field resolver (``info``, then the field's arguments)."""

    shop: Shop
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    idempotency: Idempotency = field(default_factory=Idempotency)
    #: The webhooks Shopify would send for what the API did (the app's own refunds, cancellations
    #: and returns reach its webhook endpoint too), in order, for a test to deliver.
    emitted: list[Webhook] = field(default_factory=list)
    #: Keys of operations the shop has received but not finished (held or slowed by a fault).
    inflight: set[str] = field(default_factory=set)
    #: How many ``job`` reads a cancellation job answers before ``done: true`` (the second by default).
    job_polls: int = 2

    def order_of(self, value: Any) -> Order | None:
        """The order a GID names, if it exists."""
        n = parse_gid(value, "Order")
        return self.shop.orders.get(n) if n is not None else None

    def refundCreate(self, info: GraphQLResolveInfo, input: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        """``refundCreate``: money back on an order's transactions, once per idempotency key."""
        key = idempotency_key(info)
        if key is not None and key in self.inflight:
            raise idempotency_error(
                "A request with this idempotency key is currently being processed.", "IDEMPOTENCY_CONCURRENT_REQUEST"
            )
        if key is not None:
            replayed, result = self.idempotency.replay("refundCreate", key, input)
            if replayed:
                return self._refund_payload(*result)
        result = self._refund(input)
        if key is not None:
            self.idempotency.remember("refundCreate", key, input, result)
        return self._refund_payload(*result)

    def _refund_payload(self, refund_id: int | None, errors: list[dict[str, Any]]) -> dict[str, Any]:
        found = self.shop.refund(refund_id) if refund_id is not None else None
        if found is None:
            return {"refund": None, "order": None, "userErrors": errors}
        order, refund = found
        return {
            "refund": refund_view(self.shop, order, refund),
            "order": order_view(self.shop, order),
            "userErrors": [],
        }

    def _refund(self, input: dict[str, Any]) -> tuple[int | None, list[dict[str, Any]]]:
        for unsupported in ("refundDuties", "refundMethods", "shipping", "discrepancyReason"):
            if input.get(unsupported):  # the schema defaults some of these to []
                raise NotImplementedByFake(f"refundCreate(input.{unsupported})")
        order = self.order_of(input["orderId"])
        if order is None:
            return None, [user_error(["orderId"], "Order does not exist")]
        if input.get("currency") is not None and input["currency"] != order.currency:
            return None, [user_error(["currency"], f"Currency must match the order's currency {order.currency}")]
        lines, errors = self._refund_lines(order, input.get("refundLineItems") or [])
        txs, tx_errors = self._refund_transactions(order, input.get("transactions") or [])
        errors += tx_errors
        total = sum(t.amount_minor for t in txs)
        if not errors and total > order.refundable_minor and not input.get("allowOverRefunding"):
            errors.append(
                user_error(
                    ["transactions"],
                    f"Refund amount {amount(total)} {order.currency} is greater than the refundable amount "
                    f"{amount(order.refundable_minor)} {order.currency}",
                )
            )
        if errors:
            return None, errors
        now = self.clock()
        refund = Refund(id=self.shop.new_id(), created_at=now, transactions=txs, note=input.get("note"), lines=lines)
        for t in txs:
            t.created_at = now
        order.refunds.append(refund)
        order.transactions.extend(txs)
        for li_id, qty in lines:
            next(li for li in order.line_items if li.id == li_id).refunded_quantity += qty
        self.emitted.append(webhook(self.shop, "refunds/create", refund_json(order, refund), now))
        return refund.id, []

    def _refund_lines(self, order: Order, items: list[dict[str, Any]]) -> tuple[list[tuple[int, int]], list[Any]]:
        lines, errors = [], []
        for i, item in enumerate(items):
            n = parse_gid(item["lineItemId"], "LineItem")
            li = next((x for x in order.line_items if x.id == n), None)
            if li is None:
                errors.append(user_error(["refundLineItems", str(i), "lineItemId"], "Line item does not exist"))
            elif not 0 < item["quantity"] <= li.quantity - li.refunded_quantity:
                errors.append(
                    user_error(
                        ["refundLineItems", str(i), "quantity"], "Quantity cannot refund more items than were purchased"
                    )
                )
            else:
                lines.append((li.id, item["quantity"]))
        return lines, errors

    def _refund_transactions(self, order: Order, items: list[dict[str, Any]]) -> tuple[list[Transaction], list[Any]]:
        txs, errors = [], []
        sales = [t for t in order.transactions if t.kind in ("SALE", "CAPTURE") and t.status == "SUCCESS"]
        for i, item in enumerate(items):
            where = ["transactions", str(i)]
            minor = parse_money(item["amount"])
            parent_id = parse_gid(item.get("parentId"), "OrderTransaction") if item.get("parentId") else None
            parent = next((t for t in sales if t.id == parent_id), None) if parent_id else (sales[0] if sales else None)
            if self.order_of(item["orderId"]) is not order:
                errors.append(user_error([*where, "orderId"], "Transaction order does not match the refund's order"))
            elif item["kind"] != "REFUND":
                errors.append(user_error([*where, "kind"], "Transaction kind must be REFUND"))
            elif minor is None or minor == 0:
                errors.append(user_error([*where, "amount"], "Amount must be greater than 0"))
            elif parent is None:
                errors.append(user_error([*where, "parentId"], "Transaction has no successful sale to refund"))
            else:
                txs.append(
                    Transaction(
                        id=self.shop.new_id(),
                        kind="REFUND",
                        status="SUCCESS",
                        amount_minor=minor,
                        created_at=self.clock(),
                        gateway=item["gateway"],
                        parent_id=parent.id,
                    )
                )
        return txs, errors

    def orderCancel(self, info: GraphQLResolveInfo, **args: Any) -> dict[str, Any]:  # noqa: N802
        """``orderCancel``: cancelled now, reported through a job that finishes after a poll or two."""
        idempotency_key(info)
        order = self.order_of(args["orderId"])
        empty: dict[str, Any] = {"job": None, "orderCancelUserErrors": [], "userErrors": []}
        if order is None:
            return {**empty, "orderCancelUserErrors": [user_error(["orderId"], "Order does not exist", "NOT_FOUND")]}
        if order.cancelled_at is not None:
            problem = user_error(["orderId"], "Order has already been cancelled", "INVALID")
            return {**empty, "orderCancelUserErrors": [problem]}
        if order.fulfilled:
            problem = user_error(["orderId"], "Cannot cancel an order that has fulfillments", "INVALID")
            return {**empty, "orderCancelUserErrors": [problem]}
        wants_refund = bool(args.get("refund")) or bool(
            (args.get("refundMethod") or {}).get("originalPaymentMethodsRefund")
        )
        now = self.clock()
        if wants_refund and order.refundable_minor:
            self._cancellation_refund(order, now)
        order.cancelled_at, order.cancel_reason = now, args["reason"]
        self.emitted.append(webhook(self.shop, "orders/cancelled", order_json(self.shop, order), now))
        order.note = order.note if not args.get("staffNote") else f"{order.note or ''}\n{args['staffNote']}".strip()
        job_id = f"gid://shopify/Job/{uuid.uuid4()}"
        self.shop.jobs[job_id] = Job(id=job_id, polls_left=self.job_polls)
        return {**empty, "job": {"id": job_id, "done": False, "query": None}}

    def _cancellation_refund(self, order: Order, now: datetime) -> None:
        sale = next(t for t in order.transactions if t.kind in ("SALE", "CAPTURE") and t.status == "SUCCESS")
        tx = Transaction(
            id=self.shop.new_id(),
            kind="REFUND",
            status="SUCCESS",
            amount_minor=order.refundable_minor,
            created_at=now,
            parent_id=sale.id,
        )
        order.refunds.append(Refund(id=self.shop.new_id(), created_at=now, transactions=[tx], note="cancellation"))
        order.transactions.append(tx)
