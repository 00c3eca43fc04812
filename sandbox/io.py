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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel
from sqlalchemy import func, insert, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from sandbox.dataset import AddressRecord, Dataset, parse_dataset
from sandbox.models import (
    StoreCustomerRow,
    StoreInvoiceRow,
    StoreOrderItemRow,
    StoreOrderRow,
    StoreOutboxRow,
    StorePaymentMethodRow,
    StorePaymentRow,
    StoreRefundRow,
    StoreReturnItemRow,
    StoreReturnRow,
)
from sandbox.store import is_empty, store_is_empty
from storage import identities, knowledge
from storage.db import Database
from storage.identities import CustomerLink, PeopleSeed, Staff
from storage.knowledge_files import Document, KnowledgeError, Section
from storage.records import wall_clock

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


def _shift(t: datetime | None, by: timedelta) -> datetime | None:
    return None if t is None else t + by


def _row(rec: BaseModel, by: timedelta, times: tuple[str, ...] = (), **extra: object) -> dict[str, Any]:
    """A record's columns: nested lists dropped, times shifted by ``by``, ``extra`` merged."""
    row = {k: v for k, v in rec.model_dump().items() if not isinstance(v, list)}
    for name in times:
        if row[name] is not None:
            row[name] += by
    return {**row, **extra}


def _children(parent_key: str, parents: list[Any], attr: str) -> list[dict[str, Any]]:
    return [
        {**child.model_dump(), parent_key: parent.id, "position": n}
        for parent in parents
        for n, child in enumerate(getattr(parent, attr))
    ]


def _documents(ds: Dataset) -> list[Document]:
    """The dataset's knowledge as documents keeping their given ids and versions."""
    return [
        Document(
            id=d.id,
            title=d.title,
            kind=d.kind,
            version=d.version,
            sections=tuple(Section(id=sec.id, text=sec.text) for sec in d.sections),
        )  # fmt: skip
        for d in ds.knowledge
    ]


def _people(ds: Dataset) -> PeopleSeed:
    """The dataset's staff, and the Slack and Teams users listed on its customers."""
    return PeopleSeed(
        staff=tuple(Staff(**m.model_dump()) for m in ds.staff),
        customers=tuple(
            CustomerLink(customer_id=c.id, slack_user_id=c.slack_user_id, teams_user_id=c.teams_user_id)
            for c in ds.customers
            if c.slack_user_id or c.teams_user_id
        ),
    )


_PEOPLE_FIELDS = {"slack_user_id", "teams_user_id"}


def _rows(ds: Dataset, by: timedelta) -> list[tuple[type[Any], list[dict[str, Any]]]]:
    """Insert batches in foreign-key order."""
    customers = [
        {k: v for k, v in _row(c, by, ("created_at",), address=_address(c.address)).items() if k not in _PEOPLE_FIELDS}
        for c in ds.customers
    ]
    orders = [
        _row(o, by, ("placed_at", "delivered_at"), shipping_address=_address(o.shipping_address)) for o in ds.orders
    ]
    return [
        (StoreCustomerRow, customers),
        (StorePaymentMethodRow, _children("customer_id", ds.customers, "payment_methods")),
        (StoreOrderRow, orders),
        (StoreOrderItemRow, _children("order_id", ds.orders, "items")),
        (StorePaymentRow, [_row(p, by, ("created_at",)) for p in ds.payments]),
        (StoreReturnRow, [_row(r, by, ("created_at",)) for r in ds.returns]),
        (StoreReturnItemRow, _children("return_id", ds.returns, "items")),
        (StoreRefundRow, [_row(r, by, ("created_at",)) for r in ds.refunds]),
        (StoreInvoiceRow, [_row(i, by, ("issued_at",)) for i in ds.invoices]),
        (StoreOutboxRow, [_row(m, by, ("sent_at",)) for m in ds.outbox]),
    ]


def _address(a: AddressRecord | None) -> dict[str, Any] | None:
    return None if a is None else a.model_dump(exclude_none=True)


async def load_dataset(
    db: Database, dataset: Dataset, *, rebase_to: datetime | None = None, people: bool = True
) -> LoadReport:
    """Write ``dataset`` into an empty store in one transaction; :class:`StoreNotEmpty` otherwise.

    Its knowledge goes to signoff's own (:mod:`storage.knowledge`, ids and versions kept) and,
    unless ``people`` is false (a people file is in charge), its staff and the customers' Slack
    and Teams users replace the seeded people (:mod:`storage.identities`).

    Any failure rolls the whole load back (:class:`StoreLoadError`): nothing is half-loaded.
    """
    shift = rebase_to - dataset.as_of if rebase_to is not None and dataset.as_of is not None else None
    try:
        async with db.sessions() as s, s.begin():
            if db.is_postgres:
                await s.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOAD_LOCK})
            if not await is_empty(s):
                raise StoreNotEmpty()
            for model, rows in _rows(dataset, shift or timedelta(0)):
                if rows:
                    await s.execute(insert(model), rows)
            # Knowledge and people are signoff's own: the same importer and seeding as ever.
            await knowledge.save_in(s, _documents(dataset), wall_clock())
            if people:
                await identities.replace_in(s, _people(dataset), wall_clock())
    except KnowledgeError as exc:
        raise StoreLoadError(str(exc)) from None
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


def _json(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    return value


def _pick(row: object, names: str, **extra: object) -> dict[str, Any]:
    """``names`` (space-separated attributes) of ``row``, JSON-ready, ``None`` left out."""
    out = {n: _json(getattr(row, n)) for n in names.split()}
    out.update(extra)
    return {k: v for k, v in out.items() if v is not None}


def _customer(c: StoreCustomerRow) -> dict[str, Any]:
    cards = [_pick(m, "id brand last4 exp_month exp_year") for m in c.payment_methods]
    return _pick(c, "id name email phone address created_at", payment_methods=cards)


def _order(o: StoreOrderRow) -> dict[str, Any]:
    items = [_pick(i, "sku name qty unit_minor") for i in o.items]
    fields = "id customer_id status currency total_minor placed_at delivered_at shipping_address notes"
    return _pick(o, fields, items=items)


def _return(r: StoreReturnRow) -> dict[str, Any]:
    items = [_pick(i, "sku qty") for i in r.items]
    return _pick(r, "id order_id status created_at reason_code", items=items)


def _refund(r: StoreRefundRow) -> dict[str, Any]:
    out = _pick(r, "id order_id amount_minor currency created_at reason_code return_id")
    if r.kind == "cancellation":  # plain refunds round-trip without the key
        out["kind"] = r.kind
    return out


def _fields(names: str) -> Callable[[Any], dict[str, Any]]:
    return lambda row: _pick(row, names)


_EXPORT: tuple[tuple[str, type[Any], Callable[[Any], dict[str, Any]]], ...] = (
    ("customers", StoreCustomerRow, _customer),
    ("orders", StoreOrderRow, _order),
    ("payments", StorePaymentRow, _fields("id order_id amount_minor currency status created_at")),
    (
        "refunds",
        StoreRefundRow,
        _fields("id order_id amount_minor currency created_at reason_code return_id"),
    ),
    ("returns", StoreReturnRow, _return),
    ("invoices", StoreInvoiceRow, _fields("id order_id amount_minor currency issued_at")),
    ("outbox", StoreOutboxRow, _fields("id customer_id channel to template body sent_at")),
)


async def export_model(db: Database) -> Dataset:
    """The store's current state as a validated :class:`~sandbox.dataset.Dataset`."""
    obj: dict[str, Any] = {}
    async with db.reader() as s, s.begin():
        for name, model, convert in _EXPORT:
            rows = sorted(await s.scalars(select(model)), key=lambda r: _natural(r.id))
            obj[name] = [convert(row) for row in rows]
        await _export_own(s, obj)
    return parse_dataset(obj)


async def _export_own(s: AsyncSession, obj: dict[str, Any]) -> None:
    """Signoff's own knowledge (newest versions) and people, in the dataset's shape."""
    obj["knowledge"] = [
        {"id": d.id, "version": d.version, "kind": d.kind, "title": d.title,
         "sections": [{"id": sec.id, "text": sec.text} for sec in d.sections]}
        for d in sorted(await knowledge.documents_in(s), key=lambda d: _natural(d.id))
    ]  # fmt: skip
    people = await identities.everyone_in(s)
    obj["staff"] = [
        {k: v for k, v in vars(m).items() if v is not None} for m in sorted(people.staff, key=lambda m: _natural(m.id))
    ]
    ids = {c.customer_id: c for c in people.customers}
    for c in obj["customers"]:
        if (link := ids.get(c["id"])) is not None:
            c.update({k: v for k, v in vars(link).items() if v is not None and k != "customer_id"})


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
        "outbox": StoreOutboxRow,
    }
    async with db.reader() as s, s.begin():
        return {name: int(await s.scalar(select(func.count()).select_from(m)) or 0) for name, m in tables.items()}
