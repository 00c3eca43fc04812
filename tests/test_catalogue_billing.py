"""The billing group against the real sandbox store: invoices, payments, and
the rules of issue_refund and retry_payment, at judgement time and again at
execution (C5, S5)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from storage.db import Database
from tests.catalogue_harness import (
    REGISTRY,
    call,
    check,
    dataset,
    handler_only,
    make_ctx,
    make_store,
)
from tools.context import Rules

EVIDENCE = ["refund-policy@7#window"]


def _refund(oid: str = "O-1042", amount: int = 18900, currency: str = "USD", **extra: Any) -> dict[str, Any]:
    return {
        "order_id": oid,
        "amount_minor": amount,
        "currency": currency,
        "reason_code": "damaged",
        "evidence": EVIDENCE,
        **extra,
    }


# -- reads ---------------------------------------------------------------------------


async def test_get_invoices_lists_only_the_bound_customers(db: Database) -> None:
    """All invoices of the account, or one by id, with money and currency."""
    store = await make_store(db)
    ctx = make_ctx(store)
    out = await call("get_invoices", {}, ctx)
    assert [i["invoice_id"] for i in out["invoices"]] == ["INV-2001"]
    one = await call("get_invoices", {"invoice_id": "INV-2001"}, ctx)
    assert one["invoices"][0]["amount"] == "189.00 USD"


async def test_list_payments_includes_refunds(db: Database) -> None:
    """Payments and refunds for one order, each with its currency."""
    store = await make_store(db)
    out = await call("list_payments", {"order_id": "O-1047"}, make_ctx(store))
    assert [(p["payment_id"], p["status"], p["currency"]) for p in out["payments"]] == [("P-6", "captured", "EUR")]
    assert [(r["refund_id"], r["amount"]) for r in out["refunds"]] == [("R-1", "10.00 EUR")]


async def test_list_payments_without_order_covers_the_account_only(db: Database) -> None:
    """Every payment of the bound customer and none of anyone else's."""
    store = await make_store(db)
    out = await call("list_payments", {}, make_ctx(store))
    assert {p["order_id"] for p in out["payments"]} == {
        "O-1042",
        "O-1043",
        "O-1044",
        "O-1045",
        "O-1046",
        "O-1047",
    }


# -- issue_refund ------------------------------------------------------------------------


async def test_issue_refund_refunds_and_replays_without_a_second_refund(db: Database) -> None:
    """A valid refund executes once; the same key returns the stored refund (C9)."""
    store = await make_store(db)
    ctx = make_ctx(store)
    out = await call("issue_refund", _refund(amount=5000), ctx)
    assert (out["order_id"], out["amount"], out["reason_code"]) == (
        "O-1042",
        "50.00 USD",
        "damaged",
    )
    assert out["refund_id"].startswith("R-")
    again = await handler_only("issue_refund", _refund(amount=5000), ctx)
    assert again == out
    order = await call("get_order", {"order_id": "O-1042"}, ctx)
    assert order["refundable_minor"] == 13900


async def test_issue_refund_for_a_return_marks_it_refunded(db: Database) -> None:
    """A refund that names the return links to it."""
    store = await make_store(db)
    ctx = make_ctx(store)
    out = await call("issue_refund", _refund(amount=4500, return_id="RT-31"), ctx)
    assert out["return_id"] == "RT-31"
    assert (await call("get_return", {"return_id": "RT-31"}, ctx))["status"] == "refunded"
    again = await check("issue_refund", _refund(amount=100, return_id="RT-31"), ctx)
    assert again is not None and again["error"] == "return_not_eligible"


@pytest.mark.parametrize(
    ("args", "error", "details"),
    [
        (_refund("O-2001", 100), "not_found", {"order_id": "O-2001"}),
        (_refund("O-1042", 100, "EUR"), "currency_mismatch", {"order_currency": "USD"}),
        (
            _refund("O-1042", 18901),
            "amount_exceeds_refundable",
            {"refundable_minor": 18900, "currency": "USD"},
        ),
        (_refund("O-1047", 5001, "EUR"), "amount_exceeds_refundable", {"refundable_minor": 5000}),
        (_refund("O-1045", 100), "amount_exceeds_refundable", {"refundable_minor": 0}),
        (_refund("O-1046", 100), "outside_refund_window", {"delivered_at": "2025-03-04T09:00:00Z"}),
        (_refund("O-1042", 100, return_id="RT-77"), "not_found", {"return_id": "RT-77"}),
        (_refund("O-1047", 100, "EUR", return_id="RT-31"), "not_found", {"return_id": "RT-31"}),
    ],
)
async def test_issue_refund_check_failures(
    db: Database, args: dict[str, Any], error: str, details: dict[str, Any]
) -> None:
    """Ownership, currency, refundable amount, window and return link, each as a code."""
    store = await make_store(db)
    out = await check("issue_refund", args, make_ctx(store))
    assert out is not None and out["error"] == error, out
    assert details.items() <= out.items()


async def test_issue_refund_window_only_applies_to_delivered_orders(db: Database) -> None:
    """An undelivered PAID order can be refunded whatever its age; the window is the policy's."""
    store = await make_store(db)
    assert await check("issue_refund", _refund("O-1043", 5000), make_ctx(store)) is None
    tight = make_ctx(store, rules=Rules(refund_window_days=2))
    out = await check("issue_refund", _refund("O-1042", 100), tight)
    assert out is not None and out["error"] == "outside_refund_window"


async def test_issue_refund_daily_limit_does_not_reveal_the_number(db: Database) -> None:
    """After the per-day count of refunds, more are refused without stating the limit."""
    store = await make_store(db)
    ctx = make_ctx(store, rules=Rules(max_refunds_per_customer_per_day=2))
    assert "refund_id" in await call("issue_refund", _refund("O-1042", 100), ctx)
    assert "refund_id" in await call("issue_refund", _refund("O-1043", 100), ctx)
    out = await check("issue_refund", _refund("O-1044", 100), ctx)
    assert out is not None and out["error"] == "daily_refund_limit_reached"
    assert set(out) == {"error", "message"} and "2" not in out["message"]


async def test_issue_refund_is_rechecked_against_current_state(db: Database) -> None:
    """A check that passed at proposal time fails at execution when the money was refunded since."""
    store = await make_store(db)
    ctx = make_ctx(store)
    assert await check("issue_refund", _refund(amount=18900), ctx) is None
    await call("issue_refund", _refund(amount=10000), ctx)
    out = await check("issue_refund", _refund(amount=18900), ctx)
    assert out is not None
    assert (out["error"], out["refundable_minor"]) == ("amount_exceeds_refundable", 8900)


async def test_issue_refund_backend_refusal_keeps_code_and_details(db: Database) -> None:
    """If the handler runs without the check, the store's refusal is the same tool error."""
    store = await make_store(db)
    out = await handler_only("issue_refund", _refund(amount=20000), make_ctx(store))
    assert (out["error"], out["refundable_minor"]) == ("amount_exceeds_refundable", 18900)
    theirs = await handler_only("issue_refund", _refund("O-2001", 100), make_ctx(store))
    assert theirs["error"] == "not_found"


async def test_issue_refund_return_already_refunded_is_not_eligible(db: Database) -> None:
    """A return whose refund was already given cannot be refunded again."""
    data = dataset()
    data["returns"][0]["status"] = "refunded"
    store = await make_store(db, data)
    out = await check("issue_refund", _refund(amount=100, return_id="RT-31"), make_ctx(store))
    assert out is not None and (out["error"], out["status"]) == ("return_not_eligible", "refunded")


# -- retry_payment -------------------------------------------------------------------------


async def test_retry_payment_captures_a_failed_payment_once(db: Database) -> None:
    """A pending order with a failed payment is charged again, then counts as paid."""
    store = await make_store(db)
    ctx = make_ctx(store)
    out = await call("retry_payment", {"order_id": "O-1045"}, ctx)
    assert (out["status"], out["amount"], out["order_id"]) == ("captured", "30.00 USD", "O-1045")
    assert (await call("get_order", {"order_id": "O-1045"}, ctx))["status"] == "PAID"
    again = await check("retry_payment", {"order_id": "O-1045"}, ctx)
    assert again is not None and again["error"] == "nothing_to_retry"


@pytest.mark.parametrize(
    ("oid", "error"),
    [("O-1043", "nothing_to_retry"), ("O-1048", "nothing_to_retry"), ("O-2002", "not_found")],
)
async def test_retry_payment_check_failures(db: Database, oid: str, error: str) -> None:
    """No failed payment, a cancelled order, or another customer's order: refused."""
    store = await make_store(db)
    out = await check("retry_payment", {"order_id": oid}, make_ctx(store))
    assert out is not None and out["error"] == error
    assert (await handler_only("retry_payment", {"order_id": oid}, make_ctx(store)))["error"] == error


async def test_writes_use_the_gatekeepers_idempotency_key(db: Database) -> None:
    """The handler passes ctx.idempotency_key to the store, so the ledger can look it up."""
    store = await make_store(db)
    ctx = dataclasses.replace(make_ctx(store), idempotency_key="ledger:abc")
    out = await REGISTRY.tools["issue_refund"].handler(_refund(amount=700), ctx)
    record = await store.lookup_write("ledger:abc")
    assert record is not None and record.operation == "issue_refund"
    assert record.result["id"] == out["refund_id"]
    assert await store.lookup_write("refund:O-1042:700:USD:-") is None
