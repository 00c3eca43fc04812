"""The commerce backend seam: what the tool catalogue may ask of a shop.

Every read takes the ``customer_id`` the *runtime* bound to the session; the
model never supplies it. A read of something the customer does not own returns
``None`` exactly as a missing record does (S1: someone else's order looks like
a missing one).

Every write takes an ``idempotency_key`` derived by the runtime. Like a real
payments API, a repeated key returns the stored result and performs nothing a
second time; ``lookup_write`` lets the ledger reconcile after a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

OrderStatus = Literal["PENDING", "PAID", "SHIPPED", "DELIVERED", "CANCELLED"]
PaymentStatus = Literal["captured", "failed", "refunded"]
ReturnStatus = Literal["requested", "received", "refunded", "rejected"]
MessageChannel = Literal["email", "sms"]
KnowledgeKind = Literal["policy", "help"]
RefundKind = Literal["refund", "cancellation"]
ShipmentStatus = Literal["not_shipped", "in_transit", "delivered", "cancelled"]


@dataclass(frozen=True, kw_only=True)
class Address:
    """A postal address."""

    line1: str
    city: str
    postal_code: str
    country: str
    line2: str | None = None
    region: str | None = None


@dataclass(frozen=True, kw_only=True)
class PaymentMethod:
    """A saved card (brand, last four digits, expiry)."""

    id: str
    brand: str
    last4: str
    exp_month: int
    exp_year: int


@dataclass(frozen=True, kw_only=True)
class Customer:
    """A customer account."""

    id: str
    name: str
    email: str
    phone: str | None = None
    address: Address | None = None
    created_at: datetime | None = None
    payment_methods: tuple[PaymentMethod, ...] = ()


@dataclass(frozen=True, kw_only=True)
class OrderItem:
    """One line of an order."""

    sku: str
    name: str
    qty: int
    unit_minor: int


@dataclass(frozen=True, kw_only=True)
class Order:
    """An order."""

    id: str
    customer_id: str
    status: OrderStatus
    currency: str
    total_minor: int
    placed_at: datetime
    items: tuple[OrderItem, ...]
    delivered_at: datetime | None = None
    shipping_address: Address | None = None
    notes: str | None = None  # written by outsiders: untrusted text


@dataclass(frozen=True, kw_only=True)
class Payment:
    """A payment on an order."""

    id: str
    order_id: str
    amount_minor: int
    currency: str
    status: PaymentStatus
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class Refund:
    """A refund on an order."""

    id: str
    order_id: str
    amount_minor: int
    currency: str
    created_at: datetime
    reason_code: str | None = None
    return_id: str | None = None
    #: ``cancellation``: money a cancelled order gave back (its own policy, not a refund's ceiling).
    kind: RefundKind = "refund"


@dataclass(frozen=True, kw_only=True)
class ReturnItem:
    """One line of a return."""

    sku: str
    qty: int


@dataclass(frozen=True, kw_only=True)
class Return:
    """A return on an order."""

    id: str
    order_id: str
    items: tuple[ReturnItem, ...]
    status: ReturnStatus
    created_at: datetime
    reason_code: str | None = None


@dataclass(frozen=True, kw_only=True)
class Invoice:
    """An invoice of an order."""

    id: str
    order_id: str
    amount_minor: int
    currency: str
    issued_at: datetime


@dataclass(frozen=True, kw_only=True)
class Shipment:
    """Where an order's shipment is."""

    order_id: str
    status: ShipmentStatus
    carrier: str | None
    tracking_number: str | None
    shipped_at: datetime | None
    delivered_at: datetime | None
    estimated_delivery: datetime | None


@dataclass(frozen=True, kw_only=True)
class KnowledgeHit:
    """One knowledge section that matched a search."""

    doc_id: str
    version: int
    section_id: str
    kind: KnowledgeKind
    title: str
    text: str

    @property
    def evidence_id(self) -> str:
        """The id a citation uses: ``{doc_id}@{version}#{section_id}``."""
        return f"{self.doc_id}@{self.version}#{self.section_id}"


class KnowledgeBase(Protocol):
    """Signoff's own knowledge, whatever the shop (``storage.knowledge``; ``search_knowledge`` reads it)."""

    async def search(self, query: str, *, kind: KnowledgeKind | None = None, limit: int = 5) -> list[KnowledgeHit]:
        """Sections of the newest document versions matching ``query``, best first."""
        ...


@dataclass(frozen=True, kw_only=True)
class OutboxMessage:
    """A message the shop sent (email or SMS)."""

    id: str
    customer_id: str
    channel: MessageChannel
    to: str
    template: str
    body: str
    sent_at: datetime


@dataclass(frozen=True, kw_only=True)
class WriteRecord:
    """What the backend stored for one idempotency key."""

    key: str
    operation: str
    result: dict[str, Any] = field(default_factory=dict)


class BackendError(Exception):
    """A business-rule refusal by the backend (never an infrastructure failure).

    ``code`` is a stable snake_case reason the model can act on; ``details``
    carries structured facts (``{"refundable_minor": 1500}``).
    """

    def __init__(self, code: str, message: str = "", **details: Any) -> None:
        super().__init__(message or code)
        self.code = code
        self.details = details


class IdentityDirectory(Protocol):
    """The customers a shop knows, by id and by the email on file.

    Who a Slack or Teams user or a staff member is, is signoff's own
    (``storage.identities.People.identify``), not the shop's: a new face needs no method here."""

    async def get_customer(self, customer_id: str) -> Customer | None:
        """The customer ``customer_id``, if any."""

    async def find_customer_by_email(self, email: str) -> Customer | None:
        """The customer with this email on file, if any."""


class CommerceBackend(IdentityDirectory, Protocol):
    """A shop's system of record (its identity look-ups included). The sandbox store implements it over SQL.

    A backend that cannot do every catalogue tool declares the ones it can as
    ``supported_tools: frozenset[str]``; ``tools.catalogue.build_registry`` offers only those
    (the sandbox declares none: it does them all)."""

    # -- reads, always scoped to the bound customer -------------------------
    async def list_orders(self, customer_id: str, *, status: OrderStatus | None = None) -> list[Order]:
        """The customer's orders, optionally of one status."""

    async def get_order(self, customer_id: str, order_id: str) -> Order | None:
        """The customer's order ``order_id`` (``None`` when missing or someone else's)."""

    async def track_shipment(self, customer_id: str, order_id: str) -> Shipment | None:
        """The shipment of the customer's order, if any."""

    async def list_payments(self, customer_id: str, *, order_id: str | None = None) -> list[Payment]:
        """The customer's payments, optionally of one order."""

    async def list_refunds(self, customer_id: str, *, order_id: str | None = None) -> list[Refund]:
        """The customer's refunds, optionally of one order."""

    async def get_invoices(self, customer_id: str, *, invoice_id: str | None = None) -> list[Invoice]:
        """The customer's invoices, or the one named."""

    async def list_returns(self, customer_id: str) -> list[Return]:
        """The customer's returns."""

    async def get_return(self, customer_id: str, return_id: str) -> Return | None:
        """The customer's return ``return_id``, if any."""

    async def refundable_minor(self, customer_id: str, order_id: str) -> int | None:
        """Captured minus refunded for an owned order; ``None`` if not owned/missing."""
        ...

    async def refunds_since(self, customer_id: str, since: datetime) -> list[Refund]:
        """The customer's refunds since ``since`` (for per-day limits)."""

    # -- writes: idempotent by key; BackendError for business refusals -------
    async def issue_refund(
        self,
        customer_id: str,
        order_id: str,
        *,
        amount_minor: int,
        currency: str,
        reason_code: str,
        return_id: str | None,
        idempotency_key: str,
    ) -> Refund:
        """Refund money on the customer's order, once per ``idempotency_key``."""

    async def cancel_order(self, customer_id: str, order_id: str, *, reason_code: str, idempotency_key: str) -> Order:
        """Cancel the customer's order, once per ``idempotency_key``."""

    async def update_shipping_address(
        self, customer_id: str, order_id: str, *, address: Address, idempotency_key: str
    ) -> Order:
        """Change where the customer's order ships, once per ``idempotency_key``."""

    async def create_reorder(self, customer_id: str, order_id: str, *, idempotency_key: str) -> Order:
        """Place a new order like the customer's ``order_id``, once per ``idempotency_key``."""

    async def create_return(
        self,
        customer_id: str,
        order_id: str,
        *,
        items: list[ReturnItem],
        reason_code: str,
        idempotency_key: str,
    ) -> Return:
        """Open a return on the customer's order, once per ``idempotency_key``."""

    async def retry_payment(self, customer_id: str, order_id: str, *, idempotency_key: str) -> Payment:
        """Charge a failed payment again, once per ``idempotency_key``."""

    async def update_contact_details(
        self, customer_id: str, *, email: str | None, phone: str | None, idempotency_key: str
    ) -> Customer:
        """Change the customer's email or phone on file, once per ``idempotency_key``."""

    async def send_message(
        self,
        customer_id: str,
        *,
        channel: MessageChannel,
        template: str,
        body: str,
        idempotency_key: str,
    ) -> OutboxMessage:
        """Send to the contact detail *on file* for ``channel`` (S3); never another address."""
        ...

    async def lookup_write(self, idempotency_key: str) -> WriteRecord | None:
        """The stored result of a write made with this key, if the backend made it."""
        ...
