"""``signoff store admin refund|cancel ORDER ... --as STAFF``: the sandbox shop's admin, the stand-in
for a person refunding or cancelling in Shopify's admin (not through signoff).

The change is made in the sandbox store as the shop itself would make it, then recorded as a staff
action outside signoff (``outside_staff_actions``, source ``sandbox``: what ``signoff rollout
report`` compares shadow proposals with, as it does Shopify's webhooks) and audited
(``store.admin.refund`` / ``store.admin.cancel``, naming the staff member)."""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import Any

from bot.settings import Settings
from storage.db import Database
from tools.schemas import CANCEL_REASONS, REFUND_REASONS

SOURCE = "sandbox"


def add_parser(store_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``store admin refund|cancel``."""
    admin = store_sub.add_parser(
        "admin",
        help="the sandbox shop's admin: refund or cancel as staff outside signoff (audited; the report counts it)",
    )
    verbs = admin.add_subparsers(dest="admin_command", required=True)
    refund = verbs.add_parser("refund", help="refund part or all of an order")
    refund.add_argument("order_id")
    refund.add_argument("--amount", type=int, required=True, help="minor units (cents)")
    refund.add_argument("--currency", required=True)
    refund.add_argument("--reason", choices=REFUND_REASONS, required=True)
    cancel = verbs.add_parser("cancel", help="cancel an order that has not shipped")
    cancel.add_argument("order_id")
    cancel.add_argument("--reason", choices=CANCEL_REASONS, required=True)
    for p in (refund, cancel):
        p.add_argument("--as", dest="staff_id", required=True, help="the staff member acting in the shop's admin")


async def admin_command(settings: Settings, db: Database, args: argparse.Namespace) -> int:
    """Carry out one admin action in the sandbox store, record and audit it."""
    if settings.signoff_backend != "sandbox":
        print("signoff: store admin acts on the sandbox store only (SIGNOFF_BACKEND=sandbox)", file=sys.stderr)
        return 1
    from storage.identities import People

    staff = await People(db).staff(args.staff_id)
    if staff is None:
        print(f"signoff: no staff member {args.staff_id} in the store; nothing done", file=sys.stderr)
        return 1
    customer = await _owner(db, args.order_id)
    if customer is None:
        print(f"signoff: no order {args.order_id} in the sandbox store; nothing done", file=sys.stderr)
        return 1
    try:
        tool, arguments, done = await _perform(db, customer, args)
    except Exception as exc:  # the store refused (nothing refundable, already shipped ...)
        print(f"signoff: refused by the store: {getattr(exc, 'message', None) or exc}; nothing done", file=sys.stderr)
        return 1
    await _record(db, tool=tool, arguments=arguments, customer=customer, who=f"{staff.role}:{staff.id}", ref=done)
    print(f"{tool} {args.order_id} done in the sandbox shop's admin by {staff.id} ({done}); recorded as a staff action")
    return 0


async def _owner(db: Database, order_id: str) -> str | None:
    from sandbox.admin import order_owner

    return await order_owner(db, order_id)


async def _perform(db: Database, customer: str, args: argparse.Namespace) -> tuple[str, dict[str, Any], str]:
    from sandbox.store import SandboxStore

    store = SandboxStore(db)
    key = f"admin:{uuid.uuid4().hex}"
    if args.admin_command == "refund":
        arguments: dict[str, Any] = {
            "order_id": args.order_id,
            "amount_minor": args.amount,
            "currency": args.currency,
            "reason_code": args.reason,
        }
        refund = await store.issue_refund(
            customer,
            args.order_id,
            amount_minor=args.amount,
            currency=args.currency,
            reason_code=args.reason,
            return_id=None,
            idempotency_key=key,
        )
        return "issue_refund", arguments, refund.id
    await store.cancel_order(customer, args.order_id, reason_code=args.reason, idempotency_key=key)
    return "cancel_order", {"order_id": args.order_id, "reason_code": args.reason}, key


async def _record(db: Database, *, tool: str, arguments: dict[str, Any], customer: str, who: str, ref: str) -> None:
    from storage.audit import AuditEvent, AuditLog
    from storage.records import wall_clock
    from storage.rollout import OutsideActions, StaffAction

    at = wall_clock()
    action = StaffAction(
        proposal_id=f"{SOURCE}:{ref}",
        tool=tool,
        arguments=arguments,
        created_at=at,
        principal=who,
        customer_id=customer,
    )
    await OutsideActions(db).record(action, source=SOURCE)
    verb = "refund" if tool == "issue_refund" else "cancel"
    await AuditLog(db).append(
        AuditEvent(kind=f"store.admin.{verb}", principal=who, tool=tool, ts=at, data={"ref": ref, **arguments})
    )
