"""The shop's mandatory compliance webhooks, done as they say, and audited.

* ``customers/data_request``: what signoff holds on the customer, exported (the export is the
  inbox item's result, ``signoff``'s operator hands it to the merchant);
* ``customers/redact``: that customer's conversations, links and outbox anonymised;
* ``shop/redact``: every customer's.

Each appends one audit event (``compliance.export`` / ``compliance.redact``) naming the
customer only by hash."""

from __future__ import annotations

from typing import Any

from agent.face_port import FacePort
from storage.audit import hash_personal


def customer_ids(body: dict[str, Any]) -> list[str]:
    """The ids signoff may know the body's customer by: the GID and the bare number."""
    raw = (body.get("customer") or {}).get("id")
    if isinstance(raw, int) or (isinstance(raw, str) and raw.isdigit()):
        return [f"gid://shopify/Customer/{int(raw)}", str(int(raw))]
    return []


async def handle(port: FacePort, topic: str, body: dict[str, Any], *, event: str) -> dict[str, Any]:
    """Do what ``topic`` asks; the result is stored with the delivery."""
    data = port.customer_data()
    ids = customer_ids(body)
    ref = hash_personal(ids[0]) if ids else None
    if topic == "customers/data_request":
        export = await data.export(ids) if ids else {"customer_ids": [], "conversations": []}
        await port.face_event(
            "compliance.export", {"event": event, "customer": ref, "conversations": len(export["conversations"])}
        )
        return {"topic": topic, "export": export}
    if topic == "customers/redact" and not ids:
        return {"topic": topic, "redacted": {}, "note": "no customer id in the request"}
    counts = await data.redact(ids if topic == "customers/redact" else None)
    await port.face_event("compliance.redact", {"event": event, "topic": topic, "customer": ref, **counts})
    return {"topic": topic, "redacted": counts}
