"""The catalogue as data: names, order, metadata, scopes, schema strictness,
idempotency keys and approval-card summaries (C3, C4, C9)."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest

from tools.catalogue import GROUP_BLURBS, build_registry
from tools.context import LOADABLE_GROUPS
from tools.schemas import iter_object_schemas

REG = build_registry()
TOOLS = list(REG.tools.values())

CONTRACT = {
    "always": [
        "search_knowledge",
        "get_case",
        "add_case_note",
        "escalate_to_human",
        "finish",
        "load_tools",
    ],
    "account": [
        "get_account",
        "list_payment_methods",
        "update_contact_details",
        "send_password_reset",
        "send_payment_link",
    ],
    "orders": [
        "get_order",
        "list_orders",
        "track_shipment",
        "cancel_order",
        "update_shipping_address",
        "create_reorder",
        "send_message",
    ],
    "returns": ["get_return", "list_returns", "create_return"],
    "billing": ["get_invoices", "list_payments", "issue_refund", "retry_payment"],
}

#: name → (kind, tier, scope, needs_confirmation, requires_evidence)
TABLE: dict[str, tuple[str, int, str, bool, bool]] = {
    "search_knowledge": ("read", 0, "knowledge:read", False, False),
    "get_case": ("read", 0, "case:read", False, False),
    "add_case_note": ("action", 0, "case:write", False, False),
    "escalate_to_human": ("action", 0, "case:escalate", False, False),
    "finish": ("action", 0, "run:control", False, False),
    "load_tools": ("action", 0, "run:control", False, False),
    "get_account": ("read", 0, "account:read", False, False),
    "list_payment_methods": ("read", 0, "account:read", False, False),
    "update_contact_details": ("action", 3, "account:contact", True, True),
    "send_password_reset": ("action", 1, "account:write", True, False),
    "send_payment_link": ("action", 1, "account:write", True, False),
    "get_order": ("read", 0, "orders:read", False, False),
    "list_orders": ("read", 0, "orders:read", False, False),
    "track_shipment": ("read", 0, "orders:read", False, False),
    "cancel_order": ("action", 2, "orders:write", True, True),
    "update_shipping_address": ("action", 1, "orders:write", True, False),
    "create_reorder": ("action", 1, "orders:write", True, False),
    "send_message": ("action", 1, "messages:send", True, False),
    "get_return": ("read", 0, "returns:read", False, False),
    "list_returns": ("read", 0, "returns:read", False, False),
    "create_return": ("action", 1, "returns:write", True, False),
    "get_invoices": ("read", 0, "billing:read", False, False),
    "list_payments": ("read", 0, "billing:read", False, False),
    "issue_refund": ("action", 2, "billing:refund", True, True),
    "retry_payment": ("action", 1, "billing:write", True, False),
}

RUNTIME = {"search_knowledge", "get_case", "add_case_note", "escalate_to_human", "finish", "load_tools"}


def test_registry_holds_the_contract_tool_names_in_stable_group_order() -> None:
    """Names are public contract; order is always, account, orders, returns, billing."""
    expected = [name for group in CONTRACT.values() for name in group]
    assert list(REG.tools) == expected
    assert [t.meta.group for t in TOOLS] == [g for g, names in CONTRACT.items() for _ in names]
    assert list(build_registry().tools) == expected  # deterministic across builds


@pytest.mark.parametrize("name", list(TABLE))
def test_metadata_table(name: str) -> None:
    """Kind, tier, scope, confirmation and evidence flags per tool."""
    kind, tier, scope, confirm, evidence = TABLE[name]
    meta = REG.tools[name].meta
    assert (meta.kind, meta.risk_tier, meta.scopes) == (kind, tier, frozenset({scope}))
    assert (meta.needs_confirmation, meta.requires_evidence) == (confirm, evidence)
    assert meta.runtime == (name in RUNTIME)


def test_read_and_action_naming_convention() -> None:
    """Reads are named get_/list_/search_/track_; actions are verbs, not read prefixes."""
    read_prefix = re.compile(r"^(get|list|search|track)_")
    for tool in TOOLS:
        assert bool(read_prefix.match(tool.name)) == (tool.meta.kind == "read"), tool.name


def test_risky_tools_flags() -> None:
    """Evidence for tier ≥ 2, confirmation for every tier ≥ 1 action, retry_payment never
    retried, approval expiry 24 h for refunds and 4 h for cancellations."""
    for tool in TOOLS:
        assert tool.meta.requires_evidence == (tool.meta.risk_tier >= 2)
        assert tool.meta.needs_confirmation == (tool.meta.risk_tier >= 1)
        assert ("evidence" in tool.input_schema["properties"]) == tool.meta.requires_evidence
        assert tool.meta.retryable == (tool.name != "retry_payment")
        assert tool.meta.timeout_s > 0
    assert REG.tools["issue_refund"].meta.approval_expiry_s == 24 * 3600
    assert REG.tools["cancel_order"].meta.approval_expiry_s == 4 * 3600
    assert REG.tools["send_message"].meta.approval_expiry_s == 24 * 3600


def test_every_backend_action_has_key_check_and_summary() -> None:
    """Each tier ≥ 1 action derives an idempotency key, re-checks rules and renders a card line."""
    for tool in TOOLS:
        if tool.meta.risk_tier >= 1:
            assert tool.key and tool.check and tool.summary, tool.name
        if tool.meta.kind == "read":
            assert tool.key is None and tool.check is None


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_schema_is_valid_draft_2020_12_and_strict(tool: Any) -> None:
    """Every schema is valid Draft 2020-12, closed at every object level, every string bounded."""
    jsonschema.Draft202012Validator.check_schema(tool.input_schema)
    assert tool.input_schema["type"] == "object"
    objects = list(iter_object_schemas(tool.input_schema))
    assert objects
    for sub in objects:
        assert sub.get("additionalProperties") is False, tool.name
        assert set(sub.get("required", [])) <= set(sub["properties"])
    for string in _strings(tool.input_schema):
        assert "maxLength" in string or "enum" in string, (tool.name, string)


def _strings(schema: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if isinstance(schema, dict):
        if schema.get("type") == "string":
            out.append(schema)
        for value in schema.values():
            out.extend(_strings(value))
    elif isinstance(schema, list):
        for value in schema:
            out.extend(_strings(value))
    return out


def _props(schema: Any) -> set[str]:
    names: set[str] = set()
    for sub in iter_object_schemas(schema):
        names |= set(sub["properties"])
    return names


def test_no_tool_takes_a_customer_id_or_an_address_for_messages() -> None:
    """Identity comes from the session (S1); messages take no address or free body (S3)."""
    for tool in TOOLS:
        assert not {"customer_id", "customer", "account_id"} & _props(tool.input_schema)
    for name in ("send_message", "send_password_reset", "send_payment_link"):
        props = _props(REG.tools[name].input_schema)
        assert not {"to", "email", "phone", "address", "body", "text", "recipient"} & props


def test_send_message_schema_refuses_any_address_or_body() -> None:
    """An injected recipient or body is a schema error, not a parameter."""
    validator = jsonschema.Draft202012Validator(REG.tools["send_message"].input_schema)
    ok = {"channel": "email", "template": "order_update", "order_id": "O-1042"}
    assert validator.is_valid(ok)
    for extra in ({"to": "evil@example.com"}, {"body": "hi"}, {"email": "x@y.z"}):
        assert not validator.is_valid({**ok, **extra})
    assert not validator.is_valid({**ok, "template": "free_text"})
    assert not validator.is_valid({**ok, "channel": "slack"})


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("get_order", {"order_id": "1042; DROP TABLE"}),
        ("get_order", {"order_id": "O-1042", "customer_id": "C-8"}),
        (
            "issue_refund",
            {"order_id": "O-1", "amount_minor": 0, "currency": "USD", "reason_code": "damaged"},
        ),
        (
            "issue_refund",
            {"order_id": "O-1", "amount_minor": 1.5, "currency": "USD", "reason_code": "damaged"},
        ),
        (
            "issue_refund",
            {"order_id": "O-1", "amount_minor": 100, "currency": "usd", "reason_code": "damaged"},
        ),
        (
            "issue_refund",
            {
                "order_id": "O-1",
                "amount_minor": 100,
                "currency": "USD",
                "reason_code": "because I said so",
            },
        ),
        (
            "issue_refund",
            {
                "order_id": "O-1",
                "amount_minor": 100,
                "currency": "USD",
                "reason_code": "damaged",
                "evidence": ["see the order note"],
            },
        ),
        (
            "issue_refund",
            {
                "order_id": "O-1",
                "amount_minor": 100,
                "currency": "USD",
                "reason_code": "damaged",
                "evidence": [],
            },
        ),
        ("cancel_order", {"order_id": "O-1"}),
        ("load_tools", {"group": "admin"}),
        ("update_contact_details", {}),
        ("update_contact_details", {"email": "not an email"}),
        (
            "update_shipping_address",
            {
                "order_id": "O-1",
                "address": {"line1": "x", "city": "y", "postal_code": "123", "country": "USA"},
            },
        ),
        ("create_return", {"order_id": "O-1", "items": [], "reason_code": "damaged"}),
        ("search_knowledge", {"query": "x" * 301}),
        ("finish", {"resolution": "done", "action_ids": [], "sources": ["made up"]}),
    ],
)
def test_schema_rejects_malformed_arguments(name: str, args: dict[str, Any]) -> None:
    """Patterns, enums, integer money and closed objects reject what the model must not send."""
    assert not jsonschema.Draft202012Validator(REG.tools[name].input_schema).is_valid(args)


def test_evidence_id_pattern_accepts_the_documented_form() -> None:
    """``{doc_id}@{version}#{section_id}`` as search_knowledge returns it."""
    schema = REG.tools["issue_refund"].input_schema
    args = {
        "order_id": "O-1042",
        "amount_minor": 18900,
        "currency": "USD",
        "reason_code": "damaged",
        "evidence": ["refund-policy@7#window"],
        "return_id": "RT-31",
    }
    jsonschema.Draft202012Validator(schema).validate(args)


def test_group_blurbs_list_unloaded_groups_one_line_each() -> None:
    """The model sees the groups it has not loaded, one line each (C4)."""
    assert set(GROUP_BLURBS) == set(LOADABLE_GROUPS)
    listing = REG.unloaded_listing(["orders"])
    assert listing.splitlines() == [f"- {g}: {GROUP_BLURBS[g]}" for g in ("account", "returns", "billing")]
    specs = REG.specs_for(["billing"])
    assert [s.name for s in specs] == CONTRACT["always"] + CONTRACT["billing"]


def test_descriptions_say_what_and_when() -> None:
    """Descriptions are substantial and the risky ones say when not to act."""
    for tool in TOOLS:
        assert 60 <= len(tool.description) <= 700, tool.name
    assert "another customer" in REG.tools["issue_refund"].description
    assert "evidence" in REG.tools["issue_refund"].description
    assert "other address" in REG.tools["send_message"].description


def test_every_free_text_argument_refuses_bidi_and_zero_width_controls() -> None:
    """Each free-text string schema (maxLength, no enum) the model fills carries the pattern that
    refuses U+202A–U+202E, U+2066–U+2069, U+200B–U+200F, U+2060 and U+FEFF, and still takes
    ordinary text in any script."""
    import re

    from tools.catalogue import build_registry
    from tools.schemas import INVISIBLE_CONTROLS

    def strings(schema: Any, path: str) -> list[tuple[str, dict[str, Any]]]:
        found: list[tuple[str, dict[str, Any]]] = []
        if isinstance(schema, dict):
            if schema.get("type") == "string" and "enum" not in schema:
                found.append((path, schema))
            for key, value in schema.items():
                found += strings(value, f"{path}.{key}")
        elif isinstance(schema, list):
            for i, value in enumerate(schema):
                found += strings(value, f"{path}[{i}]")
        return found

    specs = build_registry().specs_for(["account", "orders", "returns", "billing"])
    checked = 0
    for spec in specs:
        for path, schema in strings(spec.input_schema, spec.name):
            pattern = schema.get("pattern")
            assert pattern, f"{path} is free text without a pattern"
            for ch in INVISIBLE_CONTROLS:
                assert not re.search(pattern, f"ok{ch}"), f"{path} accepts U+{ord(ch):04X}"
            checked += 1
    assert checked >= 10 and len(INVISIBLE_CONTROLS) == 5 + 5 + 1 + 4 + 1
    from tools.schemas import NO_INVISIBLE_CONTROLS_PATTERN

    assert re.search(NO_INVISIBLE_CONTROLS_PATTERN, "Café — שלום, 東京 👍\nline two")


# -- per-tool knowledge lives on the definition (adding a tool touches only the catalogue) ----


def test_every_backend_action_says_how_it_is_reported() -> None:
    """Each action that reaches the backend names the approver's status and the demo planner's
    phrase on its own definition; reads and runtime tools name neither."""
    for tool in TOOLS:
        backend_action = tool.meta.kind == "action" and not tool.meta.runtime
        assert (tool.done_status != "DONE") is backend_action, tool.name
        assert (tool.done_phrase is not None) is backend_action, tool.name
        if not backend_action:
            assert tool.id_field is None and tool.claim is None, tool.name


def test_action_id_reads_only_the_tools_own_field() -> None:
    """A refund's id is its ``refund_id`` even though the result also names an order and a return;
    a tool without an id field names nothing."""
    refund = REG.tools["issue_refund"]
    assert refund.action_id({"order_id": "O-1", "return_id": "R-1", "refund_id": "RF-9"}) == "RF-9"
    assert refund.action_id({"order_id": "O-1"}) is None
    assert refund.action_id({"refund_id": 7}) is None  # not a string: not an id
    assert refund.action_id("RF-9") is None
    assert REG.tools["update_contact_details"].action_id({"customer_id": "C-7", "id": "x"}) is None


def test_a_new_tool_is_claimed_planned_and_reported_from_its_definition_alone() -> None:
    """A tool that exists only in a custom registry is recognised in claims, loaded by the planner
    from its own group and reported with its own status: nothing outside the catalogue knows it."""
    from dataclasses import replace

    from agent.claims import claimed_actions
    from agent.planner import View
    from tools.registry import Registry

    base = REG.tools["retry_payment"]
    gift = replace(
        base,
        name="send_gift_card",
        done_status="GIFTED",
        id_field="gift_id",
        claim=r"\b(i|we)('ve| have)? sent (you )?a gift card\b",
        done_phrase="sent a gift card",
    )
    reg = Registry.of([*TOOLS, gift], GROUP_BLURBS)
    assert claimed_actions("Done: I've sent you a gift card.", reg) == {"send_gift_card"}
    assert claimed_actions("I have not sent you a gift card yet.", reg) == set()
    assert claimed_actions("Done: I've sent you a gift card.", REG) == set()
    assert gift.action_id({"gift_id": "G-1", "payment_id": "P-1"}) == "G-1"
    view = View(
        text="", events=(), calls=(), history=(), earlier_text="", past_events=(), tools=frozenset(), catalogue=reg
    )
    (block,) = view.use("send_gift_card", {})
    assert isinstance(block, dict)
    assert (block["name"], block["input"]) == ("load_tools", {"group": "billing"})
