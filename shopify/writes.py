"""``ShopifyBackend``'s writes: each carries the ledger's key to the shop.

* ``issue_refund``: ``refundCreate`` with ``@idempotent(key:)`` and the key in the refund's note;
* ``update_shipping_address``: ``orderUpdate`` with the key in the order's ``signoff.operations``
  metafield, in the same mutation;
* ``update_contact_details``: ``customerUpdate`` with the key in the customer's metafield;
* ``create_return``: ``returnRequest`` with the key in each line's ``customerNote``;
* ``cancel_order``: ``orderCancel`` takes neither, so the key is written to the order's
  metafield first, then the job is started and polled until done;
* ``send_message``: Shopify has none; signoff's own mail through the injected sender, its
  Message-ID derived from the key and recorded after the send (:mod:`shopify.messages`).

A call made again with the same key (the ledger's retry after a crash) finds its own mark and
answers from it; ``lookup_write(key)`` reads the same marks back (:mod:`shopify.ids`)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from shopify import mapping, messages
from shopify.backend import SUPPORTED_TOOLS, ShopifyReads
from shopify.client import AdminClient, ShopifyUnavailable
from shopify.ids import customer_gid, key_target, marker
from shopify.money import from_minor
from tools.backend import (
    Address,
    BackendError,
    Customer,
    MessageChannel,
    Order,
    OutboxMessage,
    Payment,
    Refund,
    Return,
    ReturnItem,
    WriteRecord,
)

Obj = dict[str, Any]
#: Keys kept in one ``signoff.operations`` metafield (the oldest drop off).
OPERATIONS_KEPT = 50
JOB_POLL_S = 0.5
JOB_POLLS = 60
_CANCEL_REASON = {"payment_issue": "DECLINED", "duplicate_order": "CUSTOMER"}
_RETURN_REASON = {
    "damaged": "DEFECTIVE",
    "defective": "DEFECTIVE",
    "wrong_item": "WRONG_ITEM",
    "wrong_size": "SIZE_TOO_SMALL",
    "not_as_described": "NOT_AS_DESCRIBED",
    "changed_mind": "UNWANTED",
}


def _refused(errors: list[Obj] | None, code: str) -> None:
    if errors:
        raise BackendError(code, "; ".join(str(e.get("message", "refused")) for e in errors[:3]))


def _operations_value(holder: Obj | None, key: str, op: str) -> str:
    kept = [e for e in mapping.operations(holder) if e.get("key") != key][-(OPERATIONS_KEPT - 1) :]
    return json.dumps([*kept, {"key": key, "op": op}], separators=(",", ":"))


def _metafield(holder: Obj | None, key: str, op: str) -> Obj:
    return {"namespace": "signoff", "key": "operations", "type": "json", "value": _operations_value(holder, key, op)}


def _marked(holder: Obj | None, key: str) -> bool:
    return any(e.get("key") == key for e in mapping.operations(holder))


class ShopifyBackend(ShopifyReads):
    """A Shopify store as the commerce backend (reads: :class:`ShopifyReads`); ``sender``: the
    mail ``send_message`` goes out by (:mod:`shopify.messages`), else it is not offered."""

    def __init__(self, client: AdminClient, *, sender: messages.MessageSender | None = None) -> None:
        super().__init__(client)
        self.sender = sender
        self.supported_tools = SUPPORTED_TOOLS | (messages.MESSAGE_TOOLS if sender is not None else frozenset())

    async def _must_own(self, customer_id: str, order_id: str) -> Obj:
        found = await self._owned(customer_id, order_id)
        if found is None:
            raise BackendError("not_found", "no such order")
        return found

    # -- refunds ---------------------------------------------------------------------------
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
        """``refundCreate`` @idempotent(key) against the order's captured transactions."""
        o = await self._must_own(customer_id, order_id)
        mine = _refund_by_key(o, idempotency_key)
        if mine is not None:
            return mine
        order = mapping.order(o)
        if amount_minor <= 0:
            raise BackendError("invalid_amount", "a refund must be a positive amount", amount_minor=amount_minor)
        if currency != order.currency:
            raise BackendError("currency_mismatch", f"the order is in {order.currency}", order_currency=order.currency)
        refundable = mapping.refundable(o)
        if amount_minor > refundable:
            raise BackendError(
                "amount_exceeds_refundable",
                f"at most {refundable} can be refunded",
                refundable_minor=refundable,
                currency=order.currency,
            )
        refund_input = {
            "orderId": o["id"],
            "note": f"{marker(idempotency_key)} reason:{reason_code}",
            "notify": True,
            "transactions": _refund_transactions(o, amount_minor, currency),
        }
        data = await self.client.execute("RefundCreate", {"input": refund_input, "key": idempotency_key})
        payload = data["refundCreate"] or {}
        _refused(payload.get("userErrors"), "refund_refused")
        if not payload.get("refund"):
            raise ShopifyUnavailable("Shopify RefundCreate: no refund in the answer")
        return (
            _refund_by_key({**o, "refunds": [payload["refund"]]}, idempotency_key)
            or mapping.refunds({**o, "refunds": [payload["refund"]]})[0]
        )

    # -- cancellation ------------------------------------------------------------------------
    async def cancel_order(self, customer_id: str, order_id: str, *, reason_code: str, idempotency_key: str) -> Order:
        """Mark the key on the order, then ``orderCancel`` (a job, polled until done)."""
        o = await self._must_own(customer_id, order_id)
        if o.get("cancelledAt") and _marked(o, idempotency_key):
            return mapping.order(o)
        status = mapping.order_status(o)
        if status not in ("PENDING", "PAID"):
            raise BackendError("order_not_cancellable", f"a {status} order cannot be cancelled", status=status)
        if not _marked(o, idempotency_key):
            marked = await self.client.execute(
                "OrderUpdate",
                {"input": {"id": o["id"], "metafields": [_metafield(o, idempotency_key, "cancel_order")]}},
            )
            _refused((marked["orderUpdate"] or {}).get("userErrors"), "order_not_cancellable")
        data = await self.client.execute(
            "OrderCancel",
            {
                "orderId": o["id"],
                "reason": _CANCEL_REASON.get(reason_code, "CUSTOMER"),
                "refund": mapping.refundable(o) > 0,
                "staffNote": marker(idempotency_key),
            },
        )
        payload = data["orderCancel"] or {}
        _refused(payload.get("orderCancelUserErrors"), "order_not_cancellable")
        job = payload.get("job") or {}
        await self._await_job(job)
        after = await self._order_obj(str(o["id"]))
        if after is None or not after.get("cancelledAt"):
            raise ShopifyUnavailable("Shopify OrderCancel: the job finished but the order is not cancelled")
        return mapping.order(after)

    async def _await_job(self, job: Obj) -> None:
        polls = 0
        while job.get("id") and not job.get("done"):
            polls += 1
            if polls > JOB_POLLS:
                raise ShopifyUnavailable("Shopify OrderCancel: the job did not finish in time")
            await asyncio.sleep(JOB_POLL_S)
            job = (await self.client.execute("Job", {"id": job["id"]}))["job"] or {}

    # -- address, contact --------------------------------------------------------------------
    async def update_shipping_address(
        self, customer_id: str, order_id: str, *, address: Address, idempotency_key: str
    ) -> Order:
        """``orderUpdate`` of the address and the key's metafield, only while unfulfilled."""
        o = await self._must_own(customer_id, order_id)
        if _marked(o, idempotency_key):
            return mapping.order(o)
        status = mapping.order_status(o)
        if status not in ("PENDING", "PAID") or o.get("displayFulfillmentStatus") != "UNFULFILLED":
            raise BackendError(
                "address_change_not_allowed", f"the address of a {status} order cannot change", status=status
            )
        order_input = {
            "id": o["id"],
            "shippingAddress": mapping.address_input(address),
            "metafields": [_metafield(o, idempotency_key, "update_shipping_address")],
        }
        data = await self.client.execute("OrderUpdate", {"input": order_input})
        payload = data["orderUpdate"] or {}
        _refused(payload.get("userErrors"), "address_change_not_allowed")
        return mapping.order(payload["order"])

    async def update_contact_details(
        self, customer_id: str, *, email: str | None, phone: str | None, idempotency_key: str
    ) -> Customer:
        """``customerUpdate`` of the email or phone, with the key's metafield."""
        ident = customer_gid(customer_id)
        if ident is None:
            raise BackendError("not_found", "no such customer")
        if email is None and phone is None:
            raise BackendError("nothing_to_update", "give a new email or phone")
        current = (await self.client.execute("Customer", {"id": ident}))["customer"]
        if not isinstance(current, dict):
            raise BackendError("not_found", "no such customer")
        if _marked(current, idempotency_key):
            return mapping.customer(current)
        change: Obj = {"id": ident, "metafields": [_metafield(current, idempotency_key, "update_contact_details")]}
        if email is not None:
            change["email"] = email
        if phone is not None:
            change["phone"] = phone
        data = await self.client.execute("CustomerUpdate", {"input": change})
        payload = data["customerUpdate"] or {}
        _refused(payload.get("userErrors"), "contact_update_refused")
        return mapping.customer(payload["customer"])

    # -- returns -------------------------------------------------------------------------------
    async def create_return(
        self,
        customer_id: str,
        order_id: str,
        *,
        items: list[ReturnItem],
        reason_code: str,
        idempotency_key: str,
    ) -> Return:
        """``returnRequest`` of delivered lines (REQUESTED, as the sandbox's ``requested``); each
        line's ``customerNote`` carries the key."""
        o = await self._must_own(customer_id, order_id)
        mine = _return_by_key(o, idempotency_key)
        if mine is not None:
            return mine
        status = mapping.order_status(o)
        if status != "DELIVERED":
            raise BackendError("order_not_delivered", f"a {status} order cannot be returned", status=status)
        if not items:
            raise BackendError("invalid_items", "name at least one item to return")
        lines = _return_lines(o, items, _RETURN_REASON.get(reason_code, "OTHER"), marker(idempotency_key))
        data = await self.client.execute("ReturnRequest", {"input": {"orderId": o["id"], "returnLineItems": lines}})
        payload = data["returnRequest"] or {}
        _refused(payload.get("userErrors"), "return_refused")
        return mapping.return_(payload["return"], str(o["name"]))

    # -- not offered with Shopify ------------------------------------------------------------
    async def create_reorder(self, customer_id: str, order_id: str, *, idempotency_key: str) -> Order:
        """Not offered with this backend."""
        raise BackendError("not_supported", "reorders are not available for this shop")

    async def retry_payment(self, customer_id: str, order_id: str, *, idempotency_key: str) -> Payment:
        """Not offered with this backend."""
        raise BackendError("not_supported", "payment retries are not available for this shop")

    # -- messages: signoff's own mail (Shopify has no messaging API) ----------------------------
    async def send_message(
        self,
        customer_id: str,
        *,
        channel: MessageChannel,
        template: str,
        body: str,
        idempotency_key: str,
    ) -> OutboxMessage:
        """Email to the customer's address on file, through the injected sender (once per key)."""
        if self.sender is None:
            raise BackendError("not_supported", "messages are not available for this shop")
        return await messages.send(
            self.sender,
            await self.get_customer(customer_id),
            channel=channel,
            template=template,
            body=body,
            idempotency_key=idempotency_key,
        )

    async def lookup_message(self, idempotency_key: str) -> WriteRecord | None:
        """The message sent with this key, from signoff's record of the mail that went out."""
        return await messages.lookup(self.sender, idempotency_key)

    # -- reconciliation ------------------------------------------------------------------------
    async def lookup_write(self, idempotency_key: str) -> WriteRecord | None:
        """Whether the write with this key happened, read from the shop (its mark on the object),
        or for a message from the record of the mail sent."""
        sent = await self.lookup_message(idempotency_key)
        if sent is not None:
            return sent
        parsed = key_target(idempotency_key)
        if parsed is None:
            return None
        op, target = parsed
        if op == "contact":
            ident = customer_gid(target)
            found = (await self.client.execute("Customer", {"id": ident}))["customer"] if ident else None
            if isinstance(found, dict) and _marked(found, idempotency_key):
                return WriteRecord(
                    key=idempotency_key, operation="update_contact_details", result={"customer_id": found["id"]}
                )
            return None
        o = await self._order_obj(target)
        if o is None:
            return None
        return _order_record(o, op, idempotency_key)


def _order_record(o: Obj, op: str, key: str) -> WriteRecord | None:
    result: Obj | None = None
    operation = op
    if op == "refund":
        refund = _refund_by_key(o, key)
        operation, result = "issue_refund", ({"refund_id": refund.id} if refund else None)
    elif op == "cancel":
        done = bool(o.get("cancelledAt")) and _marked(o, key)
        operation, result = "cancel_order", ({"order_id": o["name"]} if done else None)
    elif op == "address":
        operation, result = "update_shipping_address", ({"order_id": o["name"]} if _marked(o, key) else None)
    elif op == "return":
        ret = _return_by_key(o, key)
        operation, result = "create_return", ({"return_id": ret.id} if ret else None)
    return WriteRecord(key=key, operation=operation, result=result) if result is not None else None


def _refund_by_key(o: Obj, key: str) -> Refund | None:
    mark = marker(key)
    ids = {str(r["id"]) for r in o.get("refunds") or () if str(r.get("note") or "").split(" reason:")[0] == mark}
    return next((r for r in mapping.refunds(o) if r.id in ids), None)


def _return_by_key(o: Obj, key: str) -> Return | None:
    mark = marker(key)
    for r in (o.get("returns") or {}).get("nodes") or ():
        if mapping.return_marked(r, mark):
            return mapping.return_(r, str(o["name"]))
    return None


def _refund_transactions(o: Obj, amount_minor: int, currency: str) -> list[Obj]:
    """REFUND transactions against the order's successful captures, newest first, up to the amount."""
    left, out = amount_minor, []
    for t in sorted(o.get("transactions") or (), key=lambda t: str(t.get("createdAt")), reverse=True):
        if left <= 0:
            break
        if t.get("status") != "SUCCESS" or t.get("kind") not in ("SALE", "CAPTURE"):
            continue
        take = min(left, mapping.bag_minor_of(t))
        out.append(
            {
                "orderId": o["id"],
                "parentId": t["id"],
                "amount": from_minor(take, currency),
                "gateway": t.get("gateway") or "manual",
                "kind": "REFUND",
            }  # fmt: skip
        )
        left -= take
    return out


def _return_lines(o: Obj, items: list[ReturnItem], reason: str, note: str) -> list[Obj]:
    """One ``ReturnLineItemInput`` per wanted SKU, from the order's fulfilled lines."""
    available: dict[str, list[tuple[str, int]]] = {}
    for f in o.get("fulfillments") or ():
        for fli in (f.get("fulfillmentLineItems") or {}).get("nodes") or ():
            sku = str((fli.get("lineItem") or {}).get("sku") or "")
            available.setdefault(sku, []).append((str(fli["id"]), int(fli.get("quantity") or 0)))
    lines = []
    for item in items:
        left = item.qty
        for fli_id, qty in available.get(item.sku, []):
            take = min(left, qty)
            if take > 0:
                lines.append({"fulfillmentLineItemId": fli_id, "quantity": take, "returnReason": reason,
                              "customerNote": note})  # fmt: skip
                left -= take
        if left > 0 or item.qty < 1:
            raise BackendError(
                "invalid_items",
                f"{item.sku!r} x{item.qty} cannot be returned from this order",
                sku=item.sku,
                qty=item.qty,
            )
    return lines
