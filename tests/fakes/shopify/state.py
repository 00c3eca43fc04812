"""The fake shop's in-memory state: plain mutable records (a test double's store, not domain
objects), money in integer minor units, ids as the numbers inside Shopify GIDs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any


def gid(kind: str, number: int) -> str:
    """``gid://shopify/<kind>/<number>``."""
    return f"gid://shopify/{kind}/{number}"


def parse_gid(value: Any, kind: str) -> int | None:
    """The number in a GID of ``kind``, or None when ``value`` is not one."""
    prefix = f"gid://shopify/{kind}/"
    if not isinstance(value, str) or not value.startswith(prefix):
        return None
    tail = value[len(prefix) :]
    return int(tail) if tail.isdigit() and len(tail) < 19 else None


def iso(t: datetime | None) -> str | None:
    """A DateTime as Shopify writes it (UTC, seconds, ``Z``)."""
    return None if t is None else t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def amount(minor: int) -> str:
    """A Decimal amount as Shopify serialises it: ``189.0``, ``12.5``, ``0.99``."""
    text = f"{Decimal(minor) / 100:.2f}"
    return text[:-1] if text.endswith("0") else text


def money(minor: int, currency: str) -> dict[str, Any]:
    """A ``MoneyBag`` (shop and presentment money are the order's currency in the fake)."""
    v2 = {"amount": amount(minor), "currencyCode": currency}
    return {"shopMoney": v2, "presentmentMoney": dict(v2)}


@dataclass
class Address:
    """A ``MailingAddress``."""

    address1: str
    city: str
    zip: str
    country_code: str
    address2: str | None = None
    province_code: str | None = None
    first_name: str | None = None
    last_name: str | None = None
    phone: str | None = None


@dataclass
class Customer:
    """A shop customer (``gid://shopify/Customer/<id>``)."""

    id: int
    first_name: str
    last_name: str
    email: str
    created_at: datetime
    phone: str | None = None
    address: Address | None = None
    note: str | None = None
    tags: list[str] = field(default_factory=list)
    metafields: dict[tuple[str, str], Metafield] = field(default_factory=dict)


@dataclass
class LineItem:
    """One line of an order."""

    id: int
    sku: str
    title: str
    quantity: int
    unit_minor: int
    refunded_quantity: int = 0


@dataclass
class Transaction:
    """An ``OrderTransaction``: a SALE (charge) or REFUND, successful or not."""

    id: int
    kind: str  # SALE | REFUND | CAPTURE | VOID
    status: str  # SUCCESS | FAILURE | PENDING
    amount_minor: int
    created_at: datetime
    gateway: str = "shopify_payments"
    parent_id: int | None = None


@dataclass
class Refund:
    """A ``Refund`` with its transactions and refunded lines ((line item id, quantity))."""

    id: int
    created_at: datetime
    transactions: list[Transaction]
    note: str | None = None
    lines: list[tuple[int, int]] = field(default_factory=list)
    return_id: int | None = None
    #: True when staff made it in the Shopify admin (not through the API).
    by_staff: bool = False

    @property
    def total_minor(self) -> int:
        """Money actually given back (successful REFUND transactions)."""
        return sum(t.amount_minor for t in self.transactions if t.kind == "REFUND" and t.status == "SUCCESS")


@dataclass
class Fulfillment:
    """A shipment with its tracking."""

    id: int
    created_at: datetime
    display_status: str  # IN_TRANSIT | DELIVERED | ...
    company: str | None
    number: str | None
    url: str | None
    delivered_at: datetime | None = None
    estimated_delivery_at: datetime | None = None


@dataclass
class Return:
    """A ``Return``: lines are (fulfillment line item id = line item id, quantity)."""

    id: int
    name: str
    status: str  # REQUESTED | OPEN | CLOSED | DECLINED | CANCELED
    created_at: datetime
    lines: list[tuple[int, int]]
    reason_note: str = ""


@dataclass
class Metafield:
    """A metafield on an order or customer."""

    id: int
    namespace: str
    key: str
    type: str
    value: str
    created_at: datetime
    updated_at: datetime


@dataclass
class Order:
    """An order (``gid://shopify/Order/<id>``, named ``#<id>``)."""

    id: int
    customer_id: int | None
    currency: str
    created_at: datetime
    line_items: list[LineItem]
    #: The original total (lines plus whatever else the order charged).
    total_minor: int
    email: str | None = None
    shipping_address: Address | None = None
    note: str | None = None
    tags: list[str] = field(default_factory=list)
    cancelled_at: datetime | None = None
    cancel_reason: str | None = None
    closed_at: datetime | None = None
    transactions: list[Transaction] = field(default_factory=list)
    refunds: list[Refund] = field(default_factory=list)
    fulfillments: list[Fulfillment] = field(default_factory=list)
    returns: list[Return] = field(default_factory=list)
    metafields: dict[tuple[str, str], Metafield] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """What people call it: ``#1042``."""
        return f"#{self.id}"

    @property
    def updated_at(self) -> datetime:
        """The latest change the fake knows of (creation, cancellation, refunds, returns, metafields)."""
        times = [self.created_at, *(t for t in (self.cancelled_at, self.closed_at) if t is not None)]
        times += [r.created_at for r in self.refunds] + [r.created_at for r in self.returns]
        times += [m.updated_at for m in self.metafields.values()]
        return max(times)

    @property
    def captured_minor(self) -> int:
        """Money successfully charged."""
        return sum(t.amount_minor for t in self.transactions if t.kind in ("SALE", "CAPTURE") and t.status == "SUCCESS")

    @property
    def refunded_minor(self) -> int:
        """Money successfully given back, over every refund."""
        return sum(r.total_minor for r in self.refunds)

    @property
    def refundable_minor(self) -> int:
        """What may still be refunded: captured less refunded."""
        return max(self.captured_minor - self.refunded_minor, 0)

    @property
    def fulfilled(self) -> bool:
        """True once any shipment exists."""
        return bool(self.fulfillments)

    def financial_status(self) -> str:
        """``displayFinancialStatus`` from the transactions."""
        captured, refunded = self.captured_minor, self.refunded_minor
        if captured == 0:
            return "VOIDED" if self.cancelled_at is not None else "PENDING"
        if refunded >= captured:
            return "REFUNDED"
        return "PARTIALLY_REFUNDED" if refunded else "PAID"


@dataclass
class Page:
    """An Online Store page."""

    id: int
    handle: str
    title: str
    body: str
    created_at: datetime
    updated_at: datetime


@dataclass
class Policy:
    """A legal policy (``shop.shopPolicies``)."""

    id: int
    type: str  # ShopPolicyType
    title: str
    body: str
    created_at: datetime
    updated_at: datetime


@dataclass
class WebhookSubscription:
    """A webhook subscription made through the API."""

    id: int
    topic: str
    uri: str
    created_at: datetime


@dataclass
class Job:
    """An asynchronous job (``orderCancel``): done after ``polls_left`` reads."""

    id: str
    polls_left: int


@dataclass
class DraftOrder:
    """A draft order (a reorder's vehicle)."""

    id: int
    customer_id: int | None
    line_items: list[LineItem]
    currency: str
    created_at: datetime


@dataclass
class Shop:
    """Everything the fake store holds."""

    name: str = "Fernway Outfitters"
    domain: str = "fernway-outfitters.myshopify.com"
    currency: str = "USD"
    email: str = "support@fernway.example"
    customers: dict[int, Customer] = field(default_factory=dict)
    orders: dict[int, Order] = field(default_factory=dict)
    pages: dict[int, Page] = field(default_factory=dict)
    policies: list[Policy] = field(default_factory=list)
    webhooks: dict[int, WebhookSubscription] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    drafts: dict[int, DraftOrder] = field(default_factory=dict)
    scopes: tuple[str, ...] = ()
    next_id: int = 900_000_001

    def new_id(self) -> int:
        """A fresh id for an object made at run time (above every seeded id)."""
        self.next_id += 1
        return self.next_id

    def refund(self, refund_id: int) -> tuple[Order, Refund] | None:
        """The refund with this id and its order."""
        for order in self.orders.values():
            for r in order.refunds:
                if r.id == refund_id:
                    return order, r
        return None

    def return_(self, return_id: int) -> tuple[Order, Return] | None:
        """The return with this id and its order."""
        for order in self.orders.values():
            for r in order.returns:
                if r.id == return_id:
                    return order, r
        return None
