"""S1: someone else's order, return or invoice looks exactly like a missing one.

Two real sandbox stores: in one, O-2001/O-2002/RT-77/INV-3001 belong to
another customer; in the other they do not exist. Every tool (check and
handler) must answer the bound customer identically in both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from storage.db import Database
from tests.catalogue_harness import (
    BASE,
    call,
    check,
    dataset,
    handler_only,
    make_ctx,
    make_store,
)
from tests.conftest import make_sqlite

THEIRS = {"O-2001", "O-2002", "RT-77", "INV-3001", "P-7", "P-8"}


def _without_theirs() -> dict[str, Any]:
    return dataset(
        orders=[o for o in BASE["orders"] if o["id"] not in THEIRS],
        payments=[p for p in BASE["payments"] if p["id"] not in THEIRS],
        returns=[r for r in BASE["returns"] if r["id"] not in THEIRS],
        invoices=[i for i in BASE["invoices"] if i["id"] not in THEIRS],
    )


CASES: list[tuple[str, dict[str, Any]]] = [
    ("get_order", {"order_id": "O-2001"}),
    ("track_shipment", {"order_id": "O-2001"}),
    ("list_payments", {"order_id": "O-2001"}),
    ("get_return", {"return_id": "RT-77"}),
    ("get_invoices", {"invoice_id": "INV-3001"}),
    (
        "cancel_order",
        {
            "order_id": "O-2002",
            "reason_code": "customer_request",
            "evidence": ["refund-policy@7#window"],
        },
    ),
    (
        "update_shipping_address",
        {
            "order_id": "O-2002",
            "address": {
                "line1": "1 Evil Way",
                "city": "Nowhere",
                "postal_code": "00000",
                "country": "US",
            },
        },
    ),
    ("create_reorder", {"order_id": "O-2001"}),
    ("send_message", {"channel": "email", "template": "order_update", "order_id": "O-2001"}),
    ("send_payment_link", {"order_id": "O-2002"}),
    (
        "create_return",
        {"order_id": "O-2001", "items": [{"sku": "MUG-1", "qty": 1}], "reason_code": "damaged"},
    ),
    (
        "issue_refund",
        {
            "order_id": "O-2001",
            "amount_minor": 100,
            "currency": "USD",
            "reason_code": "damaged",
            "evidence": ["refund-policy@7#window"],
        },
    ),
    (
        "issue_refund",
        {
            "order_id": "O-1042",
            "amount_minor": 100,
            "currency": "USD",
            "reason_code": "damaged",
            "return_id": "RT-77",
        },
    ),
    ("retry_payment", {"order_id": "O-2002"}),
]


@pytest.mark.parametrize(("name", "args"), CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
async def test_another_customers_record_is_indistinguishable_from_a_missing_one(
    db: Database, tmp_path: Path, name: str, args: dict[str, Any]
) -> None:
    """Check, handler and full call give byte-identical not_found results in both stores."""
    owned_elsewhere = await make_store(db)
    other_db = await make_sqlite(tmp_path / "missing.db")
    try:
        missing = await make_store(other_db, _without_theirs())
        results = []
        for store in (owned_elsewhere, missing):
            ctx = make_ctx(store)
            got = [await call(name, args, ctx), await handler_only(name, args, ctx)]
            if name in (
                "cancel_order",
                "update_shipping_address",
                "create_reorder",
                "send_message",
                "send_payment_link",
                "create_return",
                "issue_refund",
                "retry_payment",
            ):
                got.append(await check(name, args, ctx))
            results.append(got)
        assert results[0] == results[1]
        assert all(r is not None and r["error"] == "not_found" for r in results[0])
    finally:
        await other_db.dispose()


async def test_lists_never_show_another_customers_records(db: Database) -> None:
    """list_orders, list_returns, get_invoices and list_payments stay inside the account."""
    store = await make_store(db)
    ctx = make_ctx(store)
    seen = str([await call(n, {}, ctx) for n in ("list_orders", "list_returns", "get_invoices", "list_payments")])
    assert not [ident for ident in THEIRS if ident in seen]
