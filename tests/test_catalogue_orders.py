"""The orders group against the real sandbox store: reads, cancel, address
change, reorder and template messages to contacts on file (C3, S3, S7)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sandbox.io import export_dataset
from storage.db import Database
from tests.catalogue_harness import (
    ADDRESS,
    INJECTION,
    call,
    check,
    handler_only,
    make_ctx,
    make_store,
)
from tools.context import Rules

NEW_ADDRESS = {
    "line1": "9 Elm Rd",
    "city": "Austin",
    "region": "TX",
    "postal_code": "73301",
    "country": "US",
}


def untrusted_place(city: str) -> dict[str, object]:
    """What the model sees of an address: the customer-written city wrapped as untrusted, the country."""
    return {"city": {"untrusted_data": {"source": "address", "text": city, "truncated": False}}, "country": "US"}


async def _outbox(db: Database) -> list[dict[str, Any]]:
    return list((await export_dataset(db)).get("outbox", []))


# -- reads -------------------------------------------------------------------------


async def test_get_order_is_trimmed_with_refundable_amount(db: Database) -> None:
    """The order view has what the next step needs and no street address."""
    store = await make_store(db)
    out = await call("get_order", {"order_id": "O-1042"}, make_ctx(store))
    assert set(out) == {
        "order_id",
        "status",
        "currency",
        "total_minor",
        "total",
        "refundable_minor",
        "placed_at",
        "delivered_at",
        "items",
        "ship_to",
        "notes",
    }
    assert (out["status"], out["refundable_minor"], out["total"]) == (
        "DELIVERED",
        18900,
        "189.00 USD",
    )
    assert [(i["sku"], i["qty"]) for i in out["items"]] == [("MUG-1", 2), ("LAMP-9", 1)]
    assert out["ship_to"] == untrusted_place("Springfield")
    assert ADDRESS["line1"] not in str(out)


async def test_get_order_wraps_an_injected_note_and_truncates_it(db: Database) -> None:
    """Order notes are written by outsiders: untrusted, labelled, cut to the limit (S7)."""
    store = await make_store(db)
    ctx = make_ctx(store, rules=Rules(untrusted_text_limit=20))
    out = await call("get_order", {"order_id": "O-1042"}, ctx)
    assert out["notes"] == {"untrusted_data": {"source": "order_note", "text": INJECTION[:20], "truncated": True}}


async def test_get_order_refundable_reflects_earlier_refunds(db: Database) -> None:
    """refundable_minor is captured minus refunded."""
    store = await make_store(db)
    out = await call("get_order", {"order_id": "O-1047"}, make_ctx(store))
    assert (out["currency"], out["refundable_minor"]) == ("EUR", 5000)


async def test_list_orders_newest_first_and_by_status(db: Database) -> None:
    """Only the bound customer's orders, newest first, optionally filtered."""
    store = await make_store(db)
    ctx = make_ctx(store)
    out = await call("list_orders", {}, ctx)
    assert [o["order_id"] for o in out["orders"]][:3] == ["O-1045", "O-1043", "O-1044"]
    assert out["count"] == 7 and not any(o["order_id"].startswith("O-2") for o in out["orders"])
    delivered = await call("list_orders", {"status": "DELIVERED"}, ctx)
    assert {o["order_id"] for o in delivered["orders"]} == {"O-1042", "O-1046", "O-1047"}
    assert delivered["orders"][0]["total"].endswith(delivered["orders"][0]["currency"])


async def test_track_shipment_reports_carrier_and_eta(db: Database) -> None:
    """A shipped order has a carrier, tracking number and estimated delivery."""
    store = await make_store(db)
    out = await call("track_shipment", {"order_id": "O-1044"}, make_ctx(store))
    assert out["status"] == "in_transit" and out["carrier"] and out["tracking_number"]
    assert out["estimated_delivery"].endswith("Z")


# -- cancel_order ----------------------------------------------------------------------


async def test_cancel_order_cancels_a_paid_order_and_refunds_it(db: Database) -> None:
    """A PAID order is cancelled; the store refunds what was captured; replay is a no-op."""
    store = await make_store(db)
    ctx = make_ctx(store)
    args = {
        "order_id": "O-1043",
        "reason_code": "customer_request",
        "evidence": ["refund-policy@7#window"],
    }
    out = await call("cancel_order", args, ctx)
    assert out == {"order_id": "O-1043", "status": "CANCELLED", "cancelled": True}
    payments = await call("list_payments", {"order_id": "O-1043"}, ctx)
    assert [r["amount_minor"] for r in payments["refunds"]] == [5000]
    replay = await handler_only("cancel_order", args, ctx)
    assert replay == out
    payments = await call("list_payments", {"order_id": "O-1043"}, ctx)
    assert len(payments["refunds"]) == 1


@pytest.mark.parametrize("oid,status", [("O-1044", "SHIPPED"), ("O-1042", "DELIVERED"), ("O-1048", "CANCELLED")])
async def test_cancel_order_check_refuses_orders_past_cancellation(db: Database, oid: str, status: str) -> None:
    """Only PENDING/PAID orders can be cancelled; the status is given back."""
    store = await make_store(db)
    out = await check("cancel_order", {"order_id": oid, "reason_code": "customer_request"}, make_ctx(store))
    assert out is not None
    assert (out["error"], out["status"]) == ("order_not_cancellable", status)


async def test_cancel_order_backend_refusal_has_the_same_code(db: Database) -> None:
    """If state changed after the check, the store's refusal reaches the model unchanged."""
    store = await make_store(db)
    out = await handler_only("cancel_order", {"order_id": "O-1044", "reason_code": "customer_request"}, make_ctx(store))
    assert (out["error"], out["status"]) == ("order_not_cancellable", "SHIPPED")


# -- update_shipping_address ---------------------------------------------------------------


async def test_update_shipping_address_before_shipping(db: Database) -> None:
    """A PAID order's destination changes; only city/country are echoed back."""
    store = await make_store(db)
    ctx = make_ctx(store)
    out = await call("update_shipping_address", {"order_id": "O-1043", "address": NEW_ADDRESS}, ctx)
    assert out == {
        "order_id": "O-1043",
        "status": "PAID",
        "ship_to": untrusted_place("Austin"),
    }
    order = await store.get_order("C-7", "O-1043")
    assert order is not None and order.shipping_address is not None
    assert (order.shipping_address.line1, order.shipping_address.region) == ("9 Elm Rd", "TX")


@pytest.mark.parametrize("oid", ["O-1044", "O-1042", "O-1048"])
async def test_update_shipping_address_check_refuses_after_shipping(db: Database, oid: str) -> None:
    """Shipped, delivered and cancelled orders keep their address."""
    store = await make_store(db)
    args = {"order_id": oid, "address": NEW_ADDRESS}
    out = await check("update_shipping_address", args, make_ctx(store))
    assert out is not None and out["error"] == "address_change_not_allowed"
    backend = await handler_only("update_shipping_address", args, make_ctx(store))
    assert backend["error"] == out["error"] and backend["status"] == out["status"]


# -- create_reorder ------------------------------------------------------------------------


async def test_create_reorder_places_a_pending_copy_readable_by_get_order(db: Database) -> None:
    """The new order waits for payment and its id fits the order-id schema."""
    store = await make_store(db)
    ctx = make_ctx(store)
    out = await call("create_reorder", {"order_id": "O-1042"}, ctx)
    assert out["reordered_from"] == "O-1042" and out["status"] == "PENDING"
    assert out["total_minor"] == 18900 and out["item_count"] == 3
    again = await call("get_order", {"order_id": out["order_id"]}, ctx)  # schema-validated id
    assert again["status"] == "PENDING" and again["notes"] is None
    replay = await handler_only("create_reorder", {"order_id": "O-1042"}, ctx)
    assert replay["order_id"] == out["order_id"]


async def test_create_reorder_check_requires_an_owned_order(db: Database) -> None:
    """Reordering someone else's order is not_found."""
    store = await make_store(db)
    out = await check("create_reorder", {"order_id": "O-2001"}, make_ctx(store))
    assert out is not None and out["error"] == "not_found"


# -- send_message ------------------------------------------------------------------------------


async def test_send_message_order_update_goes_to_the_email_on_file(db: Database) -> None:
    """The body is rendered from the record; the recipient is the contact on file (S3)."""
    store = await make_store(db)
    out = await call(
        "send_message",
        {"channel": "email", "template": "order_update", "order_id": "O-1044"},
        make_ctx(store),
    )
    assert (out["channel"], out["template"], out["to"]) == (
        "email",
        "order_update",
        "j***@example.com",
    )
    [msg] = await _outbox(db)
    assert msg["to"] == "jane@example.com"
    assert msg["body"] == "Update on your order O-1044: it is on its way."


async def test_send_message_sms_uses_the_phone_on_file(db: Database) -> None:
    """SMS goes to the phone number on file; a replay on the same day sends nothing more."""
    store = await make_store(db)
    ctx = make_ctx(store)
    args = {"channel": "sms", "template": "shipping_delay", "order_id": "O-1044"}
    first = await call("send_message", args, ctx)
    second = await call("send_message", args, ctx)
    assert first["message_id"] == second["message_id"] and first["to"] == "***0123"
    [msg] = await _outbox(db)
    assert msg["to"] == "+14155550123"
    assert "O-1044 is delayed" in msg["body"] and "2025-06-12" in msg["body"]


async def test_send_message_never_carries_outsiders_text(db: Database) -> None:
    """An order whose note holds an injection sends only our template text."""
    store = await make_store(db)
    await call(
        "send_message",
        {"channel": "email", "template": "order_update", "order_id": "O-1042"},
        make_ctx(store),
    )
    [msg] = await _outbox(db)
    assert INJECTION not in msg["body"] and "Mug" not in msg["body"]
    assert msg["body"] == "Update on your order O-1042: it is delivered."


async def test_send_message_return_label_and_refund_confirmation(db: Database) -> None:
    """Templates that need a record render from the latest matching record."""
    store = await make_store(db)
    ctx = make_ctx(store)
    await call("send_message", {"channel": "email", "template": "return_label", "order_id": "O-1042"}, ctx)
    await call(
        "send_message",
        {"channel": "email", "template": "refund_confirmation", "order_id": "O-1047"},
        ctx,
    )
    by_template = {m["template"]: m for m in await _outbox(db)}
    label, refund = by_template["return_label"], by_template["refund_confirmation"]
    assert "RT-31" in label["body"] and "O-1042" in label["body"]
    assert "10.00 EUR" in refund["body"] and "R-1" in refund["body"]


@pytest.mark.parametrize(
    ("args", "customer", "error"),
    [
        (
            {"channel": "sms", "template": "order_update", "order_id": "O-2001"},
            "C-8",
            "no_contact_on_file",
        ),
        ({"channel": "email", "template": "order_update"}, "C-7", "order_id_required"),
        (
            {"channel": "email", "template": "order_update", "order_id": "O-2001"},
            "C-7",
            "not_found",
        ),
        (
            {"channel": "email", "template": "return_label", "order_id": "O-1043"},
            "C-7",
            "no_return_for_order",
        ),
        (
            {"channel": "email", "template": "refund_confirmation", "order_id": "O-1042"},
            "C-7",
            "no_refund_for_order",
        ),
        (
            {"channel": "email", "template": "shipping_delay", "order_id": "O-1042"},
            "C-7",
            "template_not_applicable",
        ),
    ],
)
async def test_send_message_check_failures(db: Database, args: dict[str, Any], customer: str, error: str) -> None:
    """Each refusal is a structured error and nothing is sent, by check or handler."""
    store = await make_store(db)
    out = await check("send_message", args, make_ctx(store, customer))
    assert out is not None and out["error"] == error
    assert (await handler_only("send_message", args, make_ctx(store, customer)))["error"] == error
    assert await _outbox(db) == []


async def test_message_ids_and_order_ids_fit_the_schema_patterns(db: Database) -> None:
    """Ids the store creates can be passed back to tools and finish."""
    store = await make_store(db)
    ctx = make_ctx(store)
    msg = await call("send_message", {"channel": "email", "template": "order_update", "order_id": "O-1043"}, ctx)
    assert re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", msg["message_id"])
