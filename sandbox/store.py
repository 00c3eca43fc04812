"""The sandbox store: the demo shop's system of record, over SQL.

:class:`SandboxStore` implements :class:`tools.backend.CommerceBackend`.
Reads are scoped to the bound customer: someone else's order, return or invoice
is answered exactly like a missing one. Writes are idempotent
(:mod:`sandbox.idempotency`): one transaction checks ``store_writes`` for the
key, performs the write (business rules in :mod:`sandbox.writes`) and
stores the result under the key; a concurrent duplicate loses on the primary
key, rolls back its side effects and returns the winner's stored result.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from types import SimpleNamespace
from typing import Any, TypeVar

from sqlalchemy import Connection, Table, bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from sandbox import codec
from sandbox import idempotency as ledger
from sandbox import writes as w
from sandbox.models import (
    StoreCustomerRow,
    StoreInvoiceRow,
    StoreOrderItemRow,
    StoreOrderRow,
    StorePaymentRow,
    StoreRefundRow,
    StoreReturnItemRow,
    StoreReturnRow,
)
from storage.db import Database
from storage.fastsql import one_of, prepared
from storage.records import wall_clock
from tools.backend import (
    Address,
    Customer,
    Invoice,
    MessageChannel,
    Order,
    OrderStatus,
    OutboxMessage,
    Payment,
    Refund,
    Return,
    ReturnItem,
    Shipment,
    WriteRecord,
)

T = TypeVar("T")


async def store_is_empty(db: Database) -> bool:
    """True when the store holds no customers (the condition for a load, and for seeding at start)."""
    async with db.reader() as s, s.begin():
        return await is_empty(s)


async def is_empty(s: AsyncSession) -> bool:
    """:func:`store_is_empty` inside a session the caller holds."""
    return (await s.scalar(select(StoreCustomerRow.id).limit(1))) is None


def _by_customer(customer_id: str) -> Any:
    return StoreOrderRow.customer_id == customer_id


# The reads a tool step makes, as Core statements built once (the agent loop's hot path:
# run on the event loop's thread on SQLite, see storage.fastsql); rows reach the codec
# as plain objects with the ORM rows' attributes.
_ORD: Table = StoreOrderRow.__table__  # type: ignore[assignment]
_ITEM: Table = StoreOrderItemRow.__table__  # type: ignore[assignment]
_PAY: Table = StorePaymentRow.__table__  # type: ignore[assignment]
_REF: Table = StoreRefundRow.__table__  # type: ignore[assignment]
_RET: Table = StoreReturnRow.__table__  # type: ignore[assignment]
_RET_ITEM: Table = StoreReturnItemRow.__table__  # type: ignore[assignment]
_OWNED_ORDER = prepared(select(_ORD).where(_ORD.c.id == bindparam("o"), _ORD.c.customer_id == bindparam("c")))
_ORDER_ITEMS = prepared(select(_ITEM).where(_ITEM.c.order_id == bindparam("o")).order_by(_ITEM.c.position))
# Captured minus refunded on an owned order, in one statement (a read tool step's hot path):
# no row when the order is missing or not the customer's.
_REFUNDABLE = prepared(
    select(
        select(func.coalesce(func.sum(_PAY.c.amount_minor), 0))
        .where(_PAY.c.order_id == _ORD.c.id, one_of(_PAY.c.status, ("captured", "refunded")))
        .scalar_subquery(),
        select(func.coalesce(func.sum(_REF.c.amount_minor), 0)).where(_REF.c.order_id == _ORD.c.id).scalar_subquery(),
    ).where(_ORD.c.id == bindparam("o"), _ORD.c.customer_id == bindparam("c"))
)
_REFUNDS_SINCE = prepared(
    select(_REF)
    .join(_ORD, _ORD.c.id == _REF.c.order_id)
    .where(_ORD.c.customer_id == bindparam("c"), _REF.c.created_at >= bindparam("since", type_=_REF.c.created_at.type))
    .order_by(_REF.c.created_at, _REF.c.id)
)
_OWNED_RETURN = prepared(
    select(_RET)
    .join(_ORD, _ORD.c.id == _RET.c.order_id)
    .where(_RET.c.id == bindparam("r"), _ORD.c.customer_id == bindparam("c"))
)
_RETURN_ITEMS = prepared(
    select(_RET_ITEM).where(_RET_ITEM.c.return_id == bindparam("r")).order_by(_RET_ITEM.c.position)
)


def _owned_order(conn: Connection, customer_id: str, order_id: str) -> Any:
    """The customer's order row with its items (as the codec reads them), or ``None``."""
    row = conn.execute(_OWNED_ORDER, {"o": order_id, "c": customer_id}).first()
    if row is None:
        return None
    return SimpleNamespace(**row._mapping, items=conn.execute(_ORDER_ITEMS, {"o": order_id}).all())


def _refundable(conn: Connection, customer_id: str, order_id: str) -> int | None:
    """Captured minus refunded on an owned order; ``None`` if not owned or missing."""
    row = conn.execute(_REFUNDABLE, {"o": order_id, "c": customer_id}).first()
    if row is None:
        return None
    captured, refunded = row
    return max(0, int(captured or 0) - int(refunded or 0))


def _owned_return(conn: Connection, customer_id: str, return_id: str) -> Any:
    row = conn.execute(_OWNED_RETURN, {"r": return_id, "c": customer_id}).first()
    if row is None:
        return None
    return SimpleNamespace(**row._mapping, items=conn.execute(_RETURN_ITEMS, {"r": return_id}).all())


class SandboxStore:
    """A :class:`~tools.backend.CommerceBackend` over the ``store_*`` tables."""

    def __init__(self, db: Database, *, clock: Callable[[], datetime] | None = None) -> None:
        self._db = db
        self._clock = clock or wall_clock

    # -- customers ----------------------------------------------------------------
    async def _one(self, stmt: Any, convert: Callable[[Any], T]) -> T | None:
        async with self._db.reader() as s, s.begin():
            row = (await s.execute(stmt)).scalar_one_or_none()
            return None if row is None else convert(row)

    async def _many(self, stmt: Any, convert: Callable[[Any], T]) -> list[T]:
        async with self._db.reader() as s, s.begin():
            return [convert(row) for row in (await s.scalars(stmt))]

    async def get_customer(self, customer_id: str) -> Customer | None:
        """The customer with this id."""
        return await self._one(select(StoreCustomerRow).where(StoreCustomerRow.id == customer_id), codec.customer)

    async def find_customer_by_email(self, email: str) -> Customer | None:
        """The customer with this email on file (case-insensitive)."""
        stmt = select(StoreCustomerRow).where(func.lower(StoreCustomerRow.email) == email.strip().lower())
        return await self._one(stmt.limit(1), codec.customer)

    async def list_orders(self, customer_id: str, *, status: OrderStatus | None = None) -> list[Order]:
        """The customer's orders, newest first, optionally of one status."""
        stmt = select(StoreOrderRow).where(_by_customer(customer_id))
        if status is not None:
            stmt = stmt.where(StoreOrderRow.status == status)
        stmt = stmt.order_by(StoreOrderRow.placed_at.desc(), StoreOrderRow.id.desc())
        return await self._many(stmt, codec.order)

    async def get_order(self, customer_id: str, order_id: str) -> Order | None:
        """One of the customer's orders; ``None`` if missing or not theirs."""
        row = await self._db.read(lambda conn: _owned_order(conn, customer_id, order_id))
        return None if row is None else codec.order(row)

    async def track_shipment(self, customer_id: str, order_id: str) -> Shipment | None:
        """Where the order is, derived deterministically from the order itself."""
        order = await self.get_order(customer_id, order_id)
        return None if order is None else codec.shipment_of(order)

    async def list_payments(self, customer_id: str, *, order_id: str | None = None) -> list[Payment]:
        """Payments on the customer's orders (one order's if ``order_id``), oldest first."""
        stmt = select(StorePaymentRow).join(StoreOrderRow).where(_by_customer(customer_id))
        if order_id is not None:
            stmt = stmt.where(StorePaymentRow.order_id == order_id)
        stmt = stmt.order_by(StorePaymentRow.created_at, StorePaymentRow.id)
        return await self._many(stmt, codec.payment)

    async def list_refunds(self, customer_id: str, *, order_id: str | None = None) -> list[Refund]:
        """Refunds on the customer's orders (one order's if ``order_id``), oldest first."""
        stmt = select(StoreRefundRow).join(StoreOrderRow).where(_by_customer(customer_id))
        if order_id is not None:
            stmt = stmt.where(StoreRefundRow.order_id == order_id)
        stmt = stmt.order_by(StoreRefundRow.created_at, StoreRefundRow.id)
        return await self._many(stmt, codec.refund)

    async def get_invoices(self, customer_id: str, *, invoice_id: str | None = None) -> list[Invoice]:
        """The customer's invoices (or the one with ``invoice_id``, if theirs), oldest first."""
        stmt = select(StoreInvoiceRow).join(StoreOrderRow).where(_by_customer(customer_id))
        if invoice_id is not None:
            stmt = stmt.where(StoreInvoiceRow.id == invoice_id)
        stmt = stmt.order_by(StoreInvoiceRow.issued_at, StoreInvoiceRow.id)
        return await self._many(stmt, codec.invoice)

    async def list_returns(self, customer_id: str) -> list[Return]:
        """The customer's returns, newest first."""
        stmt = (
            select(StoreReturnRow)
            .join(StoreOrderRow)
            .where(_by_customer(customer_id))
            .order_by(StoreReturnRow.created_at.desc(), StoreReturnRow.id.desc())
        )
        return await self._many(stmt, codec.return_)

    async def get_return(self, customer_id: str, return_id: str) -> Return | None:
        """One of the customer's returns; ``None`` if missing or not theirs."""
        row = await self._db.read(lambda conn: _owned_return(conn, customer_id, return_id))
        return None if row is None else codec.return_(row)

    async def refundable_minor(self, customer_id: str, order_id: str) -> int | None:
        """Captured minus refunded for an owned order; ``None`` if not owned/missing."""
        return await self._db.read(lambda conn: _refundable(conn, customer_id, order_id))

    async def refunds_since(self, customer_id: str, since: datetime) -> list[Refund]:
        """The customer's refunds created at or after ``since`` (for per-day limits)."""
        rows = await self._db.read(lambda conn: conn.execute(_REFUNDS_SINCE, {"c": customer_id, "since": since}).all())
        return [codec.refund(r) for r in rows]  # type: ignore[arg-type]

    # -- writes: idempotent by key ---------------------------------------------
    async def _write(self, key: str, operation: str, customer_id: str, cls: type[T], perform: ledger.Perform[T]) -> T:
        return await ledger.run_once(
            self._db, self._clock, key=key, operation=operation, customer_id=customer_id,
            cls=cls, perform=perform,
        )  # fmt: skip

    async def issue_refund(
        self,
        customer_id: str,
        order_id: str,
        *,
        amount_minor: int,
        currency: str,
        reason_code: str,
        return_id: str | None,
        idempotency_key: str,
    ) -> Refund:
        """Refund part or all of what was captured on an owned order."""
        return await self._write(
            idempotency_key,
            "issue_refund",
            customer_id,
            Refund,
            lambda s, now: w.issue_refund(
                s,
                now,
                customer_id,
                order_id,
                amount_minor=amount_minor,
                currency=currency,
                reason_code=reason_code,
                return_id=return_id,
            ),
        )

    async def cancel_order(self, customer_id: str, order_id: str, *, reason_code: str, idempotency_key: str) -> Order:
        """Cancel a PENDING/PAID order, refunding anything captured."""
        return await self._write(
            idempotency_key,
            "cancel_order",
            customer_id,
            Order,
            lambda s, now: w.cancel_order(
                s,
                now,
                customer_id,
                order_id,
                reason_code=reason_code,
            ),
        )

    async def update_shipping_address(
        self, customer_id: str, order_id: str, *, address: Address, idempotency_key: str
    ) -> Order:
        """Change the shipping address of an order that has not shipped."""
        return await self._write(
            idempotency_key,
            "update_shipping_address",
            customer_id,
            Order,
            lambda s, now: w.update_shipping_address(s, customer_id, order_id, address=address),
        )

    async def create_reorder(self, customer_id: str, order_id: str, *, idempotency_key: str) -> Order:
        """A new PENDING order with the same items as an owned order."""
        return await self._write(
            idempotency_key,
            "create_reorder",
            customer_id,
            Order,
            lambda s, now: w.create_reorder(s, now, customer_id, order_id),
        )

    async def create_return(
        self,
        customer_id: str,
        order_id: str,
        *,
        items: list[ReturnItem],
        reason_code: str,
        idempotency_key: str,
    ) -> Return:
        """Request a return of items of a delivered order."""
        return await self._write(
            idempotency_key,
            "create_return",
            customer_id,
            Return,
            lambda s, now: w.create_return(
                s,
                now,
                customer_id,
                order_id,
                items=items,
                reason_code=reason_code,
            ),
        )

    async def retry_payment(self, customer_id: str, order_id: str, *, idempotency_key: str) -> Payment:
        """Turn the latest failed payment into a new captured one."""
        return await self._write(
            idempotency_key,
            "retry_payment",
            customer_id,
            Payment,
            lambda s, now: w.retry_payment(s, now, customer_id, order_id),
        )

    async def update_contact_details(
        self, customer_id: str, *, email: str | None, phone: str | None, idempotency_key: str
    ) -> Customer:
        """Replace the email and/or phone on file."""
        return await self._write(
            idempotency_key,
            "update_contact_details",
            customer_id,
            Customer,
            lambda s, now: w.update_contact_details(s, customer_id, email=email, phone=phone),
        )

    async def send_message(
        self,
        customer_id: str,
        *,
        channel: MessageChannel,
        template: str,
        body: str,
        idempotency_key: str,
    ) -> OutboxMessage:
        """Send to the contact detail *on file* for ``channel`` (S3); never another address."""
        return await self._write(
            idempotency_key,
            "send_message",
            customer_id,
            OutboxMessage,
            lambda s, now: w.send_message(
                s,
                now,
                customer_id,
                channel=channel,
                template=template,
                body=body,
            ),
        )

    async def lookup_write(self, idempotency_key: str) -> WriteRecord | None:
        """The stored result of a write made with this key, if the backend made it."""
        return await ledger.lookup(self._db, idempotency_key)
