"""The bundled sandbox dataset's ids on a Shopify store seeded from it, both ways.

A store seeded from the dataset (the fake Admin API's ``tests/fakes/shopify/seed.py``; ``signoff
eval`` with ``SIGNOFF_BACKEND=shopify``) keeps the dataset's numbers:

========================  ==========================================================
dataset                   Shopify
========================  ==========================================================
customer ``C-7``          ``gid://shopify/Customer/7``
order ``O-1042``          ``#1042`` (its name) or ``gid://shopify/Order/1042``
payment ``P-1042``        ``gid://shopify/OrderTransaction/10421`` (``P-1042-2``: ``…/10422``)
refund ``R-3001``         ``gid://shopify/Refund/3001``
return ``RT-2001``        ``gid://shopify/Return/2001``
========================  ==========================================================

Objects the store makes at run time keep their own numbers (``R-900000002``). A ledger key
``{operation}:{target}:…`` maps its target the same way, so :func:`shopify.ids.key_target`
reads it back. An id that is not of its dataset form maps to nothing the store knows (the
sandbox would not find it either)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from typing import TypeVar

from shopify.writes import ShopifyBackend
from tools.backend import (
    Address,
    Customer,
    Invoice,
    MessageChannel,
    Order,
    OrderStatus,
    OutboxMessage,
    Payment,
    Refund,
    Return,
    ReturnItem,
    Shipment,
    WriteRecord,
)

T = TypeVar("T")

_DATASET = re.compile(r"^(?P<prefix>C|O|P|R|RT)-(?P<n>[0-9]{1,12})(?:-(?P<k>[1-9]))?$")
_GID = re.compile(r"^gid://shopify/(?P<kind>[A-Za-z]+)/(?P<n>[0-9]{1,20})$")
_NAME = re.compile(r"^#(?P<n>[0-9]{1,12})$")
_KEY = re.compile(r"^(?P<op>[a-z_]+):(?P<target>[^:]+)(?P<rest>(?::.*)?)$", re.S)
#: What a malformed id becomes: a reference every look-up answers as not found.
UNKNOWN = "unknown"
_KINDS = {"C": "Customer", "R": "Refund", "RT": "Return"}
_PREFIXES = {"Customer": "C", "Order": "O", "Refund": "R", "Return": "RT"}


def number(dataset_id: str) -> int:
    """``C-7`` → 7, ``O-1042`` → 1042, ``RT-2001`` → 2001, ``R-3001`` → 3001."""
    return int(dataset_id.split("-")[1])


def transaction_number(payment_id: str) -> int:
    """``P-1042`` → 10421, ``P-1042-2`` → 10422."""
    parts = payment_id.split("-")
    attempt = int(parts[2]) if len(parts) > 2 else 1
    return int(parts[1]) * 10 + attempt


def to_shop(dataset_id: str, kind: str) -> str:
    """A dataset id of ``kind`` (``C``, ``O``, ``P``, ``R``, ``RT``) as the store takes it."""
    m = _DATASET.match(dataset_id)
    if m is None or m["prefix"] != kind or (m["k"] and kind != "P"):
        return UNKNOWN
    if kind == "O":
        return f"#{m['n']}"
    if kind == "P":
        return f"gid://shopify/OrderTransaction/{transaction_number(dataset_id)}"
    return f"gid://shopify/{_KINDS[kind]}/{m['n']}"


def to_dataset(shop_id: str) -> str:
    """A store's id (a GID or an order's name) as the dataset writes it; others unchanged."""
    name = _NAME.match(shop_id)
    if name is not None:
        return f"O-{name['n']}"
    m = _GID.match(shop_id)
    if m is None:
        return shop_id
    if m["kind"] == "OrderTransaction":
        n, attempt = divmod(int(m["n"]), 10)
        return f"P-{n}" if attempt == 1 else f"P-{n}-{attempt}"
    prefix = _PREFIXES.get(m["kind"])
    return f"{prefix}-{m['n']}" if prefix else shop_id


def key_to_shop(key: str, kind: str) -> str:
    """A ledger key ``{operation}:{target}:…`` whose target (of ``kind``) is a dataset id, with
    the target as the store takes it."""
    m = _KEY.match(key)
    return f"{m['op']}:{to_shop(m['target'], kind)}{m['rest']}" if m is not None else key


def key_to_dataset(key: str) -> str:
    """The inverse of :func:`key_to_shop`."""
    m = _KEY.match(key)
    if m is None:
        return key
    target = m["target"]
    if target.startswith("gid"):  # a GID holds colons: the target runs to its number
        g = re.match(r"^(?P<op>[a-z_]+):(?P<gid>gid://shopify/[A-Za-z]+/[0-9]{1,20})(?P<rest>.*)$", key, re.S)
        if g is not None:
            return f"{g['op']}:{to_dataset(g['gid'])}{g['rest']}"
    return f"{m['op']}:{to_dataset(target)}{m['rest']}"


_ID_FIELDS = ("id", "customer_id", "order_id", "return_id")


def _back(obj: T) -> T:
    """A backend result with its ids (and its ``id`` fields inside) as the dataset writes them."""
    changes = {f: to_dataset(v) for f in _ID_FIELDS if isinstance(v := getattr(obj, f, None), str) and v}
    return replace(obj, **changes) if changes else obj  # type: ignore[type-var]


class DatasetIdBackend:
    """A :class:`~shopify.writes.ShopifyBackend` on a store seeded from the dataset, seen
    through the dataset's ids: the same tool calls (``order_id: O-1042``) and the same results
    as the sandbox store gives. ``before_write`` runs before every write (the evaluation sets
    the fake store's clock to the case's)."""

    def __init__(self, shop: ShopifyBackend, *, before_write: Callable[[], Awaitable[None]] | None = None) -> None:
        self.shop = shop
        self.supported_tools = shop.supported_tools
        self._before_write = before_write

    async def _writing(self) -> None:
        """The store's ``_writing``, in the dataset's ids."""
        if self._before_write is not None:
            await self._before_write()

    async def get_customer(self, customer_id: str) -> Customer | None:
        """The store's ``get_customer``, in the dataset's ids."""
        found = await self.shop.get_customer(to_shop(customer_id, "C"))
        return _back(found) if found is not None else None

    async def find_customer_by_email(self, email: str) -> Customer | None:
        """The store's ``find_customer_by_email``, in the dataset's ids."""
        found = await self.shop.find_customer_by_email(email)
        return _back(found) if found is not None else None

    async def list_orders(self, customer_id: str, *, status: OrderStatus | None = None) -> list[Order]:
        """The store's ``list_orders``, in the dataset's ids."""
        return [_back(o) for o in await self.shop.list_orders(to_shop(customer_id, "C"), status=status)]

    async def get_order(self, customer_id: str, order_id: str) -> Order | None:
        """The store's ``get_order``, in the dataset's ids."""
        found = await self.shop.get_order(to_shop(customer_id, "C"), to_shop(order_id, "O"))
        return _back(found) if found is not None else None

    async def track_shipment(self, customer_id: str, order_id: str) -> Shipment | None:
        """The store's ``track_shipment``, in the dataset's ids."""
        found = await self.shop.track_shipment(to_shop(customer_id, "C"), to_shop(order_id, "O"))
        return _back(found) if found is not None else None

    async def list_payments(self, customer_id: str, *, order_id: str | None = None) -> list[Payment]:
        """The store's ``list_payments``, in the dataset's ids."""
        order = to_shop(order_id, "O") if order_id is not None else None
        return [_back(p) for p in await self.shop.list_payments(to_shop(customer_id, "C"), order_id=order)]

    async def list_refunds(self, customer_id: str, *, order_id: str | None = None) -> list[Refund]:
        """The store's ``list_refunds``, in the dataset's ids."""
        order = to_shop(order_id, "O") if order_id is not None else None
        return [_back(r) for r in await self.shop.list_refunds(to_shop(customer_id, "C"), order_id=order)]

    async def get_invoices(self, customer_id: str, *, invoice_id: str | None = None) -> list[Invoice]:
        """The store's ``get_invoices``, in the dataset's ids."""
        return await self.shop.get_invoices(to_shop(customer_id, "C"), invoice_id=invoice_id)

    async def list_returns(self, customer_id: str) -> list[Return]:
        """The store's ``list_returns``, in the dataset's ids."""
        return [_back(r) for r in await self.shop.list_returns(to_shop(customer_id, "C"))]

    async def get_return(self, customer_id: str, return_id: str) -> Return | None:
        """The store's ``get_return``, in the dataset's ids."""
        found = await self.shop.get_return(to_shop(customer_id, "C"), to_shop(return_id, "RT"))
        return _back(found) if found is not None else None

    async def refundable_minor(self, customer_id: str, order_id: str) -> int | None:
        """The store's ``refundable_minor``, in the dataset's ids."""
        return await self.shop.refundable_minor(to_shop(customer_id, "C"), to_shop(order_id, "O"))

    async def refunds_since(self, customer_id: str, since: datetime) -> list[Refund]:
        """The store's ``refunds_since``, in the dataset's ids."""
        return [_back(r) for r in await self.shop.refunds_since(to_shop(customer_id, "C"), since)]

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
        """The store's ``issue_refund``, in the dataset's ids."""
        await self._writing()
        refund = await self.shop.issue_refund(
            to_shop(customer_id, "C"),
            to_shop(order_id, "O"),
            amount_minor=amount_minor,
            currency=currency,
            reason_code=reason_code,
            return_id=to_shop(return_id, "RT") if return_id is not None else None,
            idempotency_key=key_to_shop(idempotency_key, "O"),
        )
        return _back(refund)

    async def cancel_order(self, customer_id: str, order_id: str, *, reason_code: str, idempotency_key: str) -> Order:
        """The store's ``cancel_order``, in the dataset's ids."""
        await self._writing()
        order = await self.shop.cancel_order(
            to_shop(customer_id, "C"),
            to_shop(order_id, "O"),
            reason_code=reason_code,
            idempotency_key=key_to_shop(idempotency_key, "O"),
        )
        return _back(order)

    async def update_shipping_address(
        self, customer_id: str, order_id: str, *, address: Address, idempotency_key: str
    ) -> Order:
        """The store's ``update_shipping_address``, in the dataset's ids."""
        await self._writing()
        order = await self.shop.update_shipping_address(
            to_shop(customer_id, "C"),
            to_shop(order_id, "O"),
            address=address,
            idempotency_key=key_to_shop(idempotency_key, "O"),
        )
        return _back(order)

    async def create_reorder(self, customer_id: str, order_id: str, *, idempotency_key: str) -> Order:
        """The store's ``create_reorder``, in the dataset's ids."""
        return await self.shop.create_reorder(customer_id, order_id, idempotency_key=idempotency_key)

    async def create_return(
        self,
        customer_id: str,
        order_id: str,
        *,
        items: list[ReturnItem],
        reason_code: str,
        idempotency_key: str,
    ) -> Return:
        """The store's ``create_return``, in the dataset's ids."""
        await self._writing()
        ret = await self.shop.create_return(
            to_shop(customer_id, "C"),
            to_shop(order_id, "O"),
            items=items,
            reason_code=reason_code,
            idempotency_key=key_to_shop(idempotency_key, "O"),
        )
        return _back(ret)

    async def retry_payment(self, customer_id: str, order_id: str, *, idempotency_key: str) -> Payment:
        """The store's ``retry_payment``, in the dataset's ids."""
        return await self.shop.retry_payment(customer_id, order_id, idempotency_key=idempotency_key)

    async def update_contact_details(
        self, customer_id: str, *, email: str | None, phone: str | None, idempotency_key: str
    ) -> Customer:
        """The store's ``update_contact_details``, in the dataset's ids."""
        await self._writing()
        customer = await self.shop.update_contact_details(
            to_shop(customer_id, "C"), email=email, phone=phone, idempotency_key=key_to_shop(idempotency_key, "C")
        )
        return _back(customer)

    async def send_message(
        self, customer_id: str, *, channel: MessageChannel, template: str, body: str, idempotency_key: str
    ) -> OutboxMessage:
        """The store's ``send_message``, in the dataset's ids (the key as given: it only names the mail)."""
        sent = await self.shop.send_message(
            to_shop(customer_id, "C"), channel=channel, template=template, body=body, idempotency_key=idempotency_key
        )
        return _back(sent)

    async def lookup_write(self, idempotency_key: str) -> WriteRecord | None:
        """The store's ``lookup_write``, in the dataset's ids."""
        sent = await self.shop.lookup_message(idempotency_key)
        if sent is not None:
            return sent
        kind = "C" if idempotency_key.startswith("contact:") else "O"
        found = await self.shop.lookup_write(key_to_shop(idempotency_key, kind))
        if found is None:
            return None
        result = {k: to_dataset(v) if isinstance(v, str) else v for k, v in found.result.items()}
        return WriteRecord(key=idempotency_key, operation=found.operation, result=result)
