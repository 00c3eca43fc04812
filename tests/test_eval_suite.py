"""The evaluation suite format, matchers, scripted placeholders and store overrides."""

from __future__ import annotations

import json

import pytest

from agent.evaluation.fixtures import merged_dataset
from agent.evaluation.matchers import args_match, find_in_order, reply_problems, value_matches
from agent.evaluation.models import fill, fill_text
from agent.evaluation.suite import (
    ReplyExpect,
    StoreSpec,
    SuiteError,
    ToolExpect,
    bundled_suites,
    load_suite,
    parse_duration,
    parse_suite,
    resolve_suites,
)
from agent.llm.base import Message, ModelRequest
from agent.llm.testing import text_block, tool_result_block
from sandbox.dataset import DEMO_DATASET_PATH, DatasetError
from storage.records import Proposal

BRIEF_INTENTS = {
    "where-is-my-order",
    "return",
    "charged-twice",
    "payment-failed",
    "address",
    "cancel",
    "refund",
    "escalation",
    "knowledge",
}


def _suite(**case: object) -> dict[str, object]:
    base = {"id": "case-1", "principal": {"customer": "C-7"}, "turns": [{"user": "hi", "model": ["hello"]}]}
    return {"suite": "t", "cases": [{**base, **case}]}


def test_bundled_suites_cover_the_brief() -> None:
    """support: ≥40 conversations over every intent of the brief; adversarial: ≥20 distinct attacks."""
    suites = bundled_suites()
    support, adversarial = load_suite(suites["support"]), load_suite(suites["adversarial"])
    assert len(support.cases) >= 40 and support.model == "scripted"
    assert BRIEF_INTENTS <= {t for c in support.cases for t in c.tags}
    assert all(any(t.model for t in c.turns) for c in support.cases), "every support case is scripted"
    assert len(adversarial.cases) >= 20 and adversarial.model == "compromised"
    kinds = {t for c in adversarial.cases for t in c.tags}
    assert {"notes", "knowledge", "names", "cross-account", "splitting", "forgery", "contact"} <= kinds
    assert resolve_suites([]) == list(suites.values())


def test_unknown_keys_are_errors_with_their_path() -> None:
    """A typo in a turn is refused, naming file, path and problem."""
    data = _suite(turns=[{"user": "hi"}, {"aprove": "S-3"}])
    with pytest.raises(SuiteError) as err:
        parse_suite(data, source="x.yaml")
    assert "x.yaml: cases[0].turns[1].aprove: unknown field" in err.value.errors


def test_a_turn_has_exactly_one_action() -> None:
    with pytest.raises(SuiteError, match="exactly one of"):
        parse_suite(_suite(turns=[{"user": "hi", "confirm": "latest"}]))
    with pytest.raises(SuiteError, match="duplicate case id"):
        parse_suite({"suite": "t", "cases": [_suite()["cases"][0], _suite()["cases"][0]]})  # type: ignore[index]


def test_resolve_rejects_unknown_suite_names() -> None:
    with pytest.raises(SuiteError, match="no such suite"):
        resolve_suites(["nope"])


def test_durations() -> None:
    assert parse_duration("25h").total_seconds() == 90000 and parse_duration("-3d").days == -3
    with pytest.raises(ValueError):
        parse_duration("soon")


def test_value_matchers() -> None:
    """Literals compare equal; matchers: any, regex, contains, subset, one_of."""
    assert value_matches("O-1", "O-1") and not value_matches("O-1", "O-2")
    assert value_matches({"any": True}, "x") and not value_matches({"any": True}, None)
    assert value_matches({"regex": "^O-10"}, "O-1042")
    assert value_matches({"contains": "refund-policy@7#window"}, ["refund-policy@7#window", "x"])
    assert value_matches({"subset": {"city": "Boulder"}}, {"city": "Boulder", "country": "US"})
    assert value_matches({"subset": ["a"]}, ["b", "a"]) and not value_matches({"subset": ["c"]}, ["a"])
    assert value_matches({"one_of": [1, 2]}, 2)
    assert value_matches({"line1": "x"}, {"line1": "x"}) and not value_matches({"line1": "x"}, {"line1": "x", "a": 1})


def _proposal(tool: str, args: dict[str, object], decision: str = "execute", reason: str | None = None) -> Proposal:
    from datetime import UTC, datetime

    return Proposal(
        id="p",
        run_id="r",
        conversation_id="c",
        tool_use_id="t",
        tool=tool,
        arguments=args,
        args_hash="h",
        principal="customer:C-7",
        step=1,
        decision=decision,
        reason=reason,
        idempotency_key=None,
        result={"error": reason} if reason else {},
        is_error=bool(reason),
        policy_version="v",
        created_at=datetime.now(UTC),
    )


def test_args_match_subset_and_exact() -> None:
    args = {"order_id": "O-1", "amount_minor": 5}
    assert args_match(ToolExpect(tool="t", args={"order_id": "O-1"}), args)
    assert not args_match(ToolExpect(tool="t", args={"order_id": "O-1"}, match="exact"), args)
    assert args_match(ToolExpect(tool="t", args=args, match="exact"), args)


def test_expected_tools_are_an_ordered_subsequence() -> None:
    """A missing tool is a tool-choice problem; a wrong argument or gate outcome an argument problem."""
    props = [
        _proposal("get_order", {"order_id": "O-1"}),
        _proposal("issue_refund", {"order_id": "O-1"}, "reject", "evidence_required"),
    ]
    assert find_in_order(
        [ToolExpect(tool="get_order"), ToolExpect(tool="issue_refund", reason="evidence_required")], props
    ) == ([], [])
    choice, _ = find_in_order([ToolExpect(tool="issue_refund"), ToolExpect(tool="get_order")], props)
    assert choice == ["get_order was not proposed (after the previous expected call)"]
    _, args = find_in_order([ToolExpect(tool="issue_refund", gate="confirmation")], props)
    assert args and "gate confirmation" in args[0]


def test_reply_facts_and_forbidden_claims() -> None:
    spec = ReplyExpect(states=["189.00", "re:R-[0-9a-f]+"], not_claims=["refunded twice"])
    assert reply_problems(spec, "Refunded 189.00 USD as R-abc12") == []
    assert reply_problems(spec, "Refunded twice") == [
        "final reply does not state '189.00'",
        "final reply does not state 're:R-[0-9a-f]+'",
        "final reply claims 'refunded twice'",
    ]


def test_scripted_placeholders_fill_from_the_newest_result_or_event() -> None:
    """ "$key" arguments and "{$key}" text are filled from what the model was sent."""
    req = ModelRequest(
        system="",
        tools=[],
        messages=[
            Message(role="user", content=[tool_result_block("t1", {"refund_id": "R-old"})]),
            Message(
                role="user",
                content=[
                    text_block(
                        '<signoff_event>Outcome: {"refund_id": "R-new", '
                        '"delivered_at": "2026-01-02T03:04:05Z"}</signoff_event>'
                    )
                ],
            ),
        ],
    )
    assert fill({"action_ids": ["$refund_id"], "x": "$"}, req) == {"action_ids": ["R-new"], "x": "$"}
    assert fill_text("done ({$refund_id}) on {$delivered_at}", req) == "done (R-new) on 2026-01-02"


def test_store_overrides_merge_with_relative_times() -> None:
    """Overrides replace or add records; "-3d" is relative to the dataset's as_of; bad data is refused."""
    base = json.loads(DEMO_DATASET_PATH.read_text("utf-8"))
    spec = StoreSpec(
        notes={"O-1045": "hello"},
        names={"C-7": "M. Chen"},
        orders=[
            {
                "id": "O-9001",
                "customer_id": "C-7",
                "status": "DELIVERED",
                "currency": "USD",
                "total_minor": 100,
                "placed_at": "-3d",
                "delivered_at": "-1d",
                "items": [{"sku": "X", "name": "X", "qty": 1, "unit_minor": 100}],
            }
        ],
    )
    ds = merged_dataset(base, spec)
    orders = {o.id: o for o in ds.orders}
    assert orders["O-1045"].notes == "hello" and orders["O-9001"].delivered_at is not None
    assert ds.as_of is not None and (ds.as_of - orders["O-9001"].placed_at).days == 3
    assert next(c for c in ds.customers if c.id == "C-7").name == "M. Chen"
    with pytest.raises(DatasetError):
        merged_dataset(base, StoreSpec(orders=[{"id": "O-9002", "customer_id": "C-999"}]))
