"""Shopify's ids as signoff shows and accepts them.

A customer is ``gid://shopify/Customer/<n>`` (the bare number is accepted too); an order is
shown by its name ``#1001`` and accepted as ``#1001``, ``1001`` or its GID; a return is its
GID. The ledger's keys start ``{operation}:{target}`` (``refund:#1001:…``, ``contact:<customer>:…``);
:func:`key_target` reads the target back for ``lookup_write``."""

from __future__ import annotations

import re

_GID = re.compile(r"^gid://shopify/(?P<kind>[A-Za-z]+)/(?P<n>[0-9]{1,20})$")
_NAME = re.compile(r"^#?(?P<n>[0-9]{1,12})$")
_KEY = re.compile(r"^(?P<op>[a-z_]+):(?P<target>gid://shopify/[A-Za-z]+/[0-9]{1,20}|#?[0-9]{1,12})(?::|$)")


def gid(kind: str, ident: str) -> str | None:
    """``ident`` as a GID of ``kind`` (a GID of that kind, or a bare number); ``None`` otherwise."""
    m = _GID.match(ident)
    if m is not None:
        return ident if m["kind"] == kind else None
    if ident.isdigit() and 0 < len(ident) <= 20:
        return f"gid://shopify/{kind}/{ident}"
    return None


def customer_gid(ident: str) -> str | None:
    """A customer reference as its GID, or ``None`` when it is not one."""
    return gid("Customer", ident)


def order_ref(ident: str) -> tuple[str, str] | None:
    """``("gid", gid)`` or ``("name", "#1001")`` for an order reference; ``None`` when malformed."""
    m = _GID.match(ident)
    if m is not None:
        return ("gid", ident) if m["kind"] == "Order" else None
    n = _NAME.match(ident)
    if n is not None:
        return ("name", f"#{n['n']}")
    return None


def key_target(key: str) -> tuple[str, str] | None:
    """``(operation, target)`` of a ledger key ``{operation}:{target}:…``; ``None`` otherwise."""
    m = _KEY.match(key)
    return (m["op"], m["target"]) if m is not None else None


def marker(key: str) -> str:
    """The text that carries a ledger key on a Shopify object (a refund's note, a return line)."""
    return f"signoff:{key}"
