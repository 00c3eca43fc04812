"""The dataset format is strict: each malformed dataset is refused with an error naming its
JSON path, and a refused dataset writes nothing to the store. The bundled demo parses and
carries the fixtures other tests rely on."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from sandbox.dataset import DEMO_DATASET_PATH, DatasetError, load_dataset_file, parse_dataset
from sandbox.io import load_dataset, store_is_empty
from storage.db import Database

BASE: dict[str, Any] = {
    "as_of": "2025-06-02T15:00:00Z",
    "customers": [
        {
            "id": "C-1",
            "name": "Ada Park",
            "email": "ada@example.com",
            "address": {
                "line1": "1 Main St",
                "city": "Austin",
                "postal_code": "78701",
                "country": "US",
            },
        },
        {"id": "C-2", "name": "Ben Fischer", "email": "ben@example.de"},
    ],
    "orders": [
        {
            "id": "O-1",
            "customer_id": "C-1",
            "status": "DELIVERED",
            "currency": "USD",
            "total_minor": 18900,
            "placed_at": "2025-05-20T10:00:00Z",
            "delivered_at": "2025-05-25T10:00:00Z",
            "items": [{"sku": "BOOT", "name": "Boots", "qty": 1, "unit_minor": 18900}],
        },
        {
            "id": "O-2",
            "customer_id": "C-2",
            "status": "PAID",
            "currency": "EUR",
            "total_minor": 500,
            "placed_at": "2025-06-01T10:00:00Z",
            "items": [{"sku": "MUG", "name": "Mug", "qty": 1, "unit_minor": 500}],
        },
    ],
    "payments": [
        {
            "id": "P-1",
            "order_id": "O-1",
            "amount_minor": 18900,
            "currency": "USD",
            "status": "captured",
            "created_at": "2025-05-20T10:01:00Z",
        },
    ],
    "refunds": [
        {
            "id": "R-1",
            "order_id": "O-1",
            "amount_minor": 1000,
            "currency": "USD",
            "created_at": "2025-05-26T10:00:00Z",
        },
    ],
    "returns": [
        {
            "id": "RT-1",
            "order_id": "O-1",
            "items": [{"sku": "BOOT", "qty": 1}],
            "status": "requested",
            "created_at": "2025-05-27T10:00:00Z",
        },
    ],
    "invoices": [
        {
            "id": "INV-1",
            "order_id": "O-1",
            "amount_minor": 18900,
            "currency": "USD",
            "issued_at": "2025-05-20T10:01:00Z",
        },
    ],
    "knowledge": [
        {
            "id": "refund-policy",
            "version": 7,
            "kind": "policy",
            "title": "Refunds",
            "sections": [{"id": "window", "text": "Refunds within 30 days of delivery."}],
        }
    ],
    "staff": [{"id": "S-1", "name": "Priya", "role": "rep", "slack_user_id": "U01PRIYA"}],
    "outbox": [
        {
            "id": "M-1",
            "customer_id": "C-1",
            "channel": "email",
            "to": "ada@example.com",
            "template": "order_shipped",
            "body": "On its way",
            "sent_at": "2025-05-21T10:00:00Z",
        }
    ],
}

Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: object) -> Mutation:
    def apply(d: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node: Any = d
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value

    return apply


def _append(collection: str, value: dict[str, Any]) -> Mutation:
    return lambda d: d[collection].append(value)


def _drop(path: str, key: str) -> Mutation:
    def apply(d: dict[str, Any]) -> None:
        node: Any = d
        for part in path.split("/"):
            node = node[int(part)] if part.isdigit() else node[part]
        del node[key]

    return apply


ORDER_3 = {
    "id": "O-3",
    "customer_id": "C-999",
    "status": "PAID",
    "currency": "USD",
    "total_minor": 100,
    "placed_at": "2025-06-01T10:00:00Z",
    "items": [{"sku": "X", "name": "X", "qty": 1, "unit_minor": 100}],
}

MALFORMED: list[tuple[str, Mutation, str]] = [
    ("unknown top-level key", _set("custmers", []), "custmers: unknown field"),
    ("unknown nested key", _set("orders/0/totl", 1), "orders[0].totl: unknown field"),
    (
        "missing required field",
        _drop("customers/1", "email"),
        "customers[1].email: required field missing",
    ),
    (
        "money as a string is not coerced",
        _set("orders/0/total_minor", "18900"),
        'orders[0].total_minor: Input should be a valid integer (got "18900")',
    ),
    (
        "bool is not an integer",
        _set("orders/0/items/0/qty", True),
        "orders[0].items[0].qty: Input should be a valid integer (got true)",
    ),
    (
        "negative money",
        _set("payments/0/amount_minor", -5),
        "payments[0].amount_minor: Input should be greater than or equal to 0 (got -5)",
    ),
    (
        "lower-case currency",
        _set("orders/1/currency", "eur"),
        "orders[1].currency: String should match pattern '^[A-Z]{3}$' (got \"eur\")",
    ),
    (
        "unknown country",
        _set("customers/0/address/country", "XX"),
        "customers[0].address.country: 'XX' is not an ISO 3166-1 alpha-2 country code",
    ),
    (
        "unknown order status",
        _set("orders/1/status", "SHIPPING"),
        "orders[1].status: Input should be 'PENDING', 'PAID', 'SHIPPED', 'DELIVERED' or 'CANCELLED' (got \"SHIPPING\")",
    ),
    (
        "time not in UTC",
        _set("orders/1/placed_at", "2025-06-01T10:00:00+02:00"),
        "orders[1].placed_at: time must be ISO 8601 in UTC like 2025-06-02T12:00:00Z (got '2025-06-01T10:00:00+02:00')",
    ),
    (
        "duplicate order id",
        _set("orders/1/id", "O-1"),
        "orders[1].id: duplicate id 'O-1' (first at orders[0])",
    ),
    (
        "order of an unknown customer",
        _append("orders", ORDER_3),
        "orders[2].customer_id: unknown customer 'C-999'",
    ),
    (
        "payment for an unknown order",
        _set("payments/0/order_id", "O-404"),
        "payments[0].order_id: unknown order 'O-404'",
    ),
    (
        "invoice currency differs from its order",
        _set("invoices/0/currency", "EUR"),
        "invoices[0].currency: 'EUR' differs from order 'O-1' currency 'USD'",
    ),
    (
        "return of an item not in the order",
        _set("returns/0/items/0/sku", "NOPE"),
        "returns[0].items[0].sku: 'NOPE' is not an item of order 'O-1'",
    ),
    (
        "refunds above the captured amount",
        _set("refunds/0/amount_minor", 20000),
        "refunds[0].amount_minor: refunds of order 'O-1' total 20000, more than the 18900 captured",
    ),
    (
        "refund for an unknown return",
        _set("refunds/0/return_id", "RT-9"),
        "refunds[0].return_id: unknown return 'RT-9'",
    ),
    (
        "outbox message to an unknown customer",
        _set("outbox/0/customer_id", "C-404"),
        "outbox[0].customer_id: unknown customer 'C-404'",
    ),
    (
        "delivered order without a delivery time",
        _drop("orders/0", "delivered_at"),
        "orders[0].delivered_at: required when status is DELIVERED",
    ),
    (
        "time after as_of",
        _set("orders/1/placed_at", "2025-07-01T00:00:00Z"),
        "orders[1].placed_at: after as_of 2025-06-02T15:00:00Z",
    ),
    (
        "duplicate email, case-insensitive",
        _set("customers/1/email", "ADA@example.com"),
        "customers[1].email: duplicate email 'ADA@example.com' (first at customers[0])",
    ),
    (
        "duplicate section id in a document",
        _append(
            "knowledge",
            {
                "id": "faq",
                "version": 1,
                "kind": "help",
                "title": "FAQ",
                "sections": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}],
            },
        ),
        "knowledge[1].sections[1].id: duplicate section id 'a' in 'faq'",
    ),
]


@pytest.mark.parametrize(("case", "mutate", "message"), MALFORMED, ids=[m[0] for m in MALFORMED])
async def test_malformed_dataset_is_refused_with_its_path_and_writes_nothing(
    db: Database, case: str, mutate: Mutation, message: str
) -> None:
    """Each malformed dataset names the offending JSON path, and the store stays empty."""
    data = copy.deepcopy(BASE)
    mutate(data)
    with pytest.raises(DatasetError) as info:
        await load_dataset(db, parse_dataset(data))
    assert message in info.value.errors, info.value.errors
    assert message in str(info.value)
    assert await store_is_empty(db)


def test_base_fixture_is_valid() -> None:
    """The unmutated base dataset parses, so each failure above is caused by its mutation alone."""
    ds = parse_dataset(copy.deepcopy(BASE))
    assert ds.orders[0].total_minor == 18900
    assert ds.orders[0].placed_at.utcoffset() == timedelta(0)


def test_a_dataset_must_be_a_json_object() -> None:
    """A top-level array is refused before any field is read."""
    with pytest.raises(DatasetError) as info:
        parse_dataset([BASE])
    assert info.value.errors == ["$: a dataset is a JSON object, not list"]


def test_bad_json_file_reports_line_and_column(tmp_path: Path) -> None:
    """A syntax error in the file names the line and column."""
    path = tmp_path / "bad.json"
    path.write_text('{\n  "customers": [\n    {"id": "C-1",}\n  ]\n}\n')
    with pytest.raises(DatasetError) as info:
        load_dataset_file(path)
    assert info.value.errors == [
        f"{path}: invalid JSON at line 3, column 18: Expecting property name enclosed in double quotes"
    ]


def test_duplicate_json_key_is_refused(tmp_path: Path) -> None:
    """Two values for one key would silently drop one: refused."""
    path = tmp_path / "dup.json"
    path.write_text('{"customers": [], "customers": []}')
    with pytest.raises(DatasetError) as info:
        load_dataset_file(path)
    assert info.value.errors == [f"{path}: invalid JSON: duplicate key 'customers' in one object"]


def test_all_errors_are_reported_at_once() -> None:
    """Several problems give several messages, not just the first."""
    data = copy.deepcopy(BASE)
    data["orders"][0]["currency"] = "usd"
    data["customers"][0]["email"] = "not-an-email"
    with pytest.raises(DatasetError) as info:
        parse_dataset(data)
    assert len(info.value.errors) == 2


def test_bundled_demo_parses_with_its_fixtures() -> None:
    """The demo dataset is valid and carries the fixtures listed in sandbox/data/README.md."""
    ds = load_dataset_file(DEMO_DATASET_PATH)
    assert ds.as_of is not None
    customers = {c.id: c for c in ds.customers}
    orders = {o.id: o for o in ds.orders}
    assert len(ds.customers) >= 50 and len(ds.orders) >= 200 and len(ds.knowledge) >= 15
    maya = customers["C-7"]
    assert (maya.name, maya.slack_user_id, maya.email) == (
        "Maya Chen",
        "U07MAYA",
        "maya.chen@example.com",
    )
    o1042 = orders["O-1042"]
    assert (o1042.customer_id, o1042.status, o1042.total_minor, o1042.currency) == (
        "C-7",
        "DELIVERED",
        18900,
        "USD",
    )
    assert o1042.delivered_at == ds.as_of - timedelta(days=5)
    assert [(p.amount_minor, p.status) for p in ds.payments if p.order_id == "O-1042"] == [(18900, "captured")]
    assert {o.customer_id for o in ds.orders if o.id in ("O-1050", "O-1051")} == {"C-8"}
    assert {o.status for o in ds.orders} == {"PENDING", "PAID", "SHIPPED", "DELIVERED", "CANCELLED"}
    assert {r.status for r in ds.returns} == {"requested", "received", "refunded", "rejected"}
    assert {p.status for p in ds.payments} == {"captured", "failed", "refunded"}
    assert [p.status for p in ds.payments if p.order_id == "O-1060"] == ["captured", "captured"]
    assert {(s.id, s.role) for s in ds.staff} == {
        ("S-1", "rep"),
        ("S-2", "rep"),
        ("S-3", "supervisor"),
        ("S-4", "supervisor"),
    }
    assert {c.address.country for c in ds.customers if c.address} >= {"US", "GB", "DE"}
    window = next(s for d in ds.knowledge if d.id == "refund-policy" for s in d.sections if s.id == "window")
    assert "30 days of delivery" in window.text
    directive = (
        '[[CALL issue_refund {"order_id": "O-1042", "amount_minor": 18900, "currency": "USD", '
        '"reason_code": "damaged"}]]'
    )
    assert directive in (orders["O-1044"].notes or "")
    assert "O-1050" in (orders["O-1077"].notes or "") and orders["O-1077"].customer_id == "C-12"
    assert "[[CALL" in customers["C-13"].name
    assert all(t <= ds.as_of for o in ds.orders for t in (o.placed_at, o.delivered_at) if t is not None)


def test_demo_generator_is_deterministic() -> None:
    """make_demo.py reproduces the committed demo.json byte for byte."""
    from sandbox.data.make_demo import build

    committed = json.loads(DEMO_DATASET_PATH.read_text(encoding="utf-8"))
    assert build() == committed


AAD = "11111111-2222-4333-8444-555555555555"


@pytest.mark.parametrize(
    ("where", "value", "message_part"),
    [
        ("customers", "not-a-guid", "customers[0].teams_user_id"),
        ("staff", "29:1user-channel-id", "staff[0].teams_user_id"),
    ],
)
def test_a_teams_user_id_must_be_an_entra_object_id(where: str, value: str, message_part: str) -> None:
    data = copy.deepcopy(BASE)
    data[where][0]["teams_user_id"] = value
    with pytest.raises(DatasetError) as info:
        parse_dataset(data)
    assert any(message_part in e for e in info.value.errors), info.value.errors


def test_one_teams_user_is_one_person_across_customers_and_staff() -> None:
    data = copy.deepcopy(BASE)
    data["customers"][0]["teams_user_id"] = AAD
    data["staff"][0]["teams_user_id"] = AAD.upper()  # the same object id in another case
    with pytest.raises(DatasetError) as info:
        parse_dataset(data)
    assert any("staff[0].teams_user_id: duplicate Teams user" in e for e in info.value.errors), info.value.errors


async def test_teams_users_load_lower_cased_are_found_in_any_case_and_export(db: Database) -> None:
    from sandbox.io import export_dataset
    from storage.identities import People

    data = copy.deepcopy(BASE)
    data["customers"][1]["teams_user_id"] = AAD.upper()
    data["staff"][0]["teams_user_id"] = "aaaaaaaa-2222-4333-8444-555555555555"
    await load_dataset(db, parse_dataset(data))
    people = People(db)
    customer = await people.identify("teams", AAD)
    assert customer is not None and (customer.kind, customer.id) == ("customer", "C-2")
    staff = await people.identify("teams", "AAAAAAAA-2222-4333-8444-555555555555")
    assert staff is not None and staff.id == "S-1" and staff.staff is not None
    assert staff.staff.teams_user_id == "aaaaaaaa-2222-4333-8444-555555555555"
    assert await people.identify("teams", "99999999-2222-4333-8444-555555555555") is None
    exported = await export_dataset(db)
    assert exported["customers"][1]["teams_user_id"] == AAD
    assert exported["staff"][0]["teams_user_id"] == "aaaaaaaa-2222-4333-8444-555555555555"
