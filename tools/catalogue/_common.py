"""Helpers shared by the catalogue modules: lookups that fail like the store,
backend-error translation, idempotency-key parts and metadata shorthands."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tools.backend import BackendError, Customer, Order
from tools.context import ToolContext, ToolFailure, ToolGroup
from tools.registry import KeyFn, ToolMeta
from tools.results import as_utc

HOUR = 3600
DAY = 24 * HOUR


@contextmanager
def backend_errors() -> Iterator[None]:
    """Turn a backend's business refusal into the tool failure the model sees."""
    try:
        yield
    except BackendError as exc:
        message = str(exc) if str(exc) != exc.code else ""
        raise ToolFailure(exc.code, message, **exc.details) from exc


def not_found(kind: str, ident: str) -> ToolFailure:
    """The one answer for "missing" and "someone else's" (S1): built from the
    arguments only, so the two cases cannot be told apart."""
    return ToolFailure("not_found", f"No {kind} {ident} on this account.", **{f"{kind}_id": ident})


async def owned_order(ctx: ToolContext, order_id: str) -> Order:
    """The bound customer's order, or ``not_found``."""
    with backend_errors():
        order = await ctx.backend.get_order(ctx.customer_id, order_id)
    if order is None:
        raise not_found("order", order_id)
    return order


async def bound_customer(ctx: ToolContext) -> Customer:
    """The bound customer record (missing only if the store lost it)."""
    with backend_errors():
        customer = await ctx.backend.get_customer(ctx.customer_id)
    if customer is None:
        raise ToolFailure("not_found", "The bound account was not found.")
    return customer


def day(ctx: ToolContext) -> str:
    """``YYYY-MM-DD`` of the run's clock, in UTC: the period of per-day keys."""
    return as_utc(ctx.now).date().isoformat()


def digest(value: Any) -> str:
    """sha256 of a canonical JSON rendering (sorted keys, no whitespace)."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def on_order(args: dict[str, Any]) -> str:
    """The confirmation target of an action on one order."""
    return f"order:{args['order_id']}"


def operation(ctx: ToolContext, canonical: Any) -> str:
    """The identity of a "set it to X" change: the proposal that asked for it.

    Keying such a change on its target state would make A→B→A silently do nothing the
    third time; the proposal is what a retry after a crash shares, and nothing else does.
    Outside a proposal (a direct call) it is the digest of the change's ``canonical`` form."""
    return ctx.proposal_id or digest(canonical)


def write_key(key: KeyFn, args: dict[str, Any], ctx: ToolContext) -> str:
    """The key the gatekeeper set; the same derivation if a caller did not set one."""
    return ctx.idempotency_key or key(args, ctx)


async def captured_and_failed(ctx: ToolContext, order_id: str) -> tuple[int, bool]:
    """(captured amount, whether any payment failed) for an owned order."""
    with backend_errors():
        payments = await ctx.backend.list_payments(ctx.customer_id, order_id=order_id)
    captured = sum(p.amount_minor for p in payments if p.status in ("captured", "refunded"))
    return captured, any(p.status == "failed" for p in payments)


def read_meta(group: ToolGroup, scope: str, *, runtime: bool = False) -> ToolMeta:
    return ToolMeta(group=group, kind="read", risk_tier=0, scopes=frozenset({scope}), runtime=runtime)


def action_meta(
    group: ToolGroup,
    scope: str,
    tier: int,
    *,
    approval_expiry_s: int = DAY,
    timeout_s: float = 15.0,
    retryable: bool = True,
) -> ToolMeta:
    """An action against the backend: tier ≥ 1 needs confirmation, tier ≥ 2 evidence."""
    return ToolMeta(
        group=group,
        kind="action",
        risk_tier=tier,
        scopes=frozenset({scope}),
        idempotent=True,
        retryable=retryable,
        timeout_s=timeout_s,
        approval_expiry_s=approval_expiry_s,
        requires_evidence=tier >= 2,
        needs_confirmation=tier >= 1,
    )


def contact_on_file(customer: Customer, channel: str) -> str:
    """The address a message on ``channel`` would go to; ``no_contact_on_file`` if none (S3)."""
    to = customer.email if channel == "email" else customer.phone
    if not to:
        raise ToolFailure("no_contact_on_file", f"The account has no {channel} contact on file.", channel=channel)
    return to


async def order_paid_check(ctx: ToolContext, order: Order) -> None:
    """Refuse to collect money for an order that is cancelled or already paid."""
    if order.status == "CANCELLED":
        raise ToolFailure("order_not_payable", "The order is cancelled.", status=order.status)
    captured, _ = await captured_and_failed(ctx, order.id)
    if order.status in ("PAID", "SHIPPED", "DELIVERED") or captured >= order.total_minor:
        raise ToolFailure("order_already_paid", "The order is already paid.", status=order.status)
