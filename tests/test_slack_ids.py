"""Button values and modal metadata: exactly ``{"id", "version"}`` in, the same out, and a clear
``BadValue`` (never another exception) for anything a forged or stale payload could carry."""

from __future__ import annotations

import json

import pytest

from bot.slack import ids


def test_contract_action_ids_are_the_documented_names() -> None:
    """INTERFACES.md: the four action_ids Bolt listeners and deployments rely on."""
    assert (ids.CONFIRM, ids.DECLINE, ids.APPROVE, ids.REJECT) == (
        "signoff.confirm",
        "signoff.decline",
        "signoff.approve",
        "signoff.reject",
    )


def test_value_round_trips_to_exactly_id_and_version() -> None:
    raw = ids.encode_value("apr_7f3a", 3)
    assert json.loads(raw) == {"id": "apr_7f3a", "version": 3}
    assert ids.decode_value(raw) == ("apr_7f3a", 3)


@pytest.mark.parametrize(
    "raw",
    [
        None,
        42,
        b'{"id":"a","version":1}',  # not a string
        "",
        "not json",
        "[1, 2]",
        '"apr_1"',  # not a JSON object
        '{"id": "apr_1"}',
        '{"version": 1}',  # missing keys
        '{"id": "apr_1", "version": 1, "amount_minor": 100}',  # extra key: arguments never ride along
        '{"id": 7, "version": 1}',
        '{"id": "apr_1", "version": "1"}',
        '{"id": "apr_1", "version": true}',
        '{"id": "apr_1", "version": 0}',
        '{"id": "apr_1", "version": 1.5}',
        '{"id": "apr_1", "version": 99999999999}',
        '{"id": "<!channel>", "version": 1}',
        '{"id": "", "version": 1}',
        '{"id": "a b", "version": 1}',
        '{"id": "' + "a" * 200 + '", "version": 1}',
        "[" * 5000 + "]" * 5000,  # oversized / deeply nested
        '{"id": "apr_1", "version": 1' + " " * 3000 + "}",
    ],
)
def test_decode_value_refuses_anything_else_with_bad_value(raw: object) -> None:
    with pytest.raises(ids.BadValue):
        ids.decode_value(raw)


def test_encode_value_refuses_what_it_could_not_decode() -> None:
    with pytest.raises(ids.BadValue):
        ids.encode_value("has space", 1)
    with pytest.raises(ids.BadValue):
        ids.encode_value("apr_1", 0)


def test_feedback_value_carries_turn_id_and_vote_only() -> None:
    raw = ids.encode_feedback("turn_12", "negative")
    assert json.loads(raw) == {"id": "turn_12", "vote": "negative"}
    assert ids.decode_feedback(raw) == ("turn_12", "negative")
    with pytest.raises(ids.BadValue):
        ids.decode_feedback('{"id": "turn_12", "vote": "meh"}')
    with pytest.raises(ids.BadValue):
        ids.encode_feedback("turn_12", "meh")  # type: ignore[arg-type]


def test_modal_metadata_round_trips_with_and_without_coordinates() -> None:
    full = ids.ModalRef(id="apr_1", version=2, channel="C0APPROVALS", ts="1700000001.000100")
    assert ids.decode_modal_metadata(ids.encode_modal_metadata(full)) == full
    bare = ids.ModalRef(id="apr_1", version=2)
    assert json.loads(ids.encode_modal_metadata(bare)) == {"id": "apr_1", "version": 2}
    assert ids.decode_modal_metadata(ids.encode_modal_metadata(bare)) == bare


@pytest.mark.parametrize(
    "raw",
    [
        '{"id": "apr_1", "version": 2, "channel": "C1"}',  # ts missing
        '{"id": "apr_1", "version": 2, "channel": "c1", "ts": "1.2"}',  # not a Slack id
        '{"id": "apr_1", "version": 2, "channel": "C1", "ts": "yesterday"}',
        '{"id": "apr_1", "version": 2, "comment": "looks fine"}',
    ],
)
def test_modal_metadata_refuses_anything_else(raw: str) -> None:
    with pytest.raises(ids.BadValue):
        ids.decode_modal_metadata(raw)
