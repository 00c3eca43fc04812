"""ORM classes of the sandbox store (tables prefixed ``store_``). They never leave ``sandbox/``.

The sandbox store is the demo shop's system of record behind
:class:`sandbox.store.SandboxStore`. Every time is stored as UTC
(:class:`UTCDateTime`, so SQLite — which keeps no offset — reads back aware
datetimes too). Child rows carry a ``position`` so a dataset round-trips in
the order it was written.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    func,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from storage.db import Base, JSONType

ID = String(64)
Money = BigInteger


class UTCDateTime(TypeDecorator[datetime]):
    """``DateTime(timezone=True)`` that always binds UTC and always reads back aware UTC."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Store aware times as naive UTC."""
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the sandbox store; pass aware UTC times")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Read stored times back as aware UTC."""
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


TS = UTCDateTime()


def _autoinc() -> Any:
    return BigInteger().with_variant(Integer, "sqlite")


class StoreCustomerRow(Base):
    """A customer of the sandbox shop."""

    __tablename__ = "store_customers"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    email: Mapped[str] = mapped_column(String(320))
    phone: Mapped[str | None] = mapped_column(String(32))
    address: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    # Retired (people live in ``identities`` since s0005): kept, unwritten, because SQLite cannot
    # drop a UNIQUE column in place. Nothing reads them.
    slack_user_id: Mapped[str | None] = mapped_column(String(32), unique=True)
    teams_user_id: Mapped[str | None] = mapped_column(String(36))
    created_at: Mapped[datetime | None] = mapped_column(TS)

    payment_methods: Mapped[list[StorePaymentMethodRow]] = relationship(
        order_by="StorePaymentMethodRow.position", lazy="selectin"
    )


Index("ix_store_customers_email_lower", func.lower(StoreCustomerRow.email))
Index("uq_store_customers_teams_user_id", StoreCustomerRow.teams_user_id, unique=True)


class StorePaymentMethodRow(Base):
    """A saved card of a customer."""

    __tablename__ = "store_payment_methods"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    customer_id: Mapped[str] = mapped_column(ForeignKey("store_customers.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    brand: Mapped[str] = mapped_column(String(32))
    last4: Mapped[str] = mapped_column(String(4))
    exp_month: Mapped[int] = mapped_column(Integer)
    exp_year: Mapped[int] = mapped_column(Integer)


class StoreOrderRow(Base):
    """An order."""

    __tablename__ = "store_orders"
    __table_args__ = (Index("ix_store_orders_customer_placed", "customer_id", "placed_at"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    customer_id: Mapped[str] = mapped_column(ForeignKey("store_customers.id"))
    status: Mapped[str] = mapped_column(String(16))
    currency: Mapped[str] = mapped_column(String(3))
    total_minor: Mapped[int] = mapped_column(Money)
    placed_at: Mapped[datetime] = mapped_column(TS)
    delivered_at: Mapped[datetime | None] = mapped_column(TS)
    shipping_address: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    notes: Mapped[str | None] = mapped_column(Text)

    items: Mapped[list[StoreOrderItemRow]] = relationship(order_by="StoreOrderItemRow.position", lazy="selectin")


class StoreOrderItemRow(Base):
    """One line of an order."""

    __tablename__ = "store_order_items"

    id: Mapped[int] = mapped_column(_autoinc(), primary_key=True, autoincrement=True)
    order_id: Mapped[str] = mapped_column(ForeignKey("store_orders.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    sku: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(255))
    qty: Mapped[int] = mapped_column(Integer)
    unit_minor: Mapped[int] = mapped_column(Money)


class StorePaymentRow(Base):
    """A payment on an order."""

    __tablename__ = "store_payments"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    order_id: Mapped[str] = mapped_column(ForeignKey("store_orders.id"), index=True)
    amount_minor: Mapped[int] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(3))
    status: Mapped[str] = mapped_column(String(16))  # captured | failed | refunded
    created_at: Mapped[datetime] = mapped_column(TS)


class StoreReturnRow(Base):
    """A return on an order."""

    __tablename__ = "store_returns"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    order_id: Mapped[str] = mapped_column(ForeignKey("store_orders.id"), index=True)
    status: Mapped[str] = mapped_column(String(16))  # requested | received | refunded | rejected
    reason_code: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(TS)

    items: Mapped[list[StoreReturnItemRow]] = relationship(order_by="StoreReturnItemRow.position", lazy="selectin")


class StoreReturnItemRow(Base):
    """One line of a return."""

    __tablename__ = "store_return_items"

    id: Mapped[int] = mapped_column(_autoinc(), primary_key=True, autoincrement=True)
    return_id: Mapped[str] = mapped_column(ForeignKey("store_returns.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    sku: Mapped[str] = mapped_column(String(64))
    qty: Mapped[int] = mapped_column(Integer)


class StoreRefundRow(Base):
    """A refund on an order."""

    __tablename__ = "store_refunds"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    order_id: Mapped[str] = mapped_column(ForeignKey("store_orders.id"), index=True)
    amount_minor: Mapped[int] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(3))
    reason_code: Mapped[str | None] = mapped_column(String(64))
    return_id: Mapped[str | None] = mapped_column(ForeignKey("store_returns.id"))
    #: ``refund`` (issue_refund) or ``cancellation`` (the money a cancelled order gave back).
    kind: Mapped[str] = mapped_column(String(16), default="refund", server_default="refund")
    created_at: Mapped[datetime] = mapped_column(TS, index=True)


class StoreInvoiceRow(Base):
    """An invoice of an order."""

    __tablename__ = "store_invoices"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    order_id: Mapped[str] = mapped_column(ForeignKey("store_orders.id"), index=True)
    amount_minor: Mapped[int] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(3))
    issued_at: Mapped[datetime] = mapped_column(TS)


class StoreOutboxRow(Base):
    """A message the shop sent (email or SMS)."""

    __tablename__ = "store_outbox"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    customer_id: Mapped[str] = mapped_column(ForeignKey("store_customers.id"), index=True)
    channel: Mapped[str] = mapped_column(String(8))  # email | sms
    to: Mapped[str] = mapped_column(String(320))
    template: Mapped[str] = mapped_column(String(64))
    body: Mapped[str] = mapped_column(Text)
    sent_at: Mapped[datetime] = mapped_column(TS)


class StoreWriteRow(Base):
    """One row per idempotency key: the stored result of the write made with it."""

    __tablename__ = "store_writes"

    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    operation: Mapped[str] = mapped_column(String(64))
    customer_id: Mapped[str | None] = mapped_column(ID)
    result: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(TS)
