"""Write the bundled demo dataset ``sandbox/data/demo.json`` (deterministic: ``random.Random(7)``).

Run ``python -m sandbox.data.make_demo`` after changing it. The fixtures other tests
rely on (C-7 / O-1042, the injection notes, the double charge, …) are placed by
hand in :func:`fixtures` and listed in ``sandbox/data/README.md``; the rest of the
shop is generated around them by :func:`fillers`. The output is validated
before it is written.
"""

from __future__ import annotations

import json
import random
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from sandbox.data.demo_catalog import (
    BENIGN_NOTES,
    FIRST,
    INJECTED_NAME,
    LAST,
    NOTES,
    PLACES,
    PRODUCTS,
)
from sandbox.data.demo_knowledge import DOCS
from sandbox.data.demo_shop import AS_OF, DAY, HOUR, Shop, ascii_of, iso
from sandbox.dataset import DEMO_DATASET_PATH, parse_dataset

STAFF = [
    {"id": "S-1", "slack_user_id": "U01PRIYA", "name": "Priya Raman", "role": "rep"},
    {"id": "S-2", "slack_user_id": "U02TOMAS", "name": "Tomás Ortega", "role": "rep"},
    {"id": "S-3", "slack_user_id": "U03GRACE", "name": "Grace Liu", "role": "supervisor"},
    {"id": "S-4", "slack_user_id": "U04OWEN", "name": "Owen Baptiste", "role": "supervisor"},
]
RETURN_REASONS = ["wrong_size", "damaged", "changed_mind", "not_as_described"]
FILLER_STATUSES = ["DELIVERED"] * 50 + ["SHIPPED"] * 12 + ["PAID"] * 12 + ["PENDING"] * 10 + ["CANCELLED"] * 16
PLACED_DAYS_AGO = {"SHIPPED": (1, 5), "PAID": (0.1, 2), "PENDING": (0.05, 3), "CANCELLED": (1, 120)}


def _fixture_customers(shop: Shop) -> None:
    shop.customer("C-7", "Maya Chen", "US", slack="U07MAYA", email="maya.chen@example.com")
    shop.customer("C-8", "Jonas Weber", "DE", slack="U08JONAS", email="jonas.weber@example.de")
    shop.customer("C-9", "Aisha Bello", "US", slack="U09AISHA")
    shop.customer("C-10", "Lucas Moreau", "FR")
    shop.customer("C-11", "Hannah Okafor", "GB", phone=False)
    shop.customer("C-12", "Viktor Sands", "US", slack="U12VIKTOR")
    shop.customer("C-13", INJECTED_NAME, "US", email="tom.rivers@example.com")
    shop.customer("C-14", "Priscilla Nguyen", "CA")
    shop.customer("C-15", "Derek Hollis", "US")
    shop.customer("C-16", "Eleanor Whitfield", "US", slack="U16ELEANOR")


def fixtures(shop: Shop) -> None:
    """The hand-placed customers and orders other tests and demos rely on (see README.md)."""
    a = AS_OF
    _fixture_customers(shop)
    o = shop.order("O-1042", "C-7", "DELIVERED", a - 9 * DAY, [("BOOT-RDG-W8", 1)], delivered=a - 5 * DAY)
    shop.message(o, "order_shipped", a - 8 * DAY)
    shop.message(o, "order_delivered", a - 5 * DAY)
    shop.order("O-1043", "C-7", "DELIVERED", a - 70 * DAY, [("SOCK-MER-3", 2)], delivered=a - 64 * DAY)
    lines = [("BTL-INS-750", 1), ("HAT-SUN", 1)]
    shop.order("O-1044", "C-7", "PAID", a - 20 * HOUR, lines, notes=NOTES["O-1044"])
    shop.order("O-1045", "C-7", "SHIPPED", a - 3 * DAY, [("LAMP-HD", 1), ("MUG-ENM", 2)])
    shop.order("O-1050", "C-8", "DELIVERED", a - 20 * DAY, [("JKT-DWN-L", 1)], delivered=a - 14 * DAY)
    shop.order("O-1051", "C-8", "PAID", a - 30 * HOUR, [("BTL-INS-750", 1)])
    shop.order("O-1052", "C-8", "SHIPPED", a - 2 * DAY, [("POLE-TRK", 1)])
    o = shop.order("O-1053", "C-8", "DELIVERED", a - 55 * DAY, [("FLC-MID-S", 1)], delivered=a - 50 * DAY)
    shop.return_(o, "rejected", a - 45 * DAY, "changed_mind")
    lines = [("PACK-DAY", 1), ("BTL-INS-750", 1)]
    shop.order("O-1060", "C-9", "SHIPPED", a - 2 * DAY, lines, pay="double")
    o = shop.order("O-1061", "C-9", "DELIVERED", a - 25 * DAY, [("TEE-MER-M", 2)], delivered=a - 21 * DAY)
    shop.return_(o, "received", a - 10 * DAY, "wrong_size")
    o = shop.order("O-1065", "C-10", "PENDING", a - 26 * HOUR, [("STV-CMP", 1)], pay="failed")
    shop.message(o, "payment_failed", a - 25 * HOUR)
    lines = [("CHR-CMP", 1), ("MUG-ENM", 1)]
    o = shop.order("O-1066", "C-10", "DELIVERED", a - 40 * DAY, lines, delivered=a - 35 * DAY)
    shop.return_(o, "refunded", a - 30 * DAY, "damaged", [("CHR-CMP", 1)])
    lines = [("GLV-WNT-M", 1), ("HAT-SUN", 1)]
    o = shop.order("O-1070", "C-11", "DELIVERED", a - 16 * DAY, lines, delivered=a - 12 * DAY)
    shop.return_(o, "requested", a - 2 * DAY, "not_as_described", [("GLV-WNT-M", 1)])
    shop.order(
        "O-1077",
        "C-12",
        "DELIVERED",
        a - 12 * DAY,
        [("BTL-INS-750", 1)],
        delivered=a - 8 * DAY,
        notes=NOTES["O-1077"],
    )
    shop.order("O-1081", "C-13", "DELIVERED", a - 15 * DAY, [("BINO-10", 1)], delivered=a - 11 * DAY)
    shop.order("O-1083", "C-14", "PAID", a - 10 * HOUR, [("SHRT-TRL-32", 1)], notes=NOTES["O-1083"])
    shop.order("O-1085", "C-15", "SHIPPED", a - 2 * DAY, [("PAD-SLP", 1)], notes=NOTES["O-1085"])
    shop.order("O-1086", "C-15", "CANCELLED", a - 33 * DAY, [("COOL-25", 1)])
    lines = [("ESP-PRO", 1), ("GRND-BURR", 1)]
    shop.order(
        "O-1090",
        "C-16",
        "DELIVERED",
        a - 8 * DAY,
        lines,
        delivered=a - 3 * DAY,
        notes=NOTES["O-1090"],
    )
    o = shop.order("O-1091", "C-16", "DELIVERED", a - 30 * DAY, [("TNT-2P", 1)], delivered=a - 26 * DAY)
    shop.refund(o, 5000, a - 20 * DAY, "price_adjustment")


def _filler_customers(shop: Shop) -> list[str]:
    rng = shop.rng
    countries = list(PLACES)
    weights = [PLACES[c].weight for c in countries]
    ids = [f"C-{n}" for n in (*range(1, 7), *range(17, 61))]
    for cid in ids:
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        slack = f"U{cid[2:]}{ascii_of(name.split()[0]).upper()[:6]}" if rng.random() < 0.1 else None
        country = rng.choices(countries, weights)[0]
        shop.customer(cid, name, country, phone=rng.random() > 0.15, slack=slack)
    return ids


def _delivered_filler(shop: Shop, oid: str, cid: str, lines: Any, note: str | None) -> None:
    rng, a = shop.rng, AS_OF
    placed = (a - timedelta(days=rng.uniform(6, 150))).replace(microsecond=0)
    delivered = (placed + timedelta(days=rng.uniform(2, 5))).replace(microsecond=0)
    pay = "retried" if rng.random() < 0.05 else "captured"
    o = shop.order(oid, cid, "DELIVERED", placed, lines, delivered=delivered, pay=pay, notes=note)
    roll = rng.random()
    if roll < 0.18:
        state = rng.choice(["requested", "received", "refunded", "refunded", "rejected"])
        when = delivered + timedelta(days=rng.uniform(1, 4))
        shop.return_(o, state, when, rng.choice(RETURN_REASONS))
    elif roll < 0.28:
        when = delivered + timedelta(days=rng.uniform(1, 5))
        reason = rng.choice(["damaged", "late_delivery", "price_adjustment"])
        shop.refund(o, o["total_minor"] // 5, when, reason)
    if rng.random() < 0.2:
        shop.message(o, "order_delivered", delivered)


def fillers(shop: Shop, taken: set[str]) -> None:
    """Generated customers and orders (O-1001..O-1260 not taken by fixtures) around the fixtures."""
    rng = shop.rng
    ids = _filler_customers(shop)
    for n in range(1001, 1261):
        oid = f"O-{n}"
        if oid in taken:
            continue
        status = rng.choice(FILLER_STATUSES)
        products = rng.sample(PRODUCTS[:22], rng.choice([1, 1, 2, 3]))
        lines = [(p[0], rng.choice([1, 1, 1, 2])) for p in products]
        note = rng.choice(BENIGN_NOTES) if rng.random() < 0.1 else None
        cid = rng.choice(ids)
        if status == "DELIVERED":
            _delivered_filler(shop, oid, cid, lines, note)
            continue
        placed = (AS_OF - timedelta(days=rng.uniform(*PLACED_DAYS_AGO[status]))).replace(microsecond=0)
        pay = "auto"
        if status == "PENDING" and rng.random() < 0.5:
            pay = "failed"
        if status == "CANCELLED" and rng.random() < 0.5:
            pay = "captured"
        o = shop.order(oid, cid, status, placed, lines, pay=pay, notes=note)
        if status == "CANCELLED" and pay == "captured":
            shop.refund(o, o["total_minor"], placed + 6 * HOUR, "customer_request")


def build() -> dict[str, Any]:
    """The whole demo dataset as JSON-ready data."""
    shop = Shop(random.Random(7))
    fixtures(shop)
    fillers(shop, {o["id"] for o in shop.orders})

    def number(record: dict[str, Any]) -> int:
        return int("".join(ch for ch in record["id"] if ch.isdigit()))

    knowledge = [
        {
            "id": d,
            "version": v,
            "kind": k,
            "title": t,
            "sections": [{"id": s, "text": x} for s, x in secs],
        }
        for d, v, k, t, secs in DOCS
    ]
    return {
        "as_of": iso(AS_OF),
        "customers": sorted(shop.customers, key=number),
        "orders": sorted(shop.orders, key=number),
        "payments": shop.payments,
        "refunds": shop.refunds,
        "returns": shop.returns,
        "invoices": shop.invoices,
        "knowledge": knowledge,
        "staff": STAFF,
        "outbox": shop.outbox,
    }


def main(argv: list[str] | None = None) -> int:
    """Write the dataset (to ``argv[0]`` or the bundled path) after validating it."""
    out = Path(argv[0]) if argv else DEMO_DATASET_PATH
    data = build()
    parse_dataset(data)
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    counts = ", ".join(f"{len(data[k])} {k}" for k in ("customers", "orders", "payments", "refunds", "returns"))
    print(f"wrote {out}: {counts}, {len(data['knowledge'])} knowledge docs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
