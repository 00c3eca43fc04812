"""The returns group against the real sandbox store: reads scoped to the bound
customer, and create_return's rules (delivered, window, items and quantities)."""

from __future__ import annotations

from typing import Any

import pytest

from storage.db import Database
from tests.catalogue_harness import call, check, dataset, handler_only, make_ctx, make_store
from tools.context import Rules


def _ret(items: list[dict[str, Any]], oid: str = "O-1042") -> dict[str, Any]:
    return {"order_id": oid, "items": items, "reason_code": "damaged"}


async def test_get_return_shows_status_and_items(db: Database) -> None:
    """A return of the bound customer, trimmed."""
    store = await make_store(db)
    out = await call("get_return", {"return_id": "RT-31"}, make_ctx(store))
    assert out == {
        "return_id": "RT-31",
        "order_id": "O-1042",
        "status": "requested",
        "reason_code": "damaged",
        "items": [{"sku": "MUG-1", "qty": 1}],
        "created_at": "2025-06-06T10:00:00Z",
    }


async def test_list_returns_only_the_bound_customers(db: Database) -> None:
    """Another customer's return never appears in the list."""
    store = await make_store(db)
    out = await call("list_returns", {}, make_ctx(store))
    assert [r["return_id"] for r in out["returns"]] == ["RT-31"] and out["count"] == 1


async def test_create_return_for_a_delivered_item(db: Database) -> None:
    """A delivered order inside the window gets a requested return; a replay is the same return."""
    store = await make_store(db)
    ctx = make_ctx(store)
    args = _ret([{"sku": "LAMP-9", "qty": 1}])
    out = await call("create_return", args, ctx)
    assert (out["status"], out["order_id"], out["items"]) == (
        "requested",
        "O-1042",
        [{"sku": "LAMP-9", "qty": 1}],
    )
    assert out["return_id"].startswith("RT-")
    assert (await call("get_return", {"return_id": out["return_id"]}, ctx))["status"] == "requested"
    assert (await handler_only("create_return", args, ctx))["return_id"] == out["return_id"]


async def test_create_return_merges_repeated_skus(db: Database) -> None:
    """The same SKU named twice is one line with the summed quantity, checked as a whole."""
    store = await make_store(db, dataset(returns=[]))
    ctx = make_ctx(store)
    twice = _ret([{"sku": "MUG-1", "qty": 1}, {"sku": "MUG-1", "qty": 1}])
    out = await call("create_return", twice, ctx)
    assert out["items"] == [{"sku": "MUG-1", "qty": 2}]
    again = await check("create_return", _ret([{"sku": "MUG-1", "qty": 1}]), ctx)
    assert again is not None
    assert (again["error"], again["sku"], again["returnable_qty"]) == ("invalid_items", "MUG-1", 0)


@pytest.mark.parametrize(
    ("args", "error", "details"),
    [
        (_ret([{"sku": "MUG-1", "qty": 1}], "O-1043"), "order_not_delivered", {"status": "PAID"}),
        (
            _ret([{"sku": "MUG-1", "qty": 1}], "O-1046"),
            "outside_return_window",
            {"delivered_at": "2025-03-04T09:00:00Z"},
        ),
        (
            _ret([{"sku": "SOFA-1", "qty": 1}]),
            "invalid_items",
            {"sku": "SOFA-1", "returnable_qty": 0},
        ),
        (
            _ret([{"sku": "MUG-1", "qty": 2}]),
            "invalid_items",
            {"sku": "MUG-1", "qty": 2, "returnable_qty": 1},
        ),
        (_ret([{"sku": "MUG-1", "qty": 1}], "O-2001"), "not_found", {"order_id": "O-2001"}),
    ],
)
async def test_create_return_check_failures(
    db: Database, args: dict[str, Any], error: str, details: dict[str, Any]
) -> None:
    """Each business rule refuses with a stable code and its facts."""
    store = await make_store(db)
    out = await check("create_return", args, make_ctx(store))
    assert out is not None and out["error"] == error
    assert details.items() <= out.items()


async def test_create_return_window_comes_from_the_rules(db: Database) -> None:
    """The window length is the policy's number, not a constant in the tool."""
    store = await make_store(db)
    args = _ret([{"sku": "LAMP-9", "qty": 1}])
    assert await check("create_return", args, make_ctx(store)) is None
    short = await check("create_return", args, make_ctx(store, rules=Rules(return_window_days=3)))
    assert short is not None and short["error"] == "outside_return_window"


async def test_create_return_backend_refusal_matches_the_check(db: Database) -> None:
    """Without the check, the store refuses with the same code and details."""
    store = await make_store(db)
    args = _ret([{"sku": "MUG-1", "qty": 2}])
    by_check = await check("create_return", args, make_ctx(store))
    by_store = await handler_only("create_return", args, make_ctx(store))
    assert by_check is not None
    assert (by_store["error"], by_store["sku"], by_store["returnable_qty"]) == (
        by_check["error"],
        by_check["sku"],
        by_check["returnable_qty"],
    )
