"""One approval, every state, every face: Slack's Block Kit, Teams' Adaptive Card and the HTTP
API's JSON render the same view, so they agree on whether it is open, the amount, the routing
reason and the reference of what was done. (The email face renders no approval: it is no staff
surface, and a customer hears of a decision in the turn's reply.)"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest

from agent.views import ApprovalView, approval_view, confirmation_view
from agent.wording import ROUTING_REASONS
from bot.api.routes import approval_view_json, confirmation_view_json, render_confirmation
from bot.email.turns import confirm_hints
from bot.slack import blocks as slack
from bot.teams import cards as teams
from storage.records import Approval, Confirmation, Decision
from tests.test_slack_blocks import NOW, approval, confirmation
from tools.catalogue import build_registry

REGISTRY = build_registry()
ROUTED = {
    "amount_minor": 18900,
    "currency": "USD",
    "routing": {"reason": "over_ceiling", "ceiling_minor": 10000, "aggregate_minor": 18900},
}
DECIDED = NOW + timedelta(minutes=5)
APPROVE = (Decision(actor="supervisor:S-1", decision="approve", comment=None, at=DECIDED.isoformat()),)
DONE = {"status": "REFUNDED", "refund_id": "R-77", "amount_minor": 18900, "currency": "USD"}
WAITING = {"decision": "approval", "approval_id": "apr_1"}
REJECT = (Decision(actor="supervisor:S-1", decision="reject", comment="no", at=DECIDED.isoformat()),)

#: (state name, record changes, when it is looked at, open?, the reference shown)
STATES: list[tuple[str, dict[str, Any], timedelta, bool, str | None]] = [
    ("open", {}, timedelta(0), True, None),
    ("pending past its expiry", {}, timedelta(hours=5), False, None),
    ("expired", {"status": "expired", "decided_at": DECIDED}, timedelta(hours=5), False, None),
    (
        "approved and executed",
        {"status": "approved", "decisions": APPROVE, "result": {"status": "REFUNDED", "refund_id": "R-77"}},
        timedelta(hours=1),
        False,
        "R-77",
    ),
    (
        "approved, replayed",
        {
            "status": "approved",
            "decisions": APPROVE,
            "result": {"status": "REFUNDED", "refund_id": "R-12", "replayed": True, "original_at": NOW.isoformat()},
        },
        timedelta(hours=1),
        False,
        "R-12",
    ),
    (
        "approved, failed",
        {
            "status": "approved",
            "decisions": APPROVE,
            "result": {"status": "FAILED", "reason": "gone", "error": "amount_exceeds_refundable"},
        },
        timedelta(hours=1),
        False,
        None,
    ),
    ("rejected", {"status": "rejected", "decisions": REJECT, "comment": "no"}, timedelta(hours=1), False, None),
    ("superseded", {"status": "superseded", "superseded_by": "apr_2"}, timedelta(hours=1), False, None),
]


def _slack_text(view: ApprovalView) -> tuple[bool, str]:
    card = slack.approval_card(view)
    buttons = [e for b in card.blocks if b["type"] == "actions" for e in b["elements"]]
    return bool(buttons), json.dumps(card.blocks, ensure_ascii=False)


def _teams_text(view: ApprovalView) -> tuple[bool, str]:
    card = teams.approval_card(view)
    return bool(card.get("actions")), json.dumps(card, ensure_ascii=False)


def _api_text(view: ApprovalView) -> tuple[bool, str]:
    shown = approval_view_json(view)
    return shown["open"], json.dumps(shown, ensure_ascii=False)


FACES = (_slack_text, _teams_text, _api_text)


@pytest.mark.parametrize(("state", "changes", "later", "is_open", "reference"), STATES, ids=[s[0] for s in STATES])
def test_every_face_shows_the_same_approval_the_same_way(
    state: str, changes: dict[str, Any], later: timedelta, is_open: bool, reference: str | None
) -> None:
    record: Approval = dataclasses.replace(approval(**ROUTED), **changes)
    view = approval_view(record, tool=REGISTRY.get(record.tool), now=NOW + later)
    assert view.open is is_open, state
    assert (view.amount, view.ceiling, view.reason) == ("189.00 USD", "100.00 USD", "over_ceiling")
    for buttons, shown in (face(view) for face in FACES):
        assert buttons is is_open, state
        assert "189.00 USD" in shown and "100.00 USD" in shown
        assert ROUTING_REASONS["over_ceiling"] in shown
        if reference is not None:
            assert view.outcome is not None and view.outcome.reference == reference
            assert reference in shown
        if state.startswith("approved"):
            assert view.outcome is not None and view.outcome.label in shown
    api = approval_view_json(view)  # the API's fields, not only its text
    assert (api["amount"], api["ceiling"], api["reason"]) == ("189.00 USD", "100.00 USD", "over_ceiling")
    assert (api["outcome"] or {}).get("reference") == reference


@pytest.mark.parametrize("reason", list(ROUTING_REASONS))
def test_every_reason_the_gate_emits_is_named_by_every_face(reason: str) -> None:
    record = approval(**{**ROUTED, "routing": {**ROUTED["routing"], "reason": reason}})
    view = approval_view(record, tool=REGISTRY.get(record.tool), now=NOW)
    assert view.reason_text == ROUTING_REASONS[reason]  # type: ignore[index]
    for _, shown in (face(view) for face in FACES):
        assert ROUTING_REASONS[reason] in shown  # type: ignore[index]


#: (state, record changes, open?, the reference shown)
CONFIRMATION_STATES: list[tuple[str, dict[str, Any], bool, str | None]] = [
    ("open", {}, True, None),
    (
        "confirmed and executed",
        {"status": "consumed", "decided_at": DECIDED, "outcome": {"decision": "execute", "result": DONE}},
        False,
        "R-77",
    ),
    ("confirmed, awaiting approval", {"status": "confirmed", "decided_at": DECIDED, "outcome": WAITING}, False, None),
    ("declined", {"status": "declined", "decided_at": DECIDED}, False, None),
    ("superseded", {"status": "superseded", "decided_at": DECIDED}, False, None),
]


@pytest.mark.parametrize(
    ("state", "changes", "is_open", "reference"), CONFIRMATION_STATES, ids=[s[0] for s in CONFIRMATION_STATES]
)
def test_every_face_shows_the_same_confirmation_the_same_way(
    state: str, changes: dict[str, Any], is_open: bool, reference: str | None
) -> None:
    """Slack, Teams and the API render the confirmation's view; the email face offers its code
    while it is open and never after."""
    record: Confirmation = dataclasses.replace(confirmation(), **changes)
    view = confirmation_view(record, tool=REGISTRY.get(record.tool))
    assert view.open is is_open, state
    slack_card = slack.confirmation_card(view)
    teams_card = teams.confirmation_card(view)
    api = confirmation_view_json(view)
    hint = confirm_hints([record])
    shown = {
        "slack": (
            any(b["type"] == "actions" for b in slack_card.blocks),
            json.dumps(slack_card.blocks, ensure_ascii=False),
        ),
        "teams": (bool(teams_card.get("actions")), json.dumps(teams_card, ensure_ascii=False)),
        "api": (api["open"], json.dumps({**render_confirmation(record), "view": api}, ensure_ascii=False)),
    }
    for face, (offered, text) in shown.items():
        assert offered is is_open, (face, state)
        assert "189.00 USD" in text, face
        if reference is not None:
            assert reference in text, face
    # The email face names the confirmation by its code while it is open (the outcome is told
    # in the turn's reply), and offers nothing once it is closed.
    assert (record.code in hint and "189.00 USD" in hint) is is_open
    assert (api["outcome"] or {}).get("reference") == reference
