"""Loading a dataset into the sandbox store, and exporting the store as a dataset.

A load is one transaction: either every row lands or none does. It refuses a
store that already holds customers (:class:`StoreNotEmpty`), so a second load
never duplicates anything. ``rebase_to`` shifts every time by
``rebase_to - dataset.as_of`` so the demo data stays "recent" forever.

An export is the store's current state in the dataset format, refunds, returns
and the message outbox included; collections are ordered by id (numbers within
ids compare as numbers), so export → load → export is byte-for-byte stable.
``as_of`` is not exported: exported times are already real.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, func, insert, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from storage.db import Database
from storage.store_models import (
    StoreCustomerRow,
    StoreInvoiceRow,
    StoreKnowledgeDocRow,
    StoreKnowledgeSectionRow,
    StoreOrderItemRow,
    StoreOrderRow,
    StoreOutboxRow,
    StorePaymentMethodRow,
    StorePaymentRow,
    StoreRefundRow,
    StoreReturnItemRow,
    StoreReturnRow,
    StoreStaffRow,
)
from tools.dataset import AddressRecord, Dataset, parse_dataset

_LOAD_LOCK = 0x5160_0FF  # pg_advisory_xact_lock key serialising concurrent loads


class StoreLoadError(Exception):
    """A dataset could not be loaded; nothing was written."""


class StoreNotEmpty(StoreLoadError):
    """The sandbox store already holds customers; a dataset is loaded only into an empty store."""

    def __init__(self) -> None:
        super().__init__(
            "the sandbox store already holds customers; refusing a second load "
            "(load into an empty database, or export it first)"
        )


@dataclass(frozen=True, kw_only=True)
class LoadReport:
    """How many records a load wrote, and by how much its times were shifted."""

    customers: int
    staff: int
    orders: int
    payments: int
    refunds: int
    returns: int
    invoices: int
    knowledge: int
    outbox: int
    shifted_by: timedelta | None = None


async def store_is_empty(db: Database) -> bool:
    """True when the store holds no customers (the condition for a load)."""
    async with db.sessions() as s, s.begin():
        return await _is_empty(s)


async def _is_empty(s: AsyncSession) -> bool:
    return (await s.scalar(select(StoreCustomerRow.id).limit(1))) is None


def _shift(t: datetime | None, by: timedelta) -> datetime | None:
    return None if t is None else t + by


def _rows(ds: Dataset, by: timedelta) -> list[tuple[type[Any], list[dict[str, Any]]]]:
    """Insert batches in foreign-key order."""
    return [
        (
            StoreCustomerRow,
            [
                {
                    "id": c.id,
                    "name": c.name,
                    "email": c.email,
                    "phone": c.phone,
                    "address": _address(c.address),
                    "slack_user_id": c.slack_user_id,
                    "created_at": _shift(c.created_at, by),
                }
                for c in ds.customers
            ],
        ),
        (
            StorePaymentMethodRow,
            [
                {
                    "id": m.id,
                    "customer_id": c.id,
                    "position": n,
                    "brand": m.brand,
                    "last4": m.last4,
                    "exp_month": m.exp_month,
                    "exp_year": m.exp_year,
                }
                for c in ds.customers
                for n, m in enumerate(c.payment_methods)
            ],
        ),
        (StoreStaffRow, [s.model_dump() for s in ds.staff]),
        (
            StoreOrderRow,
            [
                {
                    "id": o.id,
                    "customer_id": o.customer_id,
                    "status": o.status,
                    "currency": o.currency,
                    "total_minor": o.total_minor,
                    "placed_at": _shift(o.placed_at, by),
                    "delivered_at": _shift(o.delivered_at, by),
                    "shipping_address": _address(o.shipping_address),
                    "notes": o.notes,
                }
                for o in ds.orders
            ],
        ),
        (
            StoreOrderItemRow,
            [
                {"order_id": o.id, "position": n, **i.model_dump()}
                for o in ds.orders
                for n, i in enumerate(o.items)
            ],
        ),
        (
            StorePaymentRow,
            [{**p.model_dump(), "created_at": p.created_at + by} for p in ds.payments],
        ),
        (
            StoreReturnRow,
            [
                {
                    "id": r.id,
                    "order_id": r.order_id,
                    "status": r.status,
                    "reason_code": r.reason_code,
                    "created_at": r.created_at + by,
                }
                for r in ds.returns
            ],
        ),
        (
            StoreReturnItemRow,
            [
                {"return_id": r.id, "position": n, **i.model_dump()}
                for r in ds.returns
                for n, i in enumerate(r.items)
            ],
        ),
        (StoreRefundRow, [{**r.model_dump(), "created_at": r.created_at + by} for r in ds.refunds]),
        (StoreInvoiceRow, [{**i.model_dump(), "issued_at": i.issued_at + by} for i in ds.invoices]),
        (
            StoreKnowledgeDocRow,
            [
                {"id": d.id, "version": d.version, "kind": d.kind, "title": d.title}
                for d in ds.knowledge
            ],
        ),
        (
            StoreKnowledgeSectionRow,
            [
                {
                    "doc_id": d.id,
                    "section_id": sec.id,
                    "position": n,
                    "doc_title": d.title,
                    "text": sec.text,
                }
                for d in ds.knowledge
                for n, sec in enumerate(d.sections)
            ],
        ),
        (StoreOutboxRow, [{**m.model_dump(), "sent_at": m.sent_at + by} for m in ds.outbox]),
    ]


def _address(a: AddressRecord | None) -> dict[str, Any] | None:
    return None if a is None else a.model_dump(exclude_none=True)


async def load_dataset(
    db: Database, dataset: Dataset, *, rebase_to: datetime | None = None
) -> LoadReport:
    """Write ``dataset`` into an empty store in one transaction; :class:`StoreNotEmpty` otherwise.

    Any failure rolls the whole load back (:class:`StoreLoadError`): nothing is half-loaded.
    """
    shift = (
        rebase_to - dataset.as_of if rebase_to is not None and dataset.as_of is not None else None
    )
    try:
        async with db.sessions() as s, s.begin():
            if db.is_postgres:
                await s.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOAD_LOCK})
            if not await _is_empty(s):
                raise StoreNotEmpty()
            for model, rows in _rows(dataset, shift or timedelta(0)):
                if rows:
                    await s.execute(insert(model), rows)
    except IntegrityError as exc:
        if not await store_is_empty(db):
            raise StoreNotEmpty() from None
        raise StoreLoadError(f"the dataset conflicts with rows already in the store: {exc.orig}") from None
    return LoadReport(
        customers=len(dataset.customers),
        staff=len(dataset.staff),
        orders=len(dataset.orders),
        payments=len(dataset.payments),
        refunds=len(dataset.refunds),
        returns=len(dataset.returns),
        invoices=len(dataset.invoices),
        knowledge=len(dataset.knowledge),
        outbox=len(dataset.outbox),
        shifted_by=shift,
    )


_NUM = re.compile(r"(\d+)")


def _natural(ident: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in _NUM.split(ident) if p)


async def _all(s: AsyncSession, stmt: Select[Any]) -> list[Any]:
    rows = list(await s.scalars(stmt))
    return sorted(rows, key=lambda r: _natural(r.id))


def _t(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def _export_obj(
    customers: list[Any],
    staff: list[Any],
    orders: list[Any],
    payments: list[Any],
    refunds: list[Any],
    returns: list[Any],
    invoices: list[Any],
    docs: list[Any],
    outbox: list[Any],
) -> dict[str, Any]:
    return {
        "customers": [
            {
                "id": c.id,
                "name": c.name,
                "email": c.email,
                "phone": c.phone,
                "address": c.address,
                "slack_user_id": c.slack_user_id,
                "created_at": _t(c.created_at),
                "payment_methods": [
                    {
                        "id": m.id,
                        "brand": m.brand,
                        "last4": m.last4,
                        "exp_month": m.exp_month,
                        "exp_year": m.exp_year,
                    }
                    for m in c.payment_methods
                ],
            }
            for c in customers
        ],
        "orders": [
            {
                "id": o.id,
                "customer_id": o.customer_id,
                "status": o.status,
                "currency": o.currency,
                "total_minor": o.total_minor,
                "placed_at": _t(o.placed_at),
                "delivered_at": _t(o.delivered_at),
                "items": [
                    {"sku": i.sku, "name": i.name, "qty": i.qty, "unit_minor": i.unit_minor}
                    for i in o.items
                ],
                "shipping_address": o.shipping_address,
                "notes": o.notes,
            }
            for o in orders
        ],
        "payments": [
            {
                "id": p.id,
                "order_id": p.order_id,
                "amount_minor": p.amount_minor,
                "currency": p.currency,
                "status": p.status,
                "created_at": _t(p.created_at),
            }
            for p in payments
        ],
        "refunds": [
            {
                "id": r.id,
                "order_id": r.order_id,
                "amount_minor": r.amount_minor,
                "currency": r.currency,
                "created_at": _t(r.created_at),
                "reason_code": r.reason_code,
                "return_id": r.return_id,
            }
            for r in refunds
        ],
        "returns": [
            {
                "id": r.id,
                "order_id": r.order_id,
                "items": [{"sku": i.sku, "qty": i.qty} for i in r.items],
                "status": r.status,
                "created_at": _t(r.created_at),
                "reason_code": r.reason_code,
            }
            for r in returns
        ],
        "invoices": [
            {
                "id": i.id,
                "order_id": i.order_id,
                "amount_minor": i.amount_minor,
                "currency": i.currency,
                "issued_at": _t(i.issued_at),
            }
            for i in invoices
        ],
        "knowledge": [
            {
                "id": d.id,
                "version": d.version,
                "kind": d.kind,
                "title": d.title,
                "sections": [{"id": sec.section_id, "text": sec.text} for sec in d.sections],
            }
            for d in docs
        ],
        "staff": [
            {"id": m.id, "slack_user_id": m.slack_user_id, "name": m.name, "role": m.role}
            for m in staff
        ],
        "outbox": [
            {
                "id": m.id,
                "customer_id": m.customer_id,
                "channel": m.channel,
                "to": m.to,
                "template": m.template,
                "body": m.body,
                "sent_at": _t(m.sent_at),
            }
            for m in outbox
        ],
    }


async def export_model(db: Database) -> Dataset:
    """The store's current state as a validated :class:`~tools.dataset.Dataset`."""
    async with db.sessions() as s, s.begin():
        obj = _export_obj(
            await _all(s, select(StoreCustomerRow)),
            await _all(s, select(StoreStaffRow)),
            await _all(s, select(StoreOrderRow)),
            await _all(s, select(StorePaymentRow)),
            await _all(s, select(StoreRefundRow)),
            await _all(s, select(StoreReturnRow)),
            await _all(s, select(StoreInvoiceRow)),
            await _all(s, select(StoreKnowledgeDocRow)),
            await _all(s, select(StoreOutboxRow)),
        )
    return parse_dataset(_drop_none(obj))


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


async def export_dataset(db: Database) -> dict[str, Any]:
    """The store's current state as JSON-ready data in the dataset format."""
    return (await export_model(db)).to_json_obj()


async def count_rows(db: Database) -> dict[str, int]:
    """Rows per store table (for reports and tests)."""
    tables = {
        "customers": StoreCustomerRow,
        "orders": StoreOrderRow,
        "payments": StorePaymentRow,
        "refunds": StoreRefundRow,
        "returns": StoreReturnRow,
        "invoices": StoreInvoiceRow,
        "knowledge": StoreKnowledgeDocRow,
        "staff": StoreStaffRow,
        "outbox": StoreOutboxRow,
    }
    async with db.sessions() as s, s.begin():
        return {
            name: int(await s.scalar(select(func.count()).select_from(m)) or 0)
            for name, m in tables.items()
        }
