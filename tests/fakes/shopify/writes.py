"""The write mutations besides refunds and cancellations: orders, customers, metafields,
returns, draft orders and webhook subscriptions. Every input is checked whole before
anything changes, so a refused mutation leaves the shop as it was."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from graphql import GraphQLResolveInfo

from tests.fakes.shopify.connections import NotImplementedByFake
from tests.fakes.shopify.state import (
    Address,
    Customer,
    DraftOrder,
    LineItem,
    Metafield,
    Order,
    Return,
    Shop,
    WebhookSubscription,
    gid,
    iso,
    money,
    parse_gid,
)
from tests.fakes.shopify.views import customer_view, metafield_view, order_view, return_view, webhook_view
from tests.fakes.shopify.webhooks import Webhook, return_json, webhook

METAFIELD_TYPES = {
    "single_line_text_field",
    "multi_line_text_field",
    "json",
    "number_integer",
    "number_decimal",
    "boolean",
    "date_time",
    "url",
}
_KEY = re.compile(r"^[A-Za-z0-9_-]{2,64}$")
_NAMESPACE = re.compile(r"^(\$app|[A-Za-z0-9_-]{3,255})(:[A-Za-z0-9_-]+)?$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_PHONE = re.compile(r"^\+[1-9][0-9]{6,14}$")
ORDER_INPUT_FIELDS = {"id", "email", "phone", "note", "tags", "shippingAddress", "metafields"}
CUSTOMER_INPUT_FIELDS = {"id", "email", "phone", "firstName", "lastName", "note", "tags", "addresses", "metafields"}


def _err(field: list[str], message: str, code: str | None = None) -> dict[str, Any]:
    return {"field": field, "message": message, "code": code}


def metafield_problem(m: dict[str, Any], existing: Metafield | None, where: list[str]) -> dict[str, Any] | None:
    """Why the service would refuse this metafield input, or None."""
    namespace, key, kind, value = m.get("namespace") or "$app", m.get("key"), m.get("type"), m.get("value")
    if not isinstance(key, str) or not _KEY.match(key):
        return _err([*where, "key"], "Key must be 2-64 characters: letters, digits, - and _", "INVALID")
    if not _NAMESPACE.match(namespace):
        return _err([*where, "namespace"], "Namespace must be 3-255 characters: letters, digits, - and _", "INVALID")
    kind = kind or (existing.type if existing else None)
    if kind is None:
        return _err([*where, "type"], "Type can't be blank", "BLANK")
    if kind not in METAFIELD_TYPES:
        return _err([*where, "type"], f"Type '{kind}' is not supported by the fake", "INVALID_TYPE")
    if existing is not None and existing.type != kind:
        return _err([*where, "type"], "Type does not match the existing metafield's type", "INVALID_TYPE")
    if not isinstance(value, str):
        return _err([*where, "value"], "Value can't be blank", "BLANK")
    if kind == "json":
        try:
            json.loads(value)
        except ValueError:
            return _err([*where, "value"], "Value is invalid JSON", "INVALID_VALUE")
    return None


def put_metafield(shop: Shop, owner: dict[tuple[str, str], Metafield], m: dict[str, Any], now: datetime) -> Metafield:
    """Create or overwrite a metafield already checked by :func:`metafield_problem`."""
    slot = (m.get("namespace") or "$app", m["key"])
    old = owner.get(slot)
    kind = m.get("type") or (old.type if old else "single_line_text_field")
    owner[slot] = Metafield(
        id=old.id if old else shop.new_id(),
        namespace=slot[0],
        key=slot[1],
        type=kind,
        value=m["value"],
        created_at=old.created_at if old else now,
        updated_at=now,
    )
    return owner[slot]


def _metafields_problems(
    owner: dict[tuple[str, str], Metafield], items: list[dict[str, Any]], where: str
) -> list[dict[str, Any]]:
    problems = []
    for i, m in enumerate(items):
        if m.get("id") is not None:
            raise NotImplementedByFake(f"{where}.metafields[].id")
        existing = owner.get((m.get("namespace") or "$app", m.get("key") or ""))
        problem = metafield_problem(m, existing, [where, "metafields", str(i)])
        if problem:
            problems.append(problem)
    return problems


def address_from(a: dict[str, Any]) -> Address | dict[str, Any]:
    """A ``MailingAddressInput`` as an address, or a user error."""
    country = a.get("countryCode") or a.get("country")
    if not a.get("address1") or not a.get("city") or not country:
        return _err(["shippingAddress"], "Address must have address1, city and country")
    return Address(
        address1=a["address1"],
        address2=a.get("address2"),
        city=a["city"],
        province_code=a.get("provinceCode") or a.get("province"),
        zip=a.get("zip") or "",
        country_code=str(country),
        first_name=a.get("firstName"),
        last_name=a.get("lastName"),
        phone=a.get("phone"),
    )


class Writes:
    """Mixed into the mutation root (it provides ``shop`` and ``clock``)."""

    shop: Shop
    clock: Callable[[], datetime]
    emitted: list[Webhook]

    def orderUpdate(self, info: GraphQLResolveInfo, input: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        """``orderUpdate``: contact, note, tags, metafields; the address only while unfulfilled."""
        _only(input, ORDER_INPUT_FIELDS, "orderUpdate(input)")
        n = parse_gid(input["id"], "Order")
        order = self.shop.orders.get(n) if n is not None else None
        if order is None:
            return {"order": None, "userErrors": [_err(["id"], "Order does not exist")]}
        errors = _metafields_problems(order.metafields, input.get("metafields") or [], "input")
        address: Address | None = None
        if input.get("shippingAddress") is not None:
            parsed = address_from(input["shippingAddress"])
            if order.fulfilled:
                errors.append(
                    _err(["shippingAddress"], "Shipping address can't be changed once the order is fulfilled")
                )
            elif isinstance(parsed, dict):
                errors.append(parsed)
            else:
                address = parsed
        if errors:
            return {"order": None, "userErrors": errors}
        now = self.clock()
        order.shipping_address = address or order.shipping_address
        for name in ("email", "note"):
            if input.get(name) is not None:
                setattr(order, name, input[name])
        order.tags = list(input["tags"]) if input.get("tags") is not None else order.tags
        for m in input.get("metafields") or []:
            put_metafield(self.shop, order.metafields, m, now)
        return {"order": order_view(self.shop, order), "userErrors": []}

    def customerUpdate(self, info: GraphQLResolveInfo, input: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        """``customerUpdate``: name, contact details, default address, note, tags, metafields."""
        _only(input, CUSTOMER_INPUT_FIELDS, "customerUpdate(input)")
        n = parse_gid(input.get("id"), "Customer")
        customer = self.shop.customers.get(n) if n is not None else None
        if customer is None:
            return {"customer": None, "userErrors": [_err(["id"], "Customer does not exist")]}
        errors = self._customer_problems(customer, input)
        addresses = [address_from(a) for a in input.get("addresses") or []]
        errors += [a for a in addresses if isinstance(a, dict)]
        if errors:
            return {"customer": None, "userErrors": errors}
        for name, attr in (
            ("email", "email"),
            ("phone", "phone"),
            ("firstName", "first_name"),
            ("lastName", "last_name"),
            ("note", "note"),
        ):
            if name in input and input[name] is not None:
                setattr(customer, attr, input[name])
        if input.get("tags") is not None:
            customer.tags = list(input["tags"])
        if addresses:
            customer.address = addresses[0]  # type: ignore[assignment]  # errors were dicts, refused above
        for m in input.get("metafields") or []:
            put_metafield(self.shop, customer.metafields, m, self.clock())
        return {"customer": customer_view(self.shop, customer), "userErrors": []}

    def _customer_problems(self, customer: Customer, input: dict[str, Any]) -> list[dict[str, Any]]:
        errors = _metafields_problems(customer.metafields, input.get("metafields") or [], "input")
        email = input.get("email")
        if email is not None and not _EMAIL.match(email):
            errors.append(_err(["email"], "Email is invalid"))
        elif email is not None and any(
            c.email.lower() == email.lower() and c.id != customer.id for c in self.shop.customers.values()
        ):
            errors.append(_err(["email"], "Email has already been taken"))
        phone = input.get("phone")
        if phone is not None and not _PHONE.match(re.sub(r"[ ().-]", "", phone)):
            errors.append(_err(["phone"], "Phone is invalid"))
        return errors

    def metafieldsSet(self, info: GraphQLResolveInfo, metafields: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N802
        """``metafieldsSet``: up to 25 at once on orders or customers, all or nothing."""
        if len(metafields) > 25:
            too_many = _err(
                ["metafields"], "Exceeded the maximum metafields input limit of 25.", "LESS_THAN_OR_EQUAL_TO"
            )
            return {"metafields": None, "userErrors": [{**too_many, "elementIndex": None}]}
        owners, errors = [], []
        for i, m in enumerate(metafields):
            owner = self._owner(m["ownerId"])
            where = ["metafields", str(i)]
            if owner is None:
                errors.append({**_err([*where, "ownerId"], "Owner does not exist", "INVALID"), "elementIndex": i})
                continue
            existing = owner[0].get((m.get("namespace") or "$app", m["key"]))
            problem = metafield_problem(m, existing, where)
            if problem is None and m.get("compareDigest") is not None and m["compareDigest"] != _digest(existing):
                problem = _err(
                    [*where, "compareDigest"], "The resource has been updated since it was loaded.", "STALE_OBJECT"
                )
            if problem:
                errors.append({**problem, "elementIndex": i})
            owners.append(owner)
        if errors:
            return {"metafields": None, "userErrors": errors}
        now = self.clock()
        made = [put_metafield(self.shop, o[0], m, now) for o, m in zip(owners, metafields, strict=True)]
        return {"metafields": [metafield_view(x, o[1]) for x, o in zip(made, owners, strict=True)], "userErrors": []}

    def _owner(self, owner_id: str) -> tuple[dict[tuple[str, str], Metafield], str] | None:
        if (n := parse_gid(owner_id, "Order")) is not None and n in self.shop.orders:
            return self.shop.orders[n].metafields, "ORDER"
        if (n := parse_gid(owner_id, "Customer")) is not None and n in self.shop.customers:
            return self.shop.customers[n].metafields, "CUSTOMER"
        return None

    def returnRequest(self, info: GraphQLResolveInfo, input: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        """``returnRequest``: a customer's request, ``REQUESTED`` until the merchant decides."""
        if input.get("returnShippingFee") is not None:
            raise NotImplementedByFake("returnRequest(input.returnShippingFee)")
        return self._return(input["orderId"], input["returnLineItems"], "REQUESTED", "customerNote")

    def returnCreate(self, info: GraphQLResolveInfo, returnInput: dict[str, Any]) -> dict[str, Any]:  # noqa: N802, N803
        """``returnCreate``: a return the merchant opens directly (``OPEN``)."""
        for unsupported in ("exchangeLineItems", "returnShippingFee"):
            if returnInput.get(unsupported):
                raise NotImplementedByFake(f"returnCreate(returnInput.{unsupported})")
        return self._return(returnInput["orderId"], returnInput["returnLineItems"], "OPEN", "returnReasonNote")

    def _return(self, order_id: str, items: list[dict[str, Any]], status: str, note_field: str) -> dict[str, Any]:
        n = parse_gid(order_id, "Order")
        order = self.shop.orders.get(n) if n is not None else None
        if order is None:
            return {"return": None, "userErrors": [_err(["orderId"], "Order does not exist", "NOT_FOUND")]}
        lines, errors = _return_lines(order, items)
        if errors:
            return {"return": None, "userErrors": errors}
        ret = Return(
            id=self.shop.new_id(),
            name=f"{order.name}-R{len(order.returns) + 1}",
            status=status,
            created_at=self.clock(),
            lines=lines,
            reason_note=next((str(i[note_field]) for i in items if i.get(note_field)), ""),
        )
        order.returns.append(ret)
        if status == "REQUESTED":
            self.emitted.append(webhook(self.shop, "returns/request", return_json(order, ret), ret.created_at))
        return {"return": return_view(self.shop, order, ret), "userErrors": []}

    def draftOrderCreate(self, info: GraphQLResolveInfo, input: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        """``draftOrderCreate`` with custom lines (title, quantity, price) for a customer."""
        _only(
            input,
            {"lineItems", "purchasingEntity", "email", "note", "tags", "shippingAddress"},
            "draftOrderCreate(input)",
        )
        customer_id = parse_gid((input.get("purchasingEntity") or {}).get("customerId"), "Customer")
        if customer_id is not None and customer_id not in self.shop.customers:
            return {
                "draftOrder": None,
                "userErrors": [_err(["purchasingEntity", "customerId"], "Customer does not exist")],
            }
        lines, currency = [], self.shop.currency
        for i, item in enumerate(input.get("lineItems") or []):
            price = item.get("originalUnitPriceWithCurrency")
            if item.get("variantId") is not None or price is None or not item.get("title"):
                raise NotImplementedByFake("draftOrderCreate line items other than custom ones (title + price)")
            currency = price["currencyCode"]
            minor = round(float(price["amount"]) * 100)
            lines.append(
                LineItem(
                    id=self.shop.new_id(),
                    sku=item.get("sku") or "",
                    title=item["title"],
                    quantity=item["quantity"],
                    unit_minor=minor,
                )
            )
            if item["quantity"] < 1:
                return {
                    "draftOrder": None,
                    "userErrors": [_err(["lineItems", str(i), "quantity"], "Quantity must be at least 1")],
                }
        if not lines:
            return {"draftOrder": None, "userErrors": [_err(["lineItems"], "Add at least 1 product")]}
        draft = DraftOrder(
            id=self.shop.new_id(), customer_id=customer_id, line_items=lines, currency=currency, created_at=self.clock()
        )
        self.shop.drafts[draft.id] = draft
        return {"draftOrder": self._draft_view(draft), "userErrors": []}

    def _draft_view(self, d: DraftOrder) -> dict[str, Any]:
        total = sum(li.quantity * li.unit_minor for li in d.line_items)
        customer = self.shop.customers.get(d.customer_id) if d.customer_id is not None else None
        return {
            "id": gid("DraftOrder", d.id),
            "name": f"#D{len(self.shop.drafts)}",
            "status": "OPEN",
            "createdAt": iso(d.created_at),
            "currencyCode": d.currency,
            "invoiceUrl": f"https://{self.shop.domain}/invoices/{d.id}",
            "totalPriceSet": money(total, d.currency),
            "subtotalPriceSet": money(total, d.currency),
            "customer": (lambda info: customer_view(self.shop, customer)) if customer else None,
            "order": None,
        }

    def webhookSubscriptionCreate(
        self, info: GraphQLResolveInfo, topic: str, webhookSubscription: dict[str, Any]
    ) -> dict[str, Any]:  # noqa: N802, N803
        """``webhookSubscriptionCreate``: one subscription a topic and address."""
        uri = webhookSubscription.get("uri")
        if not uri or not str(uri).startswith(("https://", "http://127.0.0.1", "http://localhost")):
            return {
                "webhookSubscription": None,
                "userErrors": [_err(["webhookSubscription", "callbackUrl"], "Address is invalid")],
            }
        if any(w.topic == topic and w.uri == uri for w in self.shop.webhooks.values()):
            return {
                "webhookSubscription": None,
                "userErrors": [
                    _err(["webhookSubscription", "callbackUrl"], "Address for this topic has already been taken")
                ],
            }
        sub = WebhookSubscription(id=self.shop.new_id(), topic=topic, uri=uri, created_at=self.clock())
        self.shop.webhooks[sub.id] = sub
        return {"webhookSubscription": webhook_view(sub), "userErrors": []}


def _only(input: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(k for k, v in input.items() if k not in allowed and v not in (None, []))
    if extra:
        raise NotImplementedByFake(f"{where} fields {extra}")


def _digest(m: Metafield | None) -> str | None:
    return None if m is None else hashlib.sha256(f"{m.id}:{m.value}:{iso(m.updated_at)}".encode()).hexdigest()


def _return_lines(order: Order, items: list[dict[str, Any]]) -> tuple[list[tuple[int, int]], list[dict[str, Any]]]:
    """Return lines against what was fulfilled and is not already being returned."""
    if not order.fulfilled:
        return [], [_err(["orderId"], "Order has no fulfilled line items to return", "INVALID_STATE")]
    taken: dict[int, int] = {}
    for r in order.returns:
        if r.status not in ("DECLINED", "CANCELED"):
            for li_id, q in r.lines:
                taken[li_id] = taken.get(li_id, 0) + q
    lines, errors = [], []
    for i, item in enumerate(items):
        where = ["returnLineItems", str(i)]
        n = parse_gid(item["fulfillmentLineItemId"], "FulfillmentLineItem")
        li = next((x for x in order.line_items if x.id == n), None)
        if li is None:
            errors.append(_err([*where, "fulfillmentLineItemId"], "Fulfillment line item does not exist", "NOT_FOUND"))
        elif not 0 < item["quantity"] <= li.quantity - li.refunded_quantity - taken.get(li.id, 0):
            errors.append(_err([*where, "quantity"], "Quantity is greater than the returnable quantity", "INVALID"))
        else:
            taken[li.id] = taken.get(li.id, 0) + item["quantity"]
            lines.append((li.id, item["quantity"]))
    if not lines and not errors:
        errors.append(_err(["returnLineItems"], "Return must have at least one line item", "BLANK"))
    return lines, errors
