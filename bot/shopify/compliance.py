"""The shop's mandatory compliance webhooks, done as they say, and audited.

* ``customers/data_request``: what signoff holds on the customer, exported (the export is the
  inbox item's result, ``signoff``'s operator hands it to the merchant);
* ``customers/redact``: that customer's conversations, links and outbox anonymised;
* ``shop/redact``: every customer's.

Each appends one audit event (``compliance.export`` / ``compliance.redact``) naming the
customer only by hash."""

from __future__ import annotations

from typing import Any

from agent.runtime import Runtime
from storage.audit import AuditEvent, hash_personal
from storage.privacy import CustomerData


def customer_ids(body: dict[str, Any]) -> list[str]:
    """The ids signoff may know the body's customer by: the GID and the bare number."""
    raw = (body.get("customer") or {}).get("id")
    if isinstance(raw, int) or (isinstance(raw, str) and raw.isdigit()):
        return [f"gid://shopify/Customer/{int(raw)}", str(int(raw))]
    return []


async def handle(runtime: Runtime, topic: str, body: dict[str, Any], *, event: str) -> dict[str, Any]:
    """Do what ``topic`` asks; the result is stored with the delivery."""
    data = CustomerData(runtime.s.db)
    ids = customer_ids(body)
    ref = hash_personal(ids[0]) if ids else None
    if topic == "customers/data_request":
        export = await data.export(ids) if ids else {"customer_ids": [], "conversations": []}
        await runtime.s.audit.append(
            AuditEvent(
                kind="compliance.export",
                data={"event": event, "customer": ref, "conversations": len(export["conversations"])},
                ts=runtime.s.clock(),
            )  # fmt: skip
        )
        return {"topic": topic, "export": export}
    if topic == "customers/redact" and not ids:
        return {"topic": topic, "redacted": {}, "note": "no customer id in the request"}
    counts = await data.redact(ids if topic == "customers/redact" else None)
    await runtime.s.audit.append(
        AuditEvent(
            kind="compliance.redact",
            data={"event": event, "topic": topic, "customer": ref, **counts},
            ts=runtime.s.clock(),
        )  # fmt: skip
    )
    return {"topic": topic, "redacted": counts}
