"""Shopify's decimal strings and signoff's integer minor units, converted exactly."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from tools.results import minor_exponent


class MoneyShapeError(ValueError):
    """An amount that is not an exact decimal of the currency's minor unit."""


def to_minor(amount: str, currency: str) -> int:
    """``to_minor("18.90", "USD") == 1890``; ``to_minor("500", "JPY") == 500``.

    Exact: an amount with more digits than the currency's minor unit (``"1.005"`` USD) is
    refused rather than rounded."""
    try:
        value = Decimal(str(amount))
    except InvalidOperation:
        raise MoneyShapeError(f"not a decimal amount: {amount!r}") from None
    if not value.is_finite():
        raise MoneyShapeError(f"not a finite amount: {amount!r}")
    scaled = value.scaleb(minor_exponent(currency))
    if scaled != scaled.to_integral_value():
        raise MoneyShapeError(f"{amount} {currency} is not a whole number of minor units")
    return int(scaled)


def from_minor(amount_minor: int, currency: str) -> str:
    """``from_minor(1890, "USD") == "18.90"``: the decimal string Shopify's ``Money`` takes."""
    exp = minor_exponent(currency)
    return str(Decimal(amount_minor).scaleb(-exp).quantize(Decimal(1).scaleb(-exp)))


def bag_minor(bag: Any) -> tuple[int, str]:
    """``(minor units, currency)`` of a ``MoneyBag``'s shop money."""
    money = bag["shopMoney"]
    currency = str(money["currencyCode"])
    return to_minor(str(money["amount"]), currency), currency
