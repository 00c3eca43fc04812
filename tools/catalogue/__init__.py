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


def build_registry(supported: frozenset[str] | None = None) -> Registry:
    """All tools, in the stable order the prompt cache relies on.

    ``supported``: the backend's capability declaration (``supported_tools``, see
    :func:`supported_by`): a tool the shop cannot do is left out, so the model is never offered
    it; the runtime's own tools (``finish``, ``load_tools``, the case tools) always stay."""
    tools = (*always.TOOLS, *account.TOOLS, *orders.TOOLS, *returns.TOOLS, *billing.TOOLS)
    if supported is not None:
        tools = tuple(t for t in tools if t.meta.runtime or t.name in supported)
    return Registry.of(tools, GROUP_BLURBS)


def supported_by(backend: object) -> frozenset[str] | None:
    """The tools ``backend`` declares it carries out (its ``supported_tools``); ``None``: all."""
    declared = getattr(backend, "supported_tools", None)
    return frozenset(declared) if declared is not None else None


__all__ = ["GROUP_BLURBS", "build_registry", "supported_by"]
