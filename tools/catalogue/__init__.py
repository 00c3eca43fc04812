"""The tool catalogue: every tool the model can be offered, in a stable order.

Order is ``always``, then ``account``, ``orders``, ``returns``, ``billing``
(and, inside each group, the order the module lists them): the tool list is
the start of the cached prompt prefix, so it must not shuffle between runs.

Each group module exports ``TOOLS``; its handlers and hooks are private, and
what the model reads about each tool is its ``ToolDef.description`` (kept
under test in ``tests/snapshots/tool_schemas.json``).
"""

from __future__ import annotations

from tools.catalogue import account, always, billing, orders, returns
from tools.registry import Registry

#: One line per loadable group, shown to the model for the groups not loaded.
GROUP_BLURBS: dict[str, str] = {
    "account": "profile and contact details on file, saved cards, password reset, payment links",
    "orders": "order lookup, shipment tracking, cancel, change delivery address, reorder, order messages",
    "returns": "return status and starting a return for delivered items",
    "billing": "payments, invoices, refunds, retrying a failed payment",
}


def build_registry() -> Registry:
    """All tools, in the stable order the prompt cache relies on."""
    tools = (*always.TOOLS, *account.TOOLS, *orders.TOOLS, *returns.TOOLS, *billing.TOOLS)
    return Registry.of(tools, GROUP_BLURBS)


__all__ = ["GROUP_BLURBS", "build_registry"]
