"""The identifiers Slack echoes back to us, and the strict codecs for what buttons carry.

``action_id``s and ``callback_id``s are contract (INTERFACES.md, Slack): the Bolt
listeners match on these constants and the Block Kit builders use the same ones,
so a rename is one edit here. A button's ``value`` carries an id and a version,
never arguments: whatever a click says about the action is looked up again.

Every decoder raises :class:`BadValue` (a ``ValueError``) with a short reason on
anything it does not expect — bad JSON, wrong types, extra keys, oversized —
and nothing else, so a listener can answer with a generic refusal.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

# -- action ids (contract) --------------------------------------------------------------
CONFIRM = "signoff.confirm"
DECLINE = "signoff.decline"
APPROVE = "signoff.approve"
REJECT = "signoff.reject"
#: The thumbs up/down under an answer (``feedback_buttons``); the value names the vote.
FEEDBACK = "signoff.feedback"

CONFIRMATION_ACTIONS = frozenset({CONFIRM, DECLINE})
APPROVAL_ACTIONS = frozenset({APPROVE, REJECT})

# -- views ------------------------------------------------------------------------------
#: ``callback_id`` of the modal that asks a supervisor why they reject.
REJECT_MODAL = "signoff.reject_modal"
#: ``block_id`` / ``action_id`` of the modal's comment input (``view.state.values[B][A]``).
REJECT_COMMENT_BLOCK = "signoff.reject_modal.comment"
REJECT_COMMENT_INPUT = "signoff.reject_modal.comment_input"

# -- block ids --------------------------------------------------------------------------
CONFIRMATION_ACTIONS_BLOCK = "signoff.confirmation.actions"
APPROVAL_ACTIONS_BLOCK = "signoff.approval.actions"
FEEDBACK_BLOCK = "signoff.feedback"


def approval_actions_block(approval_id: str) -> str:
    """The actions block id of one approval in a view listing several (block ids are unique per view)."""
    return f"{APPROVAL_ACTIONS_BLOCK}.{approval_id}"


# -- values -----------------------------------------------------------------------------
#: Slack's own limit for a button value; ours are far shorter.
MAX_VALUE_CHARS = 2000
#: Slack's limit for a view's ``private_metadata``.
MAX_METADATA_CHARS = 3000
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
_SLACK_ID = re.compile(r"^[A-Z0-9]{1,32}$")
_TS = re.compile(r"^\d{1,12}\.\d{1,9}$")
_MAX_VERSION = 2**31 - 1


class BadValue(ValueError):
    """A button value or view metadata that is not exactly what we put there."""


def encode_value(id: str, version: int) -> str:
    """The JSON a button carries: ``{"id": ..., "version": ...}`` (compact, key order fixed)."""
    _check_id(id)
    _check_version(version)
    return json.dumps({"id": id, "version": version}, separators=(",", ":"))


def decode_value(raw: object) -> tuple[str, int]:
    """``(id, version)`` from a button value; :class:`BadValue` for anything else."""
    data = _object(raw, MAX_VALUE_CHARS, keys=frozenset({"id", "version"}))
    return _check_id(data["id"]), _check_version(data["version"])


Vote = Literal["positive", "negative"]


def encode_feedback(turn_id: str, vote: Vote) -> str:
    """A feedback button's value: the turn (message) it rates and which button it is."""
    _check_id(turn_id)
    if vote not in ("positive", "negative"):
        raise BadValue("vote must be positive or negative")
    return json.dumps({"id": turn_id, "vote": vote}, separators=(",", ":"))


def decode_feedback(raw: object) -> tuple[str, Vote]:
    """``(turn_id, vote)`` from a feedback button value."""
    data = _object(raw, MAX_VALUE_CHARS, keys=frozenset({"id", "vote"}))
    vote = data["vote"]
    if vote not in ("positive", "negative"):
        raise BadValue("vote must be positive or negative")
    return _check_id(data["id"]), vote


@dataclass(frozen=True, kw_only=True)
class ModalRef:
    """What the reject modal remembers: the approval it decides and the card to redraw."""

    id: str
    version: int
    channel: str | None = None
    ts: str | None = None


def encode_modal_metadata(ref: ModalRef) -> str:
    """The modal's ``private_metadata``: id, version and (when known) the card's channel and ts."""
    _check_id(ref.id)
    _check_version(ref.version)
    data: dict[str, Any] = {"id": ref.id, "version": ref.version}
    if (ref.channel is None) != (ref.ts is None):
        raise BadValue("channel and ts go together")
    if ref.channel is not None and ref.ts is not None:
        data |= {"channel": _check_channel(ref.channel), "ts": _check_ts(ref.ts)}
    return json.dumps(data, separators=(",", ":"))


def decode_modal_metadata(raw: object) -> ModalRef:
    """The :class:`ModalRef` a reject modal's ``private_metadata`` carries."""
    data = _object(raw, MAX_METADATA_CHARS, keys=frozenset({"id", "version"}), optional=frozenset({"channel", "ts"}))
    if ("channel" in data) != ("ts" in data):
        raise BadValue("channel and ts go together")
    channel = _check_channel(data["channel"]) if "channel" in data else None
    ts = _check_ts(data["ts"]) if "ts" in data else None
    return ModalRef(id=_check_id(data["id"]), version=_check_version(data["version"]), channel=channel, ts=ts)


# -- checks -----------------------------------------------------------------------------
def _object(raw: object, limit: int, *, keys: frozenset[str], optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    if not isinstance(raw, str):
        raise BadValue("not a string")
    if len(raw) > limit:
        raise BadValue("too long")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadValue("not JSON") from None
    if not isinstance(data, dict):
        raise BadValue("not a JSON object")
    missing = keys - data.keys()
    if missing:
        raise BadValue(f"missing {', '.join(sorted(missing))}")
    extra = data.keys() - keys - optional
    if extra:
        raise BadValue("unexpected keys")
    return data


def _check_id(value: object) -> str:
    if not isinstance(value, str) or not _ID.match(value):
        raise BadValue("id must be a short identifier")
    return value


def _check_version(value: object) -> int:
    # bool is an int in Python; a version is never true/false.
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_VERSION:
        raise BadValue("version must be a positive integer")
    return value


def _check_channel(value: object) -> str:
    if not isinstance(value, str) or not _SLACK_ID.match(value):
        raise BadValue("channel must be a Slack id")
    return value


def _check_ts(value: object) -> str:
    if not isinstance(value, str) or not _TS.match(value):
        raise BadValue("ts must be a Slack message timestamp")
    return value
