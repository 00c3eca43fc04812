"""The query root the fake answers, over its in-memory shop."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tests.fakes.shopify.connections import NotImplementedByFake, Term, compare, connection, search_terms
from tests.fakes.shopify.state import Customer, Order, Shop, iso, parse_gid
from tests.fakes.shopify.views import (
    customer_view,
    order_view,
    page_view,
    refund_view,
    return_view,
    shop_view,
    webhook_view,
)

ORDER_SEARCH = {"name", "customer_id", "email", "id", "created_at", "updated_at", "processed_at", "financial_status"}
CUSTOMER_SEARCH = {"email", "id", "phone"}
RECENT_ORDERS = timedelta(days=60)


def _order_field(o: Order, field: str) -> Any:
    return {
        "name": o.name,
        "customer_id": o.customer_id,
        "email": o.email,
        "id": o.id,
        "created_at": iso(o.created_at),
        "processed_at": iso(o.created_at),
        "updated_at": iso(o.updated_at),
        "financial_status": o.financial_status().lower(),
    }[field]


def _customer_field(c: Customer, field: str) -> Any:
    return {"email": c.email, "id": c.id, "phone": c.phone}[field]


def _sorted(items: list[Any], sort_key: str | None, default: str, where: str) -> list[Any]:
    key = sort_key or default
    if key == "ID":
        return sorted(items, key=lambda x: x.id)
    if key in ("CREATED_AT", "PROCESSED_AT"):
        return sorted(items, key=lambda x: (x.created_at, x.id))
    if key == "UPDATED_AT":
        return sorted(items, key=lambda x: (getattr(x, "updated_at", x.created_at), x.id))
    raise NotImplementedByFake(f"{where}(sortKey: {key})")


class _Queries:
    """The query root's resolvers over one shop."""

    def __init__(self, shop: Shop, now: datetime) -> None:
        self.shop = shop
        self.now = now

    def _visible(self, o: Order) -> bool:
        """Without ``read_all_orders`` an app sees only the last 60 days of orders."""
        return "read_all_orders" in self.shop.scopes or o.created_at >= self.now - RECENT_ORDERS

    def customer(self, info: Any, id: str) -> dict[str, Any] | None:
        n = parse_gid(id, "Customer")
        c = self.shop.customers.get(n) if n is not None else None
        return customer_view(self.shop, c) if c else None

    def customers(self, info: Any, query: str | None = None, sortKey: str | None = None, **args: Any) -> dict[str, Any]:
        terms = search_terms(query, CUSTOMER_SEARCH, "customers")
        found = [c for c in self.shop.customers.values() if all(compare(_customer_field(c, t.field), t) for t in terms)]
        found = _sorted(found, sortKey, "ID", "customers")
        return connection(found, lambda c: customer_view(self.shop, c), args)

    def order(self, info: Any, id: str) -> dict[str, Any] | None:
        n = parse_gid(id, "Order")
        o = self.shop.orders.get(n) if n is not None else None
        return order_view(self.shop, o) if o and self._visible(o) else None

    def orders(self, info: Any, query: str | None = None, sortKey: str | None = None, **args: Any) -> dict[str, Any]:
        if args.pop("savedSearchId", None) is not None:
            raise NotImplementedByFake("orders(savedSearchId:)")
        terms = [
            Term(field="name", op=t.op, value=f"#{t.value}") if t.field == "name" and t.value.isdigit() else t
            for t in search_terms(query, ORDER_SEARCH, "orders")
        ]  # "name:1042" finds #1042 as well
        found = [
            o
            for o in self.shop.orders.values()
            if self._visible(o) and all(compare(_order_field(o, t.field), t) for t in terms)
        ]
        found = _sorted(found, sortKey, "PROCESSED_AT", "orders")
        return connection(found, lambda o: order_view(self.shop, o), args)

    def job(self, info: Any, id: str) -> dict[str, Any] | None:
        j = self.shop.jobs.get(id)
        if j is None:
            return None
        j.polls_left -= 1
        return {"id": j.id, "done": j.polls_left <= 0, "query": query_root(self.shop, self.now)}

    def refund(self, info: Any, id: str) -> dict[str, Any] | None:
        n = parse_gid(id, "Refund")
        found = self.shop.refund(n) if n is not None else None
        return refund_view(self.shop, *found) if found else None

    def return_(self, info: Any, id: str) -> dict[str, Any] | None:
        n = parse_gid(id, "Return")
        found = self.shop.return_(n) if n is not None else None
        return return_view(self.shop, *found) if found else None

    def pages(self, info: Any, query: str | None = None, sortKey: str | None = None, **args: Any) -> dict[str, Any]:
        if query:
            raise NotImplementedByFake("pages(query:)")
        items = _sorted(list(self.shop.pages.values()), sortKey, "ID", "pages")
        return connection(items, page_view, args)

    def webhook_subscriptions(
        self, info: Any, topics: list[str] | None = None, sortKey: str | None = None, **args: Any
    ) -> dict[str, Any]:
        if args.pop("format", None) not in (None, "JSON"):
            raise NotImplementedByFake("webhookSubscriptions(format:) other than JSON")
        for unsupported in ("query", "callbackUrl", "uri"):
            if args.pop(unsupported, None) is not None:
                raise NotImplementedByFake(f"webhookSubscriptions({unsupported}:)")
        subs = [w for w in self.shop.webhooks.values() if topics is None or w.topic in topics]
        subs = _sorted(subs, sortKey, "CREATED_AT", "webhookSubscriptions")
        return connection(subs, webhook_view, args)


def query_root(shop: Shop, now: datetime) -> dict[str, Any]:
    """The ``QueryRoot`` fields the fake implements; the rest answer 'not implemented'."""
    q = _Queries(shop, now)
    return {
        "__shop__": shop,  # not a field: the executor reads the app's scopes from it
        "shop": lambda info: shop_view(shop),
        "customer": q.customer,
        "customers": q.customers,
        "order": q.order,
        "orders": q.orders,
        "job": q.job,
        "refund": q.refund,
        "return": q.return_,
        "pages": q.pages,
        "webhookSubscriptions": q.webhook_subscriptions,
        "currentAppInstallation": lambda info: {
            "id": "gid://shopify/AppInstallation/1",
            "accessScopes": [{"handle": s, "description": s} for s in shop.scopes],
        },
    }
