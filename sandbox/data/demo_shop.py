"""The demo shop builder used by ``sandbox/data/make_demo.py``.

:class:`Shop` accumulates dataset records and keeps the money consistent: each
captured order gets an invoice, payment ids follow their order (``P-1042``,
``P-1060-2``), and a refund that covers the capture marks the payments refunded.
"""

from __future__ import annotations

import random
import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Any

from sandbox.data.demo_catalog import (
    AREA_CODES,
    EMAIL_DOMAINS,
    FX,
    PLACES,
    PRODUCTS,
    STREETS,
)

AS_OF = datetime(2025, 6, 2, 15, 0, tzinfo=UTC)
DAY, HOUR, MIN = timedelta(days=1), timedelta(hours=1), timedelta(minutes=1)
PRODUCT = {sku: (name, usd) for sku, name, usd in PRODUCTS}
Obj = dict[str, Any]
Lines = list[tuple[str, int]]

MESSAGES = {
    "order_shipped": "Good news: your Fernway order {id} is on its way.",
    "order_delivered": "Your Fernway order {id} was delivered. Enjoy!",
    "payment_failed": "We could not take payment for order {id}. Please update your card.",
}


def iso(t: datetime) -> str:
    """ISO 8601 UTC with a ``Z``, to the second."""
    return t.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def ascii_of(s: str) -> str:
    """Lower-case ASCII letters of ``s`` (for email local parts)."""
    return "".join(c for c in unicodedata.normalize("NFKD", s) if c.isascii() and c.isalpha()).lower()


class Shop:
    """Accumulates the dataset; every money record stays consistent with its order."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.customers: list[Obj] = []
        self.orders: list[Obj] = []
        self.payments: list[Obj] = []
        self.refunds: list[Obj] = []
        self.returns: list[Obj] = []
        self.invoices: list[Obj] = []
        self.outbox: list[Obj] = []
        self.country: dict[str, str] = {}
        self._emails: set[str] = set()

    def price(self, sku: str, currency: str) -> int:
        """The unit price of ``sku`` in ``currency``, in minor units."""
        usd = PRODUCT[sku][1]
        return usd if currency == "USD" else int(round(usd * FX[currency], -2)) - 1

    def address(self, country: str) -> Obj:
        """A plausible address in ``country``."""
        place, rng = PLACES[country], self.rng
        city, region, postal = rng.choice(place.cities)
        street = f"{rng.choice(STREETS)} {place.street_suffix}"
        number = rng.randint(2, 180)
        line1 = f"{street} {number}" if country in ("DE", "NL") else f"{number * 5} {street}"
        addr: Obj = {"line1": line1, "city": city, "postal_code": postal, "country": country}
        if rng.random() < 0.2:
            addr["line2"] = f"Apt {rng.randint(1, 40)}"
        if region:
            addr["region"] = region
        return addr

    def _email(self, name: str) -> str:
        first, _, last = name.partition(" ")
        email = f"{ascii_of(first)}.{ascii_of(last)}@{self.rng.choice(EMAIL_DOMAINS)}"
        while email.lower() in self._emails:
            email = email.replace("@", f"{self.rng.randint(2, 99)}@", 1)
        return email

    def customer(
        self,
        cid: str,
        name: str,
        country: str,
        *,
        phone: bool = True,
        slack: str | None = None,
        email: str | None = None,
    ) -> None:
        """Add a customer to the dataset being built."""
        rng = self.rng
        c: Obj = {"id": cid, "name": name, "email": email or self._email(name)}
        self._emails.add(c["email"].lower())
        if phone:
            line = len(self.customers) + 1
            c["phone"] = PLACES[country].phone.format(a=rng.choice(AREA_CODES), b=line)
        c["address"] = self.address(country)
        if slack:
            c["slack_user_id"] = slack
        age = timedelta(days=rng.randint(200, 1100), seconds=rng.randint(0, 86399))
        c["created_at"] = iso(AS_OF - age)
        c["payment_methods"] = [
            {
                "id": f"pm_{cid.lower().replace('-', '')}_{k + 1}",
                "brand": rng.choice(["visa", "mastercard", "amex"]),
                "last4": f"{rng.randint(0, 9999):04d}",
                "exp_month": rng.randint(1, 12),
                "exp_year": rng.randint(2027, 2031),
            }
            for k in range(rng.choice([0, 1, 1, 1, 2]))
        ]
        self.customers.append(c)
        self.country[cid] = country

    def order(
        self,
        oid: str,
        cid: str,
        status: str,
        placed: datetime,
        lines: Lines,
        *,
        delivered: datetime | None = None,
        pay: str = "auto",
        notes: str | None = None,
    ) -> Obj:
        """Add an order (with its items and payment) to the dataset being built."""
        currency = PLACES[self.country[cid]].currency
        items: list[Obj] = [
            {"sku": s, "name": PRODUCT[s][0], "qty": q, "unit_minor": self.price(s, currency)} for s, q in lines
        ]
        o: Obj = {
            "id": oid,
            "customer_id": cid,
            "status": status,
            "currency": currency,
            "total_minor": sum(i["qty"] * i["unit_minor"] for i in items),
            "placed_at": iso(placed),
            "items": items,
            "shipping_address": self.address(self.country[cid]),
        }
        if delivered is not None:
            o["delivered_at"] = iso(delivered)
        if notes:
            o["notes"] = notes
        self.orders.append(o)
        if pay == "auto":
            pay = "none" if status in ("PENDING", "CANCELLED") else "captured"
        self._pay(o, pay, placed)
        return o

    def _money(self, o: Obj, rid: str, amount: int, **fields: object) -> Obj:
        return {
            "id": rid,
            "order_id": o["id"],
            "amount_minor": amount,
            "currency": o["currency"],
            **fields,
        }

    def _payment(self, o: Obj, status: str, at: datetime) -> None:
        n = sum(1 for p in self.payments if p["order_id"] == o["id"])
        pid = f"P-{o['id'][2:]}" + (f"-{n + 1}" if n else "")
        self.payments.append(self._money(o, pid, o["total_minor"], status=status, created_at=iso(at)))

    def _pay(self, o: Obj, mode: str, placed: datetime) -> None:
        """Mode: none, failed, captured, retried (failed then captured) or double."""
        if mode in ("failed", "retried"):
            self._payment(o, "failed", placed + MIN)
        if mode in ("none", "failed"):
            return
        at = placed + (HOUR if mode == "retried" else MIN)
        self._payment(o, "captured", at)
        if mode == "double":
            self._payment(o, "captured", at + 3 * MIN)
        self.invoices.append(self._money(o, f"INV-{o['id'][2:]}", o["total_minor"], issued_at=iso(at)))

    def refund(self, o: Obj, amount: int, at: datetime, reason: str, return_id: str | None = None) -> None:
        """Add a refund of ``amount`` on order ``o``."""
        r = self._money(
            o,
            f"R-{3001 + len(self.refunds)}",
            amount,
            created_at=iso(min(at, AS_OF - HOUR)),
            reason_code=reason,
        )
        if return_id:
            r["return_id"] = return_id
        self.refunds.append(r)
        paid = [p for p in self.payments if p["order_id"] == o["id"] and p["status"] != "failed"]
        refunded = sum(x["amount_minor"] for x in self.refunds if x["order_id"] == o["id"])
        if refunded >= sum(p["amount_minor"] for p in paid):
            for p in paid:
                p["status"] = "refunded"

    def return_(self, o: Obj, status: str, at: datetime, reason: str, lines: Lines | None = None) -> None:
        """Add a return on order ``o`` (all its lines unless ``lines`` names some)."""
        rid = f"RT-{2001 + len(self.returns)}"
        lines = lines or [(o["items"][0]["sku"], 1)]
        self.returns.append(
            {
                "id": rid,
                "order_id": o["id"],
                "items": [{"sku": s, "qty": q} for s, q in lines],
                "status": status,
                "created_at": iso(at),
                "reason_code": reason,
            }
        )
        if status == "refunded":
            unit = {i["sku"]: i["unit_minor"] for i in o["items"]}
            self.refund(o, sum(unit[s] * q for s, q in lines), at + 4 * DAY, reason, rid)

    def message(self, o: Obj, template: str, at: datetime) -> None:
        """Add an outbox message about order ``o``."""
        c = next(c for c in self.customers if c["id"] == o["customer_id"])
        self.outbox.append(
            {
                "id": f"M-{1001 + len(self.outbox)}",
                "customer_id": c["id"],
                "channel": "email",
                "to": c["email"],
                "template": template,
                "body": MESSAGES[template].format(id=o["id"]),
                "sent_at": iso(min(at, AS_OF - MIN)),
            }
        )
