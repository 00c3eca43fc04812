"""Per-tool hooks as data: idempotency keys from the operation's identity (C9),
the money at stake (C5) and one-line approval-card summaries (C7)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tools.catalogue import build_registry
from tools.context import ToolContext
from tools.registry import Money

REG = build_registry()
TOOLS = list(REG.tools.values())


def _ctx(customer_id: str = "C-7", now: datetime | None = None, proposal_id: str | None = None) -> ToolContext:
    principal = SimpleNamespace(customer_id=customer_id)
    fake = SimpleNamespace(
        customer_id=customer_id,
        principal=principal,
        idempotency_key=None,
        proposal_id=proposal_id,
        now=now or datetime(2025, 6, 10, 23, 59, tzinfo=UTC),
    )
    return cast(ToolContext, fake)


KEYS = [
    (
        "issue_refund",
        {
            "order_id": "O-1042",
            "amount_minor": 18900,
            "currency": "USD",
            "reason_code": "damaged",
            "evidence": ["refund-policy@7#window"],
        },
        "refund:O-1042:18900:USD:-",
    ),
    (
        "issue_refund",
        {
            "order_id": "O-1042",
            "amount_minor": 500,
            "currency": "USD",
            "reason_code": "goodwill",
            "return_id": "RT-31",
        },
        "refund:O-1042:500:USD:RT-31",
    ),
    ("cancel_order", {"order_id": "O-1043", "reason_code": "customer_request"}, "cancel:O-1043"),
    (
        "send_message",
        {"channel": "sms", "template": "shipping_delay", "order_id": "O-1044"},
        "message:shipping_delay:C-7:sms:O-1044:2025-06-10",
    ),
    ("send_password_reset", {}, "password_reset:C-7:2025-06-10"),
    ("send_payment_link", {"order_id": "O-1045"}, "payment_link:C-7:O-1045:2025-06-10"),
    ("send_payment_link", {}, "payment_link:C-7:-:2025-06-10"),
    (
        "create_return",
        {
            "order_id": "O-1042",
            "reason_code": "damaged",
            "items": [{"sku": "MUG-1", "qty": 1}, {"sku": "LAMP-9", "qty": 1}],
        },
        "return:O-1042:LAMP-9x1,MUG-1x1",
    ),
    ("create_reorder", {"order_id": "O-1042"}, "reorder:O-1042:2025-06-10"),
    ("retry_payment", {"order_id": "O-1045"}, "retry_payment:O-1045:2025-06-10"),
]


@pytest.mark.parametrize(("name", "args", "expected"), KEYS, ids=[k[0] for k in KEYS])
def test_idempotency_key_is_the_operation_identity(name: str, args: dict[str, Any], expected: str) -> None:
    """Keys come from the operation (order, amount, template, day), never free text."""
    key = REG.tools[name].key
    assert key is not None
    assert key(args, _ctx()) == expected


def test_keys_ignore_free_text_and_order_of_items() -> None:
    """Evidence, reason wording and item order do not change the key; the amount does."""
    refund = REG.tools["issue_refund"].key
    ret = REG.tools["create_return"].key
    assert refund and ret
    base = {"order_id": "O-1", "amount_minor": 100, "currency": "USD", "reason_code": "damaged"}
    assert refund(base, _ctx()) == refund({**base, "reason_code": "goodwill", "evidence": ["a@1#b"]}, _ctx())
    assert refund(base, _ctx()) != refund({**base, "amount_minor": 99}, _ctx())
    items = [{"sku": "A", "qty": 1}, {"sku": "B", "qty": 2}]
    r1 = {"order_id": "O-1", "items": items, "reason_code": "damaged"}
    r2 = {"order_id": "O-1", "items": items[::-1], "reason_code": "wrong_size"}
    assert ret(r1, _ctx()) == ret(r2, _ctx())


def test_address_and_contact_changes_are_keyed_by_the_proposal_not_the_new_value() -> None:
    """A "set it to X" change is one operation per proposal: a retry of the same proposal shares
    its key, a new proposal of the same value does not (so A→B→A really changes it back), and
    the key never embeds the new address or email itself."""
    addr = REG.tools["update_shipping_address"].key
    contact = REG.tools["update_contact_details"].key
    assert addr and contact
    a = {"line1": "1 Main St", "city": "Springfield", "postal_code": "12345", "country": "US"}
    first = addr({"order_id": "O-1", "address": a}, _ctx(proposal_id="prop_1"))
    assert first == addr({"order_id": "O-1", "address": a}, _ctx(proposal_id="prop_1"))
    assert first == "address:O-1:prop_1"
    assert first != addr({"order_id": "O-1", "address": a}, _ctx(proposal_id="prop_3"))
    c1 = contact({"email": "new@example.com"}, _ctx(proposal_id="prop_2"))
    assert c1 == "contact:C-7:prop_2" and "example" not in c1
    assert c1 != contact({"email": "new@example.com"}, _ctx("C-8", proposal_id="prop_2"))
    # Called outside a proposal (a test, a tool), the key still names the operation's arguments.
    assert re.fullmatch(r"address:O-1:[0-9a-f]{64}", addr({"order_id": "O-1", "address": a}, _ctx()))


def test_day_keys_roll_over_at_utc_midnight() -> None:
    """Per-day keys use the UTC date of ctx.now."""
    key = REG.tools["send_password_reset"].key
    assert key
    late = datetime(2025, 6, 10, 23, 59, tzinfo=UTC)
    assert key({}, _ctx(now=late)) != key({}, _ctx(now=datetime(2025, 6, 11, 0, 1, tzinfo=UTC)))


def test_money_hook() -> None:
    """Refunds report their amount for ceilings; cancellations report none at proposal time."""
    refund = REG.tools["issue_refund"].money
    cancel = REG.tools["cancel_order"].money
    assert refund and cancel
    args = {"order_id": "O-1", "amount_minor": 18900, "currency": "USD", "reason_code": "damaged"}
    assert refund(args) == Money(amount_minor=18900, currency="USD")
    assert cancel({"order_id": "O-1", "reason_code": "customer_request"}) is None
    assert all(t.money is None for t in TOOLS if t.name not in ("issue_refund", "cancel_order"))


SUMMARIES = [
    (
        "issue_refund",
        {"order_id": "O-1042", "amount_minor": 18900, "currency": "USD", "reason_code": "damaged"},
        "Refund 189.00 USD on O-1042 (damaged)",
    ),
    (
        "issue_refund",
        {
            "order_id": "O-1042",
            "amount_minor": 500,
            "currency": "JPY",
            "reason_code": "returned",
            "return_id": "RT-31",
        },
        "Refund 500 JPY on O-1042 (returned) for return RT-31",
    ),
    (
        "cancel_order",
        {"order_id": "O-1043", "reason_code": "customer_request"},
        "Cancel O-1043 (customer_request)",
    ),
    (
        "create_return",
        {"order_id": "O-1042", "reason_code": "damaged", "items": [{"sku": "MUG-1", "qty": 2}]},
        "Return 2 x MUG-1 from O-1042 (damaged)",
    ),
    (
        "update_shipping_address",
        {
            "order_id": "O-1043",
            "address": {
                "line1": "9 Elm Rd",
                "city": "Austin",
                "region": "TX",
                "postal_code": "73301",
                "country": "US",
            },
        },
        "Ship O-1043 to 9 Elm Rd, Austin, TX, 73301, US",
    ),
    (
        "send_message",
        {"channel": "email", "template": "order_update", "order_id": "O-1"},
        "Send the order_update email about O-1 to the contact on file",
    ),
    (
        "update_contact_details",
        {"email": "new@example.com"},
        "Change contact details: email to new@example.com",
    ),
]


@pytest.mark.parametrize(("name", "args", "expected"), SUMMARIES, ids=[s[0] for s in SUMMARIES])
def test_summary_is_one_human_readable_line(name: str, args: dict[str, Any], expected: str) -> None:
    """Approval cards show exact arguments in words."""
    assert REG.tools[name].describe(args) == expected
