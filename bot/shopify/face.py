"""``POST /shopify/webhooks``: verified, deduplicated and persisted before the 200.

The route checks the HMAC of the raw body (a bad or missing one is 401 and nothing is
stored), then records the delivery with its job through the inbox (``Inbox.accept("shopify",
…)``, keyed by the event id) and answers 200. The worker hands the item to :meth:`handle`:
a refund, cancellation or return staff made in the admin is recorded as a staff action
(``signoff rollout report``); the compliance topics go to :mod:`bot.shopify.compliance`."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from aiohttp import web

from agent.face_port import FacePort
from bot.shopify import compliance
from shopify.config import ShopifyConfig
from shopify.webhooks import (
    COMPLIANCE_TOPICS,
    TOPICS,
    OutsideAction,
    cancel_action,
    event_id,
    order_gid,
    refund_action,
    return_action,
    verify,
)
from shopify.writes import ShopifyBackend
from storage.inbox import Inbound
from storage.rollout import StaffAction

log = logging.getLogger("signoff.shopify")
FACE = "shopify"
#: Who an outside action is recorded as: staff in the shop's admin (a rep, for the report).
ADMIN_PRINCIPAL = "rep:shopify-admin"


def _reject(status: int, error: str) -> web.Response:
    return web.json_response({"error": error}, status=status)


@dataclass(kw_only=True)
class ShopifyFace:
    """The webhook endpoint of one store and its worker handler."""

    config: ShopifyConfig
    backend: ShopifyBackend
    port: FacePort

    def routes(self) -> list[web.RouteDef]:
        """``POST /shopify/webhooks``."""
        return [web.post("/shopify/webhooks", self.receive)]

    async def receive(self, request: web.Request) -> web.Response:
        """Verify, deduplicate, persist, then 200."""
        raw = await request.read()
        secret = self.config.webhook_secret.get_secret_value() if self.config.webhook_secret else ""
        if not verify(secret, raw, request.headers.get("X-Shopify-Hmac-Sha256")):
            return _reject(401, "bad_signature")
        shop = request.headers.get("X-Shopify-Shop-Domain")
        if shop is not None and shop != self.config.shop:
            return _reject(401, "wrong_shop")
        topic = request.headers.get("X-Shopify-Topic", "")
        event = event_id(request.headers)
        if event is None:
            return _reject(400, "missing_event_id")
        try:
            body = json.loads(raw)
        except ValueError:
            return _reject(400, "not_json")
        if not isinstance(body, dict):
            return _reject(400, "not_an_object")
        if topic not in TOPICS and topic not in COMPLIANCE_TOPICS:
            return web.json_response({"ok": True, "ignored": topic[:64]})
        payload = {"topic": topic, "event_id": event, "body": body}
        # Not capped: the shop's deliveries are few and each one must be recorded.
        accepted = await self.port.accept(FACE, [f"shopify:{event}"], payload, capped=False)
        return web.json_response({"ok": True, "duplicate": not accepted.fresh})

    # -- the worker's side ---------------------------------------------------------------
    async def handle(self, item: Inbound) -> None:
        """One accepted delivery (``App.inbound["shopify"]``); safe to run again."""
        life = self.port.item(item)
        topic = str(item.payload.get("topic", ""))
        body = item.payload.get("body") or {}
        event = str(item.payload.get("event_id", item.id))
        if topic in COMPLIANCE_TOPICS:
            result = await compliance.handle(self.port, topic, body, event=event)
            await life.answered(result)
            await life.delivered()
            return
        action = await self._outside_action(topic, body)
        if action is None:
            await life.finished("ignored")
            return
        # One row per admin action, whichever topic or redelivery told us (a return's request
        # and approval are one return): keyed by the object, else by the event.
        subject = body.get("admin_graphql_api_id") if topic != "orders/cancelled" else f"cancel:{body.get('id')}"
        staff = StaffAction(
            proposal_id=f"shopify:{subject or event}"[:128],
            tool=action.tool,
            arguments=action.arguments,
            created_at=item.created_at if item.created_at.tzinfo else item.created_at.replace(tzinfo=UTC),
            principal=ADMIN_PRINCIPAL,
            customer_id=action.customer_id,
        )
        await self.port.record_outside_action(staff, source=FACE)
        log.info("shopify: a staff %s made in the admin recorded (event %s)", action.tool, event)
        await life.delivered()

    async def _outside_action(self, topic: str, body: dict[str, Any]) -> OutsideAction | None:
        if topic == "refunds/create":
            order = await self._order(order_gid(body))
            return refund_action(body, order) if order is not None else None
        if topic == "orders/cancelled":
            order = await self._order(order_gid(body))
            return cancel_action(body, order) if order is not None else None
        if topic in ("returns/request", "returns/approve"):
            ret = await self.backend.raw_return(str(body.get("admin_graphql_api_id") or ""))
            if ret is None:
                return None
            order = await self._order(str((ret.get("order") or {}).get("id") or ""))
            return return_action(ret, order) if order is not None else None
        return None  # orders/updated, customers/update: the tools read the shop live, nothing to record

    async def _order(self, gid: str | None) -> dict[str, Any] | None:
        return await self.backend.raw_order(gid) if gid else None
