"""The sandbox store behind the CommerceBackend seam, on SQLite and PostgreSQL (``any_db``).

Pins: customer-scoped reads (someone else's record answers exactly like a missing
one), idempotent writes (a repeated or concurrent key never writes twice), the
business refusals, full-text search that survives hostile text, and dataset
load/export (round trip, refusal of a second load, rebasing).
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import os
import uuid
import warnings
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import TypeVar

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy import Connection, text
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

import sandbox
from sandbox import search as store_fts
from sandbox.dataset import DEMO_DATASET_PATH, load_dataset_file, parse_dataset
from sandbox.io import (
    StoreLoadError,
    StoreNotEmpty,
    count_rows,
    export_dataset,
    load_dataset,
    store_is_empty,
)
from sandbox.store import SandboxStore
from storage.db import Base, Database, create_database
from storage.identities import People
from storage.knowledge import Knowledge
from tools.backend import Address, BackendError, CommerceBackend, ReturnItem

DEMO = load_dataset_file(DEMO_DATASET_PATH)
assert DEMO.as_of is not None
AS_OF: datetime = DEMO.as_of
T = TypeVar("T")


class Clock:
    """A settable clock so tests control every write's timestamp."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(AS_OF)


@pytest.fixture
async def store(any_db: Database, clock: Clock) -> SandboxStore:
    await load_dataset(any_db, DEMO)
    return SandboxStore(any_db, clock=clock)


def must(value: T | None) -> T:
    """``value``, asserted present."""
    assert value is not None
    return value


async def _refusal(call: Callable[[], Awaitable[object]]) -> tuple[str, str, dict[str, object]]:
    """The (code, message, details) of the BackendError ``call`` raises."""
    with pytest.raises(BackendError) as info:
        await call()
    return info.value.code, str(info.value), info.value.details


def test_sandbox_store_satisfies_the_backend_protocol() -> None:
    """Every CommerceBackend method exists on SandboxStore with the same parameters."""
    for name, fn in inspect.getmembers(CommerceBackend, inspect.isfunction):
        if name.startswith("_"):
            continue
        mine = getattr(SandboxStore, name)
        assert inspect.signature(mine).parameters.keys() == inspect.signature(fn).parameters.keys(), name


# -- identity ---------------------------------------------------------------------------


async def test_customer_lookups_by_id_and_case_insensitive_email(store: SandboxStore) -> None:
    """Customers are found by id and by email in any case (who a Slack or Teams user is, is
    signoff's own: tests/test_people.py)."""
    maya = await store.get_customer("C-7")
    assert maya is not None and maya.name == "Maya Chen" and maya.payment_methods
    assert await store.find_customer_by_email("  MAYA.Chen@Example.COM ") == maya
    assert await store.get_customer("C-404") is None
    assert await store.find_customer_by_email("nobody@example.com") is None


# -- customer-scoped reads ----------------------------------------------------------------


async def test_list_orders_is_newest_first_and_filters_by_status(store: SandboxStore) -> None:
    """list_orders returns only the customer's orders, newest first."""
    orders = await store.list_orders("C-7")
    assert [o.id for o in orders] == ["O-1044", "O-1045", "O-1042", "O-1043"]
    assert [o.id for o in await store.list_orders("C-7", status="DELIVERED")] == [
        "O-1042",
        "O-1043",
    ]
    o1042 = await store.get_order("C-7", "O-1042")
    assert o1042 is not None and o1042.total_minor == 18900 and o1042.items[0].qty == 1
    assert o1042.delivered_at == AS_OF - timedelta(days=5)


async def test_another_customers_records_read_exactly_like_missing_ones(
    store: SandboxStore,
) -> None:
    """C-12 asking about C-8's order, return or invoice gets what a nonexistent id gets (S1)."""
    for probe in ("O-1050", "O-9999"):
        assert await store.get_order("C-12", probe) is None
        assert await store.track_shipment("C-12", probe) is None
        assert await store.refundable_minor("C-12", probe) is None
        assert await store.list_payments("C-12", order_id=probe) == []
        assert await store.list_refunds("C-12", order_id=probe) == []
    assert await store.get_invoices("C-12", invoice_id="INV-1050") == []
    assert await store.get_invoices("C-12", invoice_id="INV-9999") == []
    rejected = next(r for r in DEMO.returns if r.order_id == "O-1053")
    assert await store.get_return("C-12", rejected.id) is None
    assert await store.get_return("C-8", rejected.id) is not None

    def refund(order_id: str) -> Callable[[], Awaitable[object]]:
        return lambda: store.issue_refund(
            "C-12",
            order_id,
            amount_minor=100,
            currency="EUR",
            reason_code="damaged",
            return_id=None,
            idempotency_key=f"k-{order_id}",
        )

    assert await _refusal(refund("O-1050")) == await _refusal(refund("O-9999"))
    assert (await _refusal(refund("O-1050")))[0] == "not_found"
    cancel_theirs = await _refusal(lambda: store.cancel_order("C-15", "O-1051", reason_code="x", idempotency_key="c1"))
    cancel_missing = await _refusal(lambda: store.cancel_order("C-15", "O-0", reason_code="x", idempotency_key="c2"))
    assert cancel_theirs == cancel_missing
    assert must(await store.get_order("C-8", "O-1051")).status == "PAID"


async def test_money_reads_are_scoped_and_ordered(store: SandboxStore) -> None:
    """Payments, refunds, invoices and returns list only the customer's records."""
    payments = await store.list_payments("C-9")
    assert [p.order_id for p in payments].count("O-1060") == 2  # the double charge
    assert {p.order_id for p in await store.list_payments("C-7")} == {
        "O-1042",
        "O-1043",
        "O-1044",
        "O-1045",
    }
    refunds = await store.list_refunds("C-10")
    assert len(refunds) == 1 and refunds[0].return_id is not None and refunds[0].reason_code == "damaged"
    invoices = await store.get_invoices("C-7")
    assert "INV-1042" in {i.id for i in invoices}
    assert [i.id for i in await store.get_invoices("C-7", invoice_id="INV-1042")] == ["INV-1042"]
    returns = await store.list_returns("C-11")
    assert [r.status for r in returns] == ["requested"] and returns[0].items[0].sku == "GLV-WNT-M"
    assert await store.refundable_minor("C-7", "O-1042") == 18900
    double_charged = must(await store.get_order("C-9", "O-1060"))
    assert await store.refundable_minor("C-9", "O-1060") == 2 * double_charged.total_minor


async def test_track_shipment_is_derived_deterministically_from_the_order(
    store: SandboxStore,
) -> None:
    """Carrier and tracking number come from the order id; the estimate is placed_at + 5 days."""
    shipped = await store.track_shipment("C-7", "O-1045")
    assert shipped is not None and shipped.status == "in_transit" and shipped.carrier and shipped.tracking_number
    assert shipped == await store.track_shipment("C-7", "O-1045")
    order = await store.get_order("C-7", "O-1045")
    assert order is not None and shipped.estimated_delivery == order.placed_at + timedelta(days=5)
    delivered = await store.track_shipment("C-7", "O-1042")
    assert (
        delivered is not None
        and delivered.status == "delivered"
        and delivered.delivered_at == AS_OF - timedelta(days=5)
    )
    pending = await store.track_shipment("C-7", "O-1044")
    assert pending is not None and pending.status == "not_shipped" and pending.tracking_number is None
    cancelled = await store.track_shipment("C-15", "O-1086")
    assert cancelled is not None and cancelled.status == "cancelled" and cancelled.estimated_delivery is None


async def test_refunds_since_counts_only_the_customers_recent_refunds(store: SandboxStore, clock: Clock) -> None:
    """refunds_since feeds per-day limits: a window in time, scoped to the customer."""
    assert await store.refunds_since("C-7", AS_OF - timedelta(days=1)) == []
    clock.now = AS_OF + timedelta(hours=2)
    await store.issue_refund(
        "C-7",
        "O-1042",
        amount_minor=500,
        currency="USD",
        reason_code="damaged",
        return_id=None,
        idempotency_key="since-1",
    )
    assert [r.amount_minor for r in await store.refunds_since("C-7", AS_OF)] == [500]
    assert await store.refunds_since("C-7", AS_OF + timedelta(hours=3)) == []
    assert await store.refunds_since("C-8", AS_OF) == []


# -- writes -------------------------------------------------------------------------------


async def test_refunds_reduce_refundable_and_a_full_refund_marks_payments_refunded(
    store: SandboxStore,
) -> None:
    """refundable = captured - refunded; covering the capture flips payments to refunded."""
    first = await store.issue_refund(
        "C-7",
        "O-1042",
        amount_minor=4000,
        currency="USD",
        reason_code="damaged",
        return_id=None,
        idempotency_key="r1",
    )
    assert first.id.startswith("R-") and first.amount_minor == 4000 and first.created_at == AS_OF
    assert await store.refundable_minor("C-7", "O-1042") == 14900
    assert [p.status for p in await store.list_payments("C-7", order_id="O-1042")] == ["captured"]
    await store.issue_refund(
        "C-7",
        "O-1042",
        amount_minor=14900,
        currency="USD",
        reason_code="damaged",
        return_id=None,
        idempotency_key="r2",
    )
    assert await store.refundable_minor("C-7", "O-1042") == 0
    assert [p.status for p in await store.list_payments("C-7", order_id="O-1042")] == ["refunded"]


async def test_refund_refusals_carry_structured_details(store: SandboxStore, any_db: Database) -> None:
    """Too much, wrong currency or a non-positive amount are refused with stable codes."""

    def refund(amount: int, currency: str = "USD") -> Callable[[], Awaitable[object]]:
        return lambda: store.issue_refund(
            "C-7",
            "O-1042",
            amount_minor=amount,
            currency=currency,
            reason_code="damaged",
            return_id=None,
            idempotency_key=f"x{amount}{currency}",
        )

    code, _, details = await _refusal(refund(18901))
    assert (code, details["refundable_minor"]) == ("amount_exceeds_refundable", 18900)
    assert (await _refusal(refund(100, "EUR")))[0] == "currency_mismatch"
    assert (await _refusal(refund(0)))[0] == "invalid_amount"
    assert (await count_rows(any_db))["refunds"] == len(DEMO.refunds)


async def test_refund_against_a_return_marks_it_refunded(store: SandboxStore) -> None:
    """A refund citing a return settles it; a rejected return is not eligible."""
    ret = (await store.list_returns("C-11"))[0]
    refund = await store.issue_refund(
        "C-11",
        ret.order_id,
        amount_minor=1000,
        currency="GBP",
        reason_code="return",
        return_id=ret.id,
        idempotency_key="rr1",
    )
    assert refund.return_id == ret.id
    assert must(await store.get_return("C-11", ret.id)).status == "refunded"
    rejected = next(r for r in await store.list_returns("C-8") if r.status == "rejected")
    code, _, details = await _refusal(
        lambda: store.issue_refund(
            "C-8",
            rejected.order_id,
            amount_minor=100,
            currency="EUR",
            reason_code="return",
            return_id=rejected.id,
            idempotency_key="rr2",
        )
    )
    assert (code, details["status"]) == ("return_not_eligible", "rejected")


async def test_repeated_key_returns_the_stored_result_without_a_second_side_effect(
    store: SandboxStore, any_db: Database
) -> None:
    """Same key twice: one refund row, one outbox row, identical results."""
    a, b = [
        await store.issue_refund(
            "C-7",
            "O-1042",
            amount_minor=1500,
            currency="USD",
            reason_code="damaged",
            return_id=None,
            idempotency_key="same",
        )
        for _ in range(2)
    ]
    assert a == b
    assert len(await store.list_refunds("C-7", order_id="O-1042")) == 1
    m1 = await store.send_message("C-7", channel="email", template="t", body="hello", idempotency_key="msg")
    m2 = await store.send_message("C-7", channel="email", template="t", body="hello", idempotency_key="msg")
    assert m1 == m2
    assert (await count_rows(any_db))["outbox"] == len(DEMO.outbox) + 1
    record = await store.lookup_write("same")
    assert record is not None and record.operation == "issue_refund" and record.result["id"] == a.id
    assert await store.lookup_write("never-used") is None


async def test_concurrent_duplicate_key_makes_exactly_one_refund(store: SandboxStore) -> None:
    """Racing calls with one key: one refund row, every caller gets the same result."""
    results = await asyncio.gather(
        *[
            store.issue_refund(
                "C-7",
                "O-1042",
                amount_minor=1000,
                currency="USD",
                reason_code="damaged",
                return_id=None,
                idempotency_key="race",
            )
            for _ in range(6)
        ]
    )
    assert len({r.id for r in results}) == 1
    assert len(await store.list_refunds("C-7", order_id="O-1042")) == 1
    assert await store.refundable_minor("C-7", "O-1042") == 17900


async def test_concurrent_different_keys_never_refund_more_than_captured(
    store: SandboxStore,
) -> None:
    """The order lock stops two keys from both refunding the whole capture."""
    outcomes = await asyncio.gather(
        *[
            store.issue_refund(
                "C-7",
                "O-1042",
                amount_minor=18900,
                currency="USD",
                reason_code="damaged",
                return_id=None,
                idempotency_key=f"full-{n}",
            )
            for n in range(3)
        ],
        return_exceptions=True,
    )
    assert sum(1 for o in outcomes if not isinstance(o, BaseException)) == 1
    assert all(o.code == "amount_exceeds_refundable" for o in outcomes if isinstance(o, BackendError))
    assert await store.refundable_minor("C-7", "O-1042") == 0


async def test_key_reused_for_another_operation_is_refused(store: SandboxStore) -> None:
    """A key belongs to one write; reusing it for something else is a conflict, not a replay."""
    await store.create_reorder("C-7", "O-1042", idempotency_key="k")
    assert (await _refusal(lambda: store.cancel_order("C-7", "O-1044", reason_code="x", idempotency_key="k")))[
        0
    ] == "idempotency_conflict"
    assert (await _refusal(lambda: store.create_reorder("C-8", "O-1050", idempotency_key="k")))[
        0
    ] == "idempotency_conflict"


async def test_cancel_paid_order_refunds_in_full_and_shipped_is_refused(
    store: SandboxStore,
) -> None:
    """Only PENDING/PAID cancel; a PAID one gets a full refund so money stays consistent."""
    order = await store.cancel_order("C-7", "O-1044", reason_code="customer_request", idempotency_key="c")
    assert order.status == "CANCELLED"
    refunds = await store.list_refunds("C-7", order_id="O-1044")
    assert [(r.amount_minor, r.reason_code) for r in refunds] == [(order.total_minor, "customer_request")]
    assert {p.status for p in await store.list_payments("C-7", order_id="O-1044")} == {"refunded"}
    code, _, details = await _refusal(
        lambda: store.cancel_order("C-7", "O-1045", reason_code="x", idempotency_key="c2")
    )
    assert (code, details) == ("order_not_cancellable", {"status": "SHIPPED"})
    pending = await store.cancel_order("C-10", "O-1065", reason_code="customer_request", idempotency_key="c3")
    assert pending.status == "CANCELLED" and await store.list_refunds("C-10", order_id="O-1065") == []


async def test_shipping_address_changes_until_shipped(store: SandboxStore) -> None:
    """An unshipped order takes a new address; a shipped one refuses."""
    new = Address(line1="9 Elm St", city="Boulder", region="CO", postal_code="80302", country="US")
    order = await store.update_shipping_address("C-7", "O-1044", address=new, idempotency_key="a1")
    assert order.shipping_address == new
    assert must(await store.get_order("C-7", "O-1044")).shipping_address == new
    code, _, details = await _refusal(
        lambda: store.update_shipping_address("C-7", "O-1045", address=new, idempotency_key="a2")
    )
    assert (code, details) == ("address_change_not_allowed", {"status": "SHIPPED"})


async def test_reorder_copies_items_but_not_notes(store: SandboxStore) -> None:
    """A reorder is a new PENDING order with the same items; untrusted notes are not copied."""
    order = await store.create_reorder("C-7", "O-1044", idempotency_key="ro")
    source = await store.get_order("C-7", "O-1044")
    assert source is not None and order.id != source.id and order.status == "PENDING"
    assert order.items == source.items and order.total_minor == source.total_minor and order.notes is None
    assert (await store.list_orders("C-7"))[0].id == order.id


async def test_create_return_checks_delivery_and_items(store: SandboxStore) -> None:
    """Returns need a delivered order and items that were ordered and not yet returned."""
    ret = await store.create_return(
        "C-7",
        "O-1042",
        items=[ReturnItem(sku="BOOT-RDG-W8", qty=1)],
        reason_code="damaged",
        idempotency_key="ret1",
    )
    assert (
        ret.status == "requested"
        and ret.reason_code == "damaged"
        and ret.items == (ReturnItem(sku="BOOT-RDG-W8", qty=1),)
    )
    again = await _refusal(
        lambda: store.create_return(
            "C-7",
            "O-1042",
            items=[ReturnItem(sku="BOOT-RDG-W8", qty=1)],
            reason_code="damaged",
            idempotency_key="ret2",
        )
    )
    assert again[0] == "invalid_items" and again[2]["returnable_qty"] == 0
    bad_sku = await _refusal(
        lambda: store.create_return(
            "C-7",
            "O-1043",
            items=[ReturnItem(sku="NOPE", qty=1)],
            reason_code="x",
            idempotency_key="ret3",
        )
    )
    assert bad_sku[0] == "invalid_items"
    not_delivered = await _refusal(
        lambda: store.create_return(
            "C-7",
            "O-1045",
            items=[ReturnItem(sku="LAMP-HD", qty=1)],
            reason_code="x",
            idempotency_key="ret4",
        )
    )
    assert not_delivered[0] == "order_not_delivered"


async def test_retry_payment_captures_once_and_never_double_charges(store: SandboxStore) -> None:
    """The latest failed payment becomes a captured one; a paid order has nothing to retry."""
    payment = await store.retry_payment("C-10", "O-1065", idempotency_key="pay1")
    assert payment.status == "captured" and payment.id.startswith("P-")
    assert must(await store.get_order("C-10", "O-1065")).status == "PAID"
    for key, customer, order in (
        ("pay2", "C-10", "O-1065"),
        ("pay3", "C-7", "O-1042"),
        ("pay4", "C-9", "O-1060"),
    ):
        with pytest.raises(BackendError) as info:
            await store.retry_payment(customer, order, idempotency_key=key)
        assert info.value.code == "nothing_to_retry"


async def test_contact_details_update_and_validation(store: SandboxStore) -> None:
    """The on-file email/phone change; malformed or taken values are refused."""
    updated = await store.update_contact_details("C-7", email="maya@example.net", phone=None, idempotency_key="cd1")
    assert updated.email == "maya@example.net"
    assert updated.phone == must(await store.get_customer("C-7")).phone
    assert await store.find_customer_by_email("MAYA@example.net") == updated
    assert (
        await _refusal(lambda: store.update_contact_details("C-7", email="nope", phone=None, idempotency_key="cd2"))
    )[0] == "invalid_email"
    assert (
        await _refusal(
            lambda: store.update_contact_details(
                "C-7", email="jonas.weber@example.de", phone=None, idempotency_key="cd3"
            )
        )
    )[0] == "email_unavailable"
    assert (await _refusal(lambda: store.update_contact_details("C-7", email=None, phone=None, idempotency_key="cd4")))[
        0
    ] == "nothing_to_update"


async def test_messages_go_only_to_the_contact_on_file(store: SandboxStore) -> None:
    """send_message has no address parameter: email goes to the email on file, sms to the phone."""
    maya = await store.get_customer("C-7")
    assert maya is not None
    email = await store.send_message(
        "C-7", channel="email", template="password_reset", body="reset", idempotency_key="m1"
    )
    sms = await store.send_message("C-7", channel="sms", template="order_update", body="hi", idempotency_key="m2")
    assert (email.to, sms.to) == (maya.email, maya.phone) and email.id.startswith("M-")
    code, _, details = await _refusal(
        lambda: store.send_message("C-11", channel="sms", template="t", body="b", idempotency_key="m3")
    )
    assert (code, details) == ("no_contact_on_file", {"channel": "sms"})


# -- load and export ----------------------------------------------------------------------


async def test_export_load_export_round_trip_is_identical(store: SandboxStore, any_db: Database) -> None:
    """After writes, export -> load into an empty store -> export gives the same JSON."""
    await store.issue_refund(
        "C-7",
        "O-1042",
        amount_minor=100,
        currency="USD",
        reason_code="damaged",
        return_id=None,
        idempotency_key="rt1",
    )
    await store.send_message("C-7", channel="email", template="t", body="b", idempotency_key="rt2")
    await store.create_return(
        "C-7",
        "O-1042",
        items=[ReturnItem(sku="BOOT-RDG-W8", qty=1)],
        reason_code="damaged",
        idempotency_key="rt3",
    )
    first = await export_dataset(any_db)
    assert len(first["refunds"]) == len(DEMO.refunds) + 1 and len(first["outbox"]) == len(DEMO.outbox) + 1
    async with any_db.engine.begin() as conn:
        await conn.run_sync(Base.metadata.drop_all)
        await conn.run_sync(Base.metadata.create_all)
    assert await store_is_empty(any_db)
    await load_dataset(any_db, parse_dataset(first))
    assert await export_dataset(any_db) == first
    hits = await Knowledge(any_db).search("refund window")
    assert "refund-policy@7#window" in [f"{h.doc_id}@{h.version}#{h.section_id}" for h in hits], "still searchable"


async def test_second_load_is_refused_and_duplicates_nothing(store: SandboxStore, any_db: Database) -> None:
    """Loading into a store that holds customers raises StoreNotEmpty and changes nothing."""
    before = await count_rows(any_db)
    with pytest.raises(StoreNotEmpty):
        await load_dataset(any_db, DEMO)
    assert await count_rows(any_db) == before


async def test_a_load_failing_midway_leaves_nothing_half_loaded(any_db: Database) -> None:
    """A conflict late in the load (its knowledge: refund-policy v7 already stored with other
    text) rolls back every row written before it, people included."""
    other = {
        "id": "refund-policy",
        "version": 7,
        "kind": "policy",
        "title": "Refunds",
        "sections": [{"id": "x", "text": "y"}],
    }
    await load_dataset(
        any_db, parse_dataset({"knowledge": [other], "staff": [{"id": "S-9", "name": "Early", "role": "rep"}]})
    )
    assert await store_is_empty(any_db)
    with pytest.raises(StoreLoadError, match="refund-policy"):
        await load_dataset(any_db, DEMO)
    counts = await count_rows(any_db)
    assert (counts["customers"], counts["orders"]) == (0, 0)
    assert [m.id for m in (await People(any_db).everyone()).staff] == ["S-9"]


async def test_rebase_shifts_every_time_by_now_minus_as_of(any_db: Database) -> None:
    """With rebase_to, O-1042 is still delivered five days before 'now'."""
    now = AS_OF + timedelta(days=400, hours=3)
    report = await load_dataset(any_db, DEMO, rebase_to=now)
    assert report.shifted_by == now - AS_OF and report.orders == len(DEMO.orders)
    order = await SandboxStore(any_db).get_order("C-7", "O-1042")
    assert order is not None and order.delivered_at == now - timedelta(days=5)
    payments = await SandboxStore(any_db).list_payments("C-7", order_id="O-1042")
    assert payments[0].created_at == DEMO.payments[0].created_at + (now - AS_OF)


# -- schema: FTS DDL and the Alembic revision ---------------------------------------------


#: The revisions that build the sandbox store's tables, in order.
STORE_REVISIONS = (
    "0002_store",
    "s0002_refund_kind",
    "s0003_staff_email",
    "s0004_teams_user",
    "s0005_knowledge_people_out",
)


def _revision(name: str) -> ModuleType:
    path = Path(sandbox.__file__).parent / "migrations" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"revision_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _describe(conn: Connection) -> dict[str, object]:
    insp = sa_inspect(conn)
    out: dict[str, object] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # expression index reflection is partial on SQLite
        for t in sorted(n for n in insp.get_table_names() if n.startswith("store_")):
            out[t] = (
                {c["name"]: (str(c["type"]), c["nullable"]) for c in insp.get_columns(t)},
                sorted((i["name"], tuple(i["column_names"] or ()), bool(i["unique"])) for i in insp.get_indexes(t)),
                sorted(
                    (f["name"], tuple(f["constrained_columns"]), f["referred_table"]) for f in insp.get_foreign_keys(t)
                ),
                sorted((u["name"], tuple(u["column_names"])) for u in insp.get_unique_constraints(t)),
                insp.get_pk_constraint(t)["name"],
            )
    return out


def _autogenerate_drift(conn: Connection) -> list[str]:
    opts = {"compare_type": True, "include_object": store_fts.include_object}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # expression index reflection is partial on SQLite
        diffs = compare_metadata(MigrationContext.configure(conn, opts=opts), Base.metadata)
    return [str(d) for d in diffs if "store_" in str(d)]


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
async def test_migration_0002_matches_the_models_serves_search_and_downgrades(dialect: str, tmp_path: Path) -> None:
    """The store's revisions (0002 and the ones after it) build what create_all builds (FTS
    included); their downgrades remove it."""
    revisions = [_revision(name) for name in STORE_REVISIONS]
    pg_url = os.environ.get("SIGNOFF_TEST_PG_URL")
    if dialect == "postgresql" and not pg_url:
        pytest.skip("SIGNOFF_TEST_PG_URL not set")
    schemas = [f"m_{uuid.uuid4().hex[:10]}", f"m_{uuid.uuid4().hex[:10]}"]

    def make(n: int) -> Database:
        if dialect == "sqlite":
            return create_database(f"sqlite+aiosqlite:///{tmp_path / f'{n}.db'}")
        engine = create_async_engine(pg_url or "", connect_args={"server_settings": {"search_path": schemas[n]}})
        return Database(engine=engine, sessions=async_sessionmaker(engine, expire_on_commit=False))

    def migrate(conn: Connection, step: str) -> None:
        with Operations.context(MigrationContext.configure(conn)):
            for revision in revisions if step == "upgrade" else reversed(revisions):
                getattr(revision, step)()

    if dialect == "postgresql":
        admin = create_async_engine(pg_url or "")
        async with admin.begin() as conn:
            for schema in schemas:
                await conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    migrated, modelled = make(0), make(1)
    try:
        async with migrated.engine.begin() as conn:
            await conn.run_sync(migrate, "upgrade")
            by_migration = await conn.run_sync(_describe)
        store_tables = [t for name, t in Base.metadata.tables.items() if name.startswith("store_")]
        async with modelled.engine.begin() as conn:
            await conn.run_sync(lambda c: Base.metadata.create_all(c, tables=store_tables))
            by_models = await conn.run_sync(_describe)
        assert by_migration == by_models
        async with migrated.engine.connect() as conn:
            drift = await conn.run_sync(_autogenerate_drift)
        assert drift == [], "autogenerate would change the store schema (or drop its FTS DDL)"
        runtime_tables = [t for name, t in Base.metadata.tables.items() if not name.startswith("store_")]
        async with migrated.engine.begin() as conn:  # knowledge and people are the runtime's now
            await conn.run_sync(lambda c: Base.metadata.create_all(c, tables=runtime_tables))
        await load_dataset(migrated, DEMO)
        assert await Knowledge(migrated).search("refund window")
        async with migrated.engine.begin() as conn:
            await conn.run_sync(migrate, "downgrade")
            leftover = await conn.run_sync(lambda c: sa_inspect(c).get_table_names())
        assert [t for t in leftover if t.startswith("store_")] == []
    finally:
        await migrated.dispose()
        await modelled.dispose()
        if dialect == "postgresql":
            async with admin.begin() as conn:
                for schema in schemas:
                    await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
            await admin.dispose()
