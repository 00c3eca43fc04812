"""Shopify app-proxy requests: the customer the storefront names, if Shopify signed it.

A storefront request to ``/apps/signoff/…`` reaches us with these URL parameters from Shopify
(``shop``, ``logged_in_customer_id``, ``path_prefix``, ``timestamp``, ``signature``).
``signature`` is the hex HMAC-SHA256, keyed with the app's client secret, of every other
parameter as ``key=value`` (a repeated key's values joined by commas), sorted, concatenated
without a separator. The timestamp must be within five minutes of now. An empty
``logged_in_customer_id`` is a guest. Anything else is refused before anything is stored.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable
from dataclasses import dataclass

MAX_SKEW_S = 300
_SHOP_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")


class ProxyRejected(Exception):
    """The request is not one Shopify signed for us now (401)."""


@dataclass(frozen=True, kw_only=True)
class ProxyIdentity:
    shop: str
    #: Shopify's numeric customer id, or ``None`` for a guest.
    customer: str | None


def canonical(pairs: Iterable[tuple[str, str]]) -> str:
    """The signed string: ``key=v1,v2`` per key (values in the order given), sorted, joined."""
    grouped: dict[str, list[str]] = {}
    for key, value in pairs:
        if key != "signature":
            grouped.setdefault(key, []).append(value)
    return "".join(sorted(f"{k}={','.join(v)}" for k, v in grouped.items()))


def sign(pairs: Iterable[tuple[str, str]], secret: str) -> str:
    return hmac.new(secret.encode(), canonical(pairs).encode(), hashlib.sha256).hexdigest()


def verify(pairs: list[tuple[str, str]], secret: str | None, *, now: float | None = None) -> ProxyIdentity:
    """The identity of a signed app-proxy request; :class:`ProxyRejected` otherwise."""
    if not secret:
        raise ProxyRejected("the app proxy is not configured")
    given = [v for k, v in pairs if k == "signature"]
    if len(given) != 1 or not hmac.compare_digest(given[0].lower().encode(), sign(pairs, secret).encode()):
        raise ProxyRejected("bad signature")
    values = {k: [v for kk, v in pairs if kk == k] for k, _ in pairs}
    stamp = values.get("timestamp", [""])
    if len(stamp) != 1 or not stamp[0].isdigit():
        raise ProxyRejected("no timestamp")
    if abs((now if now is not None else time.time()) - int(stamp[0])) > MAX_SKEW_S:
        raise ProxyRejected("stale timestamp")
    shop = values.get("shop", [""])
    if len(shop) != 1 or not shop[0] or len(shop[0]) > 255 or not set(shop[0]) <= _SHOP_CHARS:
        raise ProxyRejected("no shop")
    customer = values.get("logged_in_customer_id", [])
    who = customer[0] if len(customer) == 1 else ""
    if len(customer) > 1 or (who and (len(who) > 64 or not who.replace("-", "").isalnum())):
        raise ProxyRejected("bad customer id")
    return ProxyIdentity(shop=shop[0], customer=who or None)


def signed_query(params: dict[str, str], secret: str) -> list[tuple[str, str]]:
    """``params`` with Shopify's ``signature`` added (the storefront's side: tests and the demo)."""
    pairs = list(params.items())
    return [*pairs, ("signature", sign(pairs, secret))]


__all__ = ["MAX_SKEW_S", "ProxyIdentity", "ProxyRejected", "canonical", "sign", "signed_query", "verify"]
