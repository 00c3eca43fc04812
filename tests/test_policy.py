"""The versioned policy: the bundled file parses, every malformed file is a
one-line ConfigError naming the field, and the model is never told a number
from it (C7: "Thresholds and ceilings live in a versioned policy file; the
model is never told them")."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.errors import ConfigError
from agent.policy import load_policy, parse_policy
from agent.prompt import system_prompt
from tests.gatekeeper_kit import _merge, bundled_policy_dict
from tools.catalogue import build_registry
from tools.context import LOADABLE_GROUPS


def test_bundled_policy_parses_with_the_documented_shape() -> None:
    """The bundled default loads; ceilings, dual threshold and tier are where the gate reads them."""
    p = load_policy()
    assert p.version
    assert p.ceiling("customer", "USD") < p.ceiling("rep", "USD") < p.ceiling("supervisor", "USD")
    assert p.ceiling("system", "USD") == 0
    assert p.ceiling("customer", "JPY") == p.ceilings.default
    assert p.dual_threshold("USD") >= p.ceiling("supervisor", "USD")
    assert p.always_approve_tier == 3
    assert p.approvers.required_role == "supervisor"
    assert p.stage("api", "rep") == "assist" and p.stage("api", "customer") == "full"
    assert p.stage("fax", "customer") == p.rollout.default
    assert p.stage("api", "system") == "full"
    assert p.expiry_s("issue_refund") == 86400 and p.expiry_s("unknown_tool") == p.approval_expiry_s["default"]
    assert "billing:refund" in p.scopes_for("customer") and "account:contact" not in p.scopes_for("customer")
    assert not p.scopes_for("system") & {"billing:refund", "orders:read", "account:read", "billing:read"}


def test_policy_file_path_is_read_and_a_missing_file_names_the_variable(tmp_path: Path) -> None:
    """SIGNOFF_POLICY_FILE: a readable file parses; a missing one is a one-line error naming it."""
    good = tmp_path / "policy.yaml"
    good.write_text(yaml.safe_dump(bundled_policy_dict()), encoding="utf-8")
    assert load_policy(good).version == load_policy().version
    with pytest.raises(ConfigError) as err:
        load_policy(tmp_path / "nope.yaml")
    assert "SIGNOFF_POLICY_FILE" in str(err.value) and "\n" not in str(err.value)


def _bad(changes: dict[str, Any]) -> str:
    return yaml.safe_dump(_merge(bundled_policy_dict(), changes))


def _without(path: tuple[str, ...]) -> str:
    data = bundled_policy_dict()
    node = data
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]
    return yaml.safe_dump(data)


MALFORMED: list[tuple[str, str, str]] = [
    # (case, yaml text, the field the message must name)
    ("unknown top-level key", _bad({"ceilings_for_vips": {"USD": 1}}), "ceilings_for_vips"),
    ("unknown nested key", _bad({"limits": {"max_refunds_per_hour": 2}}), "limits.max_refunds_per_hour"),
    ("negative default ceiling", _bad({"ceilings": {"default": -1}}), "ceilings.default"),
    ("negative currency ceiling", _bad({"ceilings": {"customer": {"USD": -5000}}}), "ceilings.customer.USD"),
    ("negative dual threshold", _bad({"dual_approval_above": {"USD": -1}}), "dual_approval_above.USD"),
    (
        "negative daily cap",
        _bad({"limits": {"max_refund_minor_per_customer_per_day": {"EUR": -1}}}),
        "limits.max_refund_minor_per_customer_per_day.EUR",
    ),
    ("negative expiry", _bad({"approval_expiry_s": {"issue_refund": -60}}), "approval_expiry_s.issue_refund"),
    ("negative window", _bad({"limits": {"refund_window_days": -3}}), "limits.refund_window_days"),
    ("word for an int", _bad({"limits": {"max_actions_per_run": "lots"}}), "limits.max_actions_per_run"),
    ("word for a ceiling", _bad({"ceilings": {"rep": {"USD": "fifty dollars"}}}), "ceilings.rep.USD"),
    ("list for a mapping", _bad({"ceilings": {"customer": [5000, 4000]}}), "ceilings.customer"),
    ("mapping for a list", _bad({"scopes": {"customer": {"orders:read": True}}}), "scopes.customer"),
    ("unknown role", _bad({"approvers": {"required_role": "intern"}}), "approvers.required_role"),
    ("unknown stage", _bad({"rollout": {"default": "beta"}}), "rollout.default"),
    (
        "unknown stage per channel",
        _bad({"rollout": {"channels": {"api": {"customer": "yolo"}}}}),
        "rollout.channels.api.customer",
    ),
    # A typo in a principal kind would silently fall back to the default stage ("full"): fail closed.
    (
        "unknown principal kind in a stage table",
        _bad({"rollout": {"channels": {"api": {"custmer": "reads"}}}}),
        "rollout.channels.api.custmer",
    ),
    ("tier out of range", _bad({"always_approve_tier": 0}), "always_approve_tier"),
    ("missing section", _without(("limits",)), "limits"),
    ("missing field", _without(("ceilings", "rep")), "ceilings.rep"),
    ("empty version", _bad({"version": ""}), "version"),
]


@pytest.mark.parametrize(("case", "text", "field"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_policy_is_one_line_config_error_naming_the_field(case: str, text: str, field: str) -> None:
    """Each malformed policy is refused at load with one line that names the offending field."""
    with pytest.raises(ConfigError) as err:
        parse_policy(text, source="p.yaml")
    message = str(err.value)
    assert "\n" not in message, message
    assert message.startswith("SIGNOFF_POLICY_FILE: p.yaml: "), message
    assert field in message, message


@pytest.mark.parametrize(
    "text",
    [
        "version: '1'\nceilings: {customer: [1, 2\n",  # unterminated flow sequence
        "version: '1'\n  scopes: x\n bad: indent\n",  # bad indentation
        "\tversion: 1\n",  # tab
        "ceilings: {a: 1}}\n",  # stray brace
    ],
)
def test_bad_yaml_is_one_line_config_error_with_its_position(text: str) -> None:
    """Unparseable YAML: one line, naming the variable and where the parser stopped."""
    with pytest.raises(ConfigError) as err:
        parse_policy(text, source="p.yaml")
    message = str(err.value)
    assert "\n" not in message, message
    assert message.startswith("SIGNOFF_POLICY_FILE: p.yaml: not valid YAML"), message
    assert re.search(r"line \d+", message), message


@pytest.mark.parametrize("text", ["", "- just\n- a list\n", "42\n"])
def test_policy_that_is_not_a_mapping_is_refused(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_policy(text, source="p.yaml")
    assert "must be a mapping" in str(err.value) and "\n" not in str(err.value)


# -- the model is never told a number from the policy ------------------------------------------


def _money_numbers() -> set[int]:
    p = load_policy()
    nums = {p.ceilings.default, p.dual_approval_default, p.limits.max_refund_minor_per_customer_per_day_default}
    for table in (
        p.ceilings.customer,
        p.ceilings.rep,
        p.ceilings.supervisor,
        p.dual_approval_above,
        p.limits.max_refund_minor_per_customer_per_day,
    ):
        nums.update(table.values())
    return nums


def _renderings(n: int) -> list[str]:
    major = n / 100
    return [
        rf"\b{n}\b",
        rf"\b{n:,}\b",
        rf"\b{major:.2f}\b",
        rf"\b{major:,.2f}\b",
        rf"\$\s?{major:,.0f}\b",
        rf"\b{major:,.0f}\s?(USD|EUR|GBP|dollars|euros|pounds)\b",
    ]


def _model_visible_surface() -> str:
    registry = build_registry()
    parts = [
        system_prompt(principal_kind=k, customer_id=c)
        for k, c in (("customer", "C-7"), ("rep", "C-7"), ("supervisor", None))
    ]
    parts += [json.dumps([s.name, s.description, s.input_schema]) for s in registry.specs_for(LOADABLE_GROUPS)]
    parts += [registry.unloaded_listing([])]
    return "\n".join(parts)


def test_no_ceiling_or_threshold_appears_in_the_prompt_or_any_tool_spec() -> None:
    """System prompt, every tool's description and JSON Schema, the group listing: no policy money number."""
    surface = _model_visible_surface()
    nums = _money_numbers()
    assert {5000, 20000, 100000, 200000} <= nums  # the test reads the real policy
    for n in sorted(nums):
        for pattern in _renderings(n):
            assert not re.search(pattern, surface), f"policy amount {n} visible to the model as {pattern!r}"


def test_no_window_tier_or_count_limit_is_described_to_the_model() -> None:
    """Windows, per-day counts, run limits and the approval tier are not stated in words either."""
    p = load_policy()
    surface = _model_visible_surface().lower()
    forbidden = [
        rf"\b{p.limits.refund_window_days}[- ]days?\b",
        rf"\b{p.limits.return_window_days}[- ]days?\b",
        rf"\b{p.limits.max_refunds_per_customer_per_day} refunds\b",
        rf"\b{p.limits.max_actions_per_run} actions\b",
        r"\btier\b",
        r"\bceiling\b",
        r"\bthreshold\b",
        r"\bper day\b",
        r"\bdaily limit\b",
    ]
    for pattern in forbidden:
        assert not re.search(pattern, surface), pattern
