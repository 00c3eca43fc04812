"""``ShopifyBackend``: the ``CommerceBackend`` protocol over the GraphQL Admin API (reads).

Every read is scoped to the bound customer: an order (or return) whose customer is someone
else reads as ``None``, exactly like a missing one. Orders are shown by name (``#1001``);
``order_id`` accepts the name, the bare number or the GID. Identity: customers by GID (or bare
number) and by email; Slack, Teams and staff are signoff's own (not the shop's), so those
look-ups answer ``None`` here. The writes are :mod:`shopify.writes`."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from shopify import mapping
from shopify.client import AdminClient
from shopify.ids import customer_gid, gid, order_ref
from tools.backend import (
    Customer,
    Invoice,
    Order,
    OrderStatus,
    Payment,
    Refund,
    Return,
    Shipment,
)

Obj = dict[str, Any]
#: Orders one listing reads (newest first): 15 summaries cost ~770 of a query's 1000 points.
ORDERS_PAGE = 15
_EMAIL = re.compile(r"^[^\s\"\\@]{1,64}@[^\s\"\\@]{1,255}$")

#: The catalogue tools this backend carries out (``tools.catalogue.build_registry`` offers
#: only these, beside the runtime's own); the rest are "not offered" (README, the table).
SUPPORTED_TOOLS = frozenset(
    {
        "get_account",
        "update_contact_details",
        "get_order",
        "list_orders",
        "track_shipment",
        "cancel_order",
        "update_shipping_address",
        "get_return",
        "list_returns",
        "create_return",
        "list_payments",
        "issue_refund",
    }
)


class ShopifyReads:
    """The reads and identity look-ups of :class:`shopify.writes.ShopifyBackend`."""

    supported_tools: frozenset[str] = SUPPORTED_TOOLS

    def __init__(self, client: AdminClient) -> None:
        self.client = client

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.client!r})"

    # -- the raw objects -------------------------------------------------------------
    async def _order_obj(self, order_id: str) -> Obj | None:
        """The order ``order_id`` (name, number or GID) whoever owns it."""
        ref = order_ref(order_id)
        if ref is None:
            return None
        if ref[0] == "gid":
            found = (await self.client.execute("Order", {"id": ref[1]}))["order"]
            return found if isinstance(found, dict) else None
        data = await self.client.execute("OrdersByName", {"query": f"name:{ref[1]}"})
        hit = next((o for o in data["orders"]["nodes"] if o.get("name") == ref[1]), None)
        if hit is None:
            return None
        found = (await self.client.execute("Order", {"id": hit["id"]}))["order"]
        return found if isinstance(found, dict) else None

    async def raw_order(self, order_id: str) -> Obj | None:
        """The order as the Admin API returns it, whoever owns it (webhooks, reconciliation)."""
        return await self._order_obj(order_id)

    async def raw_return(self, return_id: str) -> Obj | None:
        """The return by GID as the Admin API returns it (webhooks)."""
        ident = gid("Return", return_id)
        found = (await self.client.execute("Return", {"id": ident}))["return"] if ident else None
        return found if isinstance(found, dict) else None

    async def _owned(self, customer_id: str, order_id: str) -> Obj | None:
        owner = customer_gid(customer_id)
        found = await self._order_obj(order_id)
        if owner is None or found is None or (found.get("customer") or {}).get("id") != owner:
            return None
        return found

    async def _orders(self, customer_id: str, query: str | None = None) -> list[Obj]:
        owner = customer_gid(customer_id)
        if owner is None:
            return []
        data = await self.client.execute("CustomerOrders", {"id": owner, "first": ORDERS_PAGE, "query": query})
        found = data.get("customer")
        if not isinstance(found, dict):
            return []
        return [o for o in found["orders"]["nodes"] if (o.get("customer") or {}).get("id") == owner]

    # -- identity ----------------------------------------------------------------------
    async def get_customer(self, customer_id: str) -> Customer | None:
        """The customer by GID or bare number."""
        ident = customer_gid(customer_id)
        if ident is None:
            return None
        found = (await self.client.execute("Customer", {"id": ident}))["customer"]
        return mapping.customer(found) if isinstance(found, dict) else None

    async def find_customer_by_email(self, email: str) -> Customer | None:
        """The one customer whose email on file is ``email`` (case-insensitive)."""
        email = email.strip()
        if not _EMAIL.match(email):
            return None
        data = await self.client.execute("CustomersByEmail", {"query": f'email:"{email}"'})
        hits = [
            c
            for c in data["customers"]["nodes"]
            if str((c.get("defaultEmailAddress") or {}).get("emailAddress") or "").lower() == email.lower()
        ]
        return mapping.customer(hits[0]) if len(hits) == 1 else None

    # -- reads ---------------------------------------------------------------------------
    async def list_orders(self, customer_id: str, *, status: OrderStatus | None = None) -> list[Order]:
        """The customer's newest orders, optionally of one status."""
        orders = [mapping.order(o) for o in await self._orders(customer_id)]
        return [o for o in orders if status is None or o.status == status]

    async def get_order(self, customer_id: str, order_id: str) -> Order | None:
        """The customer's order (``None``: missing or someone else's)."""
        found = await self._owned(customer_id, order_id)
        return mapping.order(found) if found is not None else None

    async def track_shipment(self, customer_id: str, order_id: str) -> Shipment | None:
        """Where the customer's order is, from its fulfilments."""
        found = await self._owned(customer_id, order_id)
        return mapping.shipment(found) if found is not None else None

    async def _scoped(self, customer_id: str, order_id: str | None) -> list[Obj]:
        if order_id is None:
            return await self._orders(customer_id)
        found = await self._owned(customer_id, order_id)
        return [found] if found is not None else []

    async def list_payments(self, customer_id: str, *, order_id: str | None = None) -> list[Payment]:
        """The money-in transactions of the customer's orders (or of one)."""
        return [p for o in await self._scoped(customer_id, order_id) for p in mapping.payments(o)]

    async def list_refunds(self, customer_id: str, *, order_id: str | None = None) -> list[Refund]:
        """The refunds of the customer's orders (or of one)."""
        return [r for o in await self._scoped(customer_id, order_id) for r in mapping.refunds(o)]

    async def get_invoices(self, customer_id: str, *, invoice_id: str | None = None) -> list[Invoice]:
        """Shopify has no invoices (``get_invoices`` is not offered with this backend)."""
        return []

    async def list_returns(self, customer_id: str) -> list[Return]:
        """The returns of the customer's orders (the listing names them; each is read by GID)."""
        out: list[Return] = []
        for summary in await self._orders(customer_id):
            for node in (summary.get("returns") or {}).get("nodes") or ():
                found = (await self.client.execute("Return", {"id": node["id"]}))["return"]
                if isinstance(found, dict):
                    out.append(mapping.return_(found, str(summary["name"])))
        return out

    async def get_return(self, customer_id: str, return_id: str) -> Return | None:
        """The customer's return by GID (``None``: missing or someone else's)."""
        owner, ident = customer_gid(customer_id), gid("Return", return_id)
        if owner is None or ident is None:
            return None
        found = (await self.client.execute("Return", {"id": ident}))["return"]
        if not isinstance(found, dict) or ((found.get("order") or {}).get("customer") or {}).get("id") != owner:
            return None
        order = await self._order_obj(str(found["order"]["id"]))
        return mapping.return_(found, str(order["name"]) if order else str(found["order"]["id"]))

    async def refundable_minor(self, customer_id: str, order_id: str) -> int | None:
        """Captured minus refunded on the customer's order, from its transactions."""
        found = await self._owned(customer_id, order_id)
        return mapping.refundable(found) if found is not None else None

    async def refunds_since(self, customer_id: str, since: datetime) -> list[Refund]:
        """The customer's refunds created at or after ``since`` (orders updated since then)."""
        query = f"updated_at:>='{since.isoformat()}'"
        return [r for o in await self._orders(customer_id, query) for r in mapping.refunds(o) if r.created_at >= since]
