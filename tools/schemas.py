"""Shared JSON-Schema fragments for the tool catalogue.

Every fragment is strict: patterns or enums over free text, ``maxLength`` on
every string, integer money in minor units, and ``additionalProperties: false``
on every object (:func:`obj` adds it). The fragments are plain dicts; callers
get fresh copies so no two schemas share a mutable object.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

Schema = dict[str, Any]

#: The sandbox's ``O-1042``; a Shopify order's name ``#1001`` (or ``1001``) or its GID.
ORDER_ID_PATTERN = r"^(O-[0-9A-Za-z]{1,16}|#?[0-9]{1,12}|gid://shopify/Order/[0-9]{1,20})$"
RETURN_ID_PATTERN = r"^(RT-[0-9A-Za-z]{1,16}|gid://shopify/Return/[0-9]{1,20})$"
INVOICE_ID_PATTERN = r"^INV-[0-9A-Za-z]{1,16}$"
EVIDENCE_ID_PATTERN = r"^[a-z0-9-]+@[0-9]+#[a-z0-9-]+$"
SKU_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_./:-]{0,63}$"
#: Ids a tool returned for an action (refunds, returns, messages, orders).
ACTION_ID_PATTERN = r"^[A-Za-z0-9_.:/-]{1,64}$"

#: Invisible formatting characters that can make text read differently to a person and to code:
#: bidirectional embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069), zero-width
#: characters and directional marks (U+200B–U+200F), the word joiner (U+2060) and the BOM (U+FEFF).
INVISIBLE_CONTROLS = "".join(
    chr(c) for c in (*range(0x200B, 0x2010), *range(0x202A, 0x202F), 0x2060, *range(0x2066, 0x206A), 0xFEFF)
)
#: Free text without them (ECMA-262 and Python ``re`` read the ``\\uXXXX`` escapes alike).
NO_INVISIBLE_CONTROLS_PATTERN = r"^[^\u200B-\u200F\u202A-\u202E\u2060\u2066-\u2069\uFEFF]*$"

#: The most money a single call may name (1,000,000.00 in a two-decimal currency).
MAX_AMOUNT_MINOR = 100_000_000

REFUND_REASONS = (
    "damaged",
    "defective",
    "not_received",
    "wrong_item",
    "wrong_size",
    "not_as_described",
    "late_delivery",
    "returned",
    "changed_mind",
    "duplicate_charge",
    "cancelled_order",
    "price_adjustment",
    "customer_request",
    "goodwill",
)
CANCEL_REASONS = (
    "customer_request",
    "ordered_by_mistake",
    "duplicate_order",
    "delivery_too_slow",
    "payment_issue",
    "address_issue",
)
RETURN_REASONS = (
    "damaged",
    "defective",
    "wrong_item",
    "wrong_size",
    "not_as_described",
    "arrived_late",
    "changed_mind",
)
ESCALATION_REASONS = (
    "customer_request",
    "policy_exception",
    "cannot_resolve",
    "tool_failure",
    "suspected_fraud",
    "sensitive_topic",
    "complaint",
    "other",
)
MESSAGE_TEMPLATES = ("order_update", "shipping_delay", "return_label", "refund_confirmation")
MESSAGE_CHANNELS = ("email", "sms")
ORDER_STATUSES = ("PENDING", "PAID", "SHIPPED", "DELIVERED", "CANCELLED")
KNOWLEDGE_KINDS = ("policy", "help")
TOOL_GROUPS = ("account", "orders", "returns", "billing")


def obj(properties: Mapping[str, Schema], required: Iterable[str] = (), **extra: Any) -> Schema:
    """An object schema that rejects unknown keys."""
    schema: Schema = {
        "type": "object",
        "properties": {k: copy.deepcopy(v) for k, v in properties.items()},
        "additionalProperties": False,
    }
    req = list(required)
    if req:
        unknown = set(req) - set(properties)
        if unknown:
            raise ValueError(f"required names unknown properties: {sorted(unknown)}")
        schema["required"] = req
    schema.update(extra)
    return schema


def text(max_length: int, description: str, *, min_length: int = 1) -> Schema:
    """Free text, bounded, with no bidi or zero-width controls (:data:`NO_INVISIBLE_CONTROLS_PATTERN`).
    Use only where no enum or pattern can describe the value."""
    return {
        "type": "string",
        "minLength": min_length,
        "maxLength": max_length,
        "pattern": NO_INVISIBLE_CONTROLS_PATTERN,
        "description": description,
    }


def enum(values: Iterable[str], description: str) -> Schema:
    """A closed set of strings."""
    return {"type": "string", "enum": list(values), "description": description}


def pattern(regex: str, max_length: int, description: str) -> Schema:
    """A string that must match ``regex``."""
    return {"type": "string", "pattern": regex, "maxLength": max_length, "description": description}


def order_id() -> Schema:
    """An order id."""
    return pattern(ORDER_ID_PATTERN, 40, "Order id as shown to the customer, e.g. O-1042 or #1001.")


def return_id() -> Schema:
    """A return id."""
    return pattern(RETURN_ID_PATTERN, 40, "Return id as get_order or list_returns shows it, e.g. RT-31.")


def invoice_id() -> Schema:
    """An invoice id."""
    return pattern(INVOICE_ID_PATTERN, 20, "Invoice id, e.g. INV-2001.")


def evidence_id() -> Schema:
    """An evidence id as ``search_knowledge`` returns it."""
    return pattern(
        EVIDENCE_ID_PATTERN,
        128,
        "An evidence_id exactly as search_knowledge returned it, e.g. refund-policy@7#window.",
    )


def evidence() -> Schema:
    """The citations a tier-2 action carries: evidence ids retrieved in this run."""
    return {
        "type": "array",
        "items": evidence_id(),
        "minItems": 1,
        "maxItems": 5,
        "uniqueItems": True,
        "description": "evidence_ids from search_knowledge results in this conversation "
        "that justify the action. Never invent one.",
    }


def amount_minor() -> Schema:
    """A positive amount in minor units."""
    return {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_AMOUNT_MINOR,
        "description": "Amount in minor units: 18900 means 189.00 in a two-decimal currency.",
    }


def currency() -> Schema:
    """An ISO 4217 currency code."""
    return pattern(r"^[A-Z]{3}$", 3, "ISO 4217 currency code of the order, e.g. USD.")


def address() -> Schema:
    """A postal address (country as ISO 3166-1 alpha-2)."""
    return obj(
        {
            "line1": text(200, "Street and number."),
            "line2": text(200, "Apartment, suite, floor (optional)."),
            "city": text(100, "City."),
            "region": text(100, "State, province or region (optional)."),
            "postal_code": pattern(r"^[A-Za-z0-9][A-Za-z0-9 -]{1,11}$", 12, "Postal code."),
            "country": pattern(r"^[A-Z]{2}$", 2, "ISO 3166-1 alpha-2 country code, e.g. US."),
        },
        required=("line1", "city", "postal_code", "country"),
    )


def return_items() -> Schema:
    """Which items of an order to return, by SKU and quantity."""
    return {
        "type": "array",
        "minItems": 1,
        "maxItems": 50,
        "items": obj(
            {
                "sku": pattern(SKU_PATTERN, 64, "The item's SKU exactly as get_order lists it."),
                "qty": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100,
                    "description": "Quantity.",
                },
            },
            required=("sku", "qty"),
        ),
        "description": "Items to return, each SKU once.",
    }


def email() -> Schema:
    """An email address."""
    return pattern(
        r"^[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}$",
        254,
        "Email address.",
    )


def phone() -> Schema:
    """A phone number."""
    return pattern(r"^\+[1-9][0-9]{6,14}$", 16, "Phone number in E.164 form, e.g. +14155550123.")


def iter_object_schemas(schema: Any) -> Iterable[Schema]:
    """Every object-typed sub-schema (for the strictness tests)."""
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            yield schema
        for value in schema.values():
            yield from iter_object_schemas(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from iter_object_schemas(value)
