"""Adaptive Cards for confirmations, approvals and escalations: pure, valid, bounded, escaped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.views import EscalationView, OutcomeView, TraceView, approval_view, confirmation_view
from bot.teams import cards
from bot.teams.cards import MAX_CARD_BYTES, escalation_card, neutralize, notice_card
from bot.teams.invoke import card_reply, default_reply, error_reply, message_reply, refusal_reply
from storage.records import Approval, Confirmation, Decision
from tools.catalogue import build_registry

REGISTRY = build_registry()

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
HOSTILE = (
    "[click me](https://evil.example/pay) <at>CEO</at> **URGENT** www.evil.example "
    "\u202eevil\u202c \x00\x07 mailto:x@evil.example javascript:alert(1)"
)


def confirmation(**kw: Any) -> Confirmation:
    base = dict(
        id="cnf_42",
        conversation_id="conv_1",
        run_id="run_1",
        proposal_id="prp_1",
        tool="issue_refund",
        arguments={"order_id": "O-1042", "amount_minor": 1500},
        args_hash="h" * 64,
        principal="customer:C-7",
        code="K7P2QX",
        summary="Refund 15.00 USD on order O-1042",
        status="pending",
        version=1,
        created_at=T0,
        decided_at=None,
    )
    return Confirmation(**{**base, **kw})  # type: ignore[arg-type]


def approval(**kw: Any) -> Approval:
    base = dict(
        id="apr_7",
        proposal_id="prp_2",
        run_id="run_2",
        conversation_id="conv_2",
        tool="issue_refund",
        arguments={
            "order_id": "O-1042",
            "amount_minor": 18900,
            "currency": "USD",
            "reason_code": "damaged",
            "evidence": ["refund-policy@7#window"],
        },
        args_hash="a" * 64,
        customer_id="C-7",
        summary="Refund 189.00 USD on order O-1042 (damaged)",
        status="pending",
        version=2,
        required_role="supervisor",
        approvals_required=2,
        decisions=(),
        requester="rep:S-2",
        decider=None,
        comment=None,
        rationale="The customer says it arrived broken.",
        evidence=(
            {
                "id": "refund-policy@7#window",
                "title": "Refund window",
                "excerpt": "Refunds within 30 days of delivery.",
            },
        ),
        provenance={"order_id": "system_of_record", "amount_minor": "model", "reason_code": "untrusted_text"},
        idempotency_key="refund:O-1042:18900",
        policy_version="policy-3",
        result=None,
        superseded_by=None,
        surfaces={},
        expires_at=T0 + timedelta(hours=4),
        created_at=T0,
        decided_at=None,
    )
    return Approval(**{**base, **kw})  # type: ignore[arg-type]


def confirmation_card(c: Confirmation, *, decided_by: str | None = None) -> dict[str, Any]:
    """The card of ``c`` through its view, as the face draws it."""
    names = {c.principal: decided_by} if decided_by else None
    return cards.confirmation_card(confirmation_view(c, tool=REGISTRY.get(c.tool), names=names))


def approval_card(a: Approval, *, names: dict[str, str] | None = None, now: datetime = T0) -> dict[str, Any]:
    """The card of ``a`` at ``now`` through its view, as the face draws it."""
    return cards.approval_card(approval_view(a, tool=REGISTRY.get(a.tool), now=now, names=names))


def walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from walk(v)


def of_type(card: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [n for n in walk(card) if n.get("type") == kind]


def texts(card: dict[str, Any]) -> str:
    return " ".join(str(n.get("text", "")) for n in walk(card))


def size(card: dict[str, Any]) -> int:
    return len(json.dumps(card, ensure_ascii=False).encode())


# -- confirmation ---------------------------------------------------------------------
def test_a_pending_confirmation_has_confirm_and_decline_carrying_only_id_and_version() -> None:
    card = confirmation_card(confirmation(version=3))
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.5"
    actions = card["actions"]
    assert [(a["type"], a["verb"]) for a in actions] == [
        ("Action.Execute", "signoff.confirm"),
        ("Action.Execute", "signoff.decline"),
    ]
    assert all(a["data"] == {"id": "cnf_42", "version": 3} for a in actions)
    assert "Refund 15.00 USD on order O-1042" in texts(card)


def test_a_confirmation_card_shows_nothing_internal_because_a_customer_reads_it() -> None:
    shown = texts(confirmation_card(confirmation()))
    for internal in ("issue_refund", "customer:C-7", "run_1", "prp_1", "conv_1", "h" * 64, "amount_minor"):
        assert internal not in shown


def test_a_confirmed_card_has_no_buttons_and_says_who_and_when() -> None:
    card = confirmation_card(
        confirmation(status="confirmed", version=2, decided_at=T0 + timedelta(minutes=3)), decided_by="Ann Example"
    )
    assert "actions" not in card
    assert "Confirmed by Ann Example on 2026-12-01 10:03 UTC" in texts(card)


def test_a_declined_and_a_superseded_confirmation_say_so_without_buttons() -> None:
    declined = confirmation_card(confirmation(status="declined", decided_at=T0), decided_by="Ann")
    superseded = confirmation_card(confirmation(status="superseded"))
    assert "Declined by Ann" in texts(declined) and "actions" not in declined
    assert "replaced by a newer one" in texts(superseded) and "actions" not in superseded


def test_a_replayed_outcome_is_told_honestly() -> None:
    result = {
        "status": "REFUNDED",
        "refund_id": "R-9",
        "replayed": True,
        "original_id": "R-9",
        "original_at": "2026-11-30T08:15:00Z",
    }
    done = confirmation(status="consumed", decided_at=T0, outcome={"decision": "execute", "result": result})
    card = confirmation_card(done)
    assert "Already done on 2026-11-30 08:15 UTC (replayed)" in texts(card) and "R-9" in texts(card)


# -- approval -------------------------------------------------------------------------
def test_a_pending_approval_shows_the_exact_action_and_everything_that_routed_it() -> None:
    routed = approval(
        amount_minor=18900,
        currency="USD",
        routing={"reason": "over_ceiling", "ceiling_minor": 10000, "aggregate_minor": 18900},
    )
    card = approval_card(routed, names={"rep:S-2": "Sam Rep"})
    shown = texts(card)
    assert "Refund 189.00 USD on order O-1042 (damaged)" in shown
    assert "Sam Rep" in shown and "C-7" in shown
    assert "189.00 USD — above the 100.00 USD ceiling" in shown
    assert "Over the requester's ceiling" in shown
    assert "0 of 2 approvals" in shown
    assert "2026-12-01 14:00 UTC" in shown  # expiry
    assert "from our records" in shown and "from the model" in shown and "from text outsiders wrote" in shown
    assert "refund-policy@7#window" in shown and "Refunds within 30 days of delivery." in shown


def test_the_model_rationale_is_labelled_untrusted_and_kept_apart() -> None:
    card = approval_card(approval())
    box = next(c for c in of_type(card, "Container") if c.get("style") == "warning")
    assert "untrusted" in box["items"][0]["text"]
    assert box["items"][1]["inlines"][0]["text"] == "The customer says it arrived broken."


def test_reject_needs_a_typed_comment_and_approve_does_not() -> None:
    card = approval_card(approval())
    (comment,) = of_type(card, "Input.Text")
    assert comment["isRequired"] is True and comment["id"] == "comment"
    approve, reject = card["actions"]
    assert (approve["verb"], approve["associatedInputs"]) == ("signoff.approve", "none")
    assert (reject["verb"], reject["associatedInputs"]) == ("signoff.reject", "auto")
    assert approve["data"] == reject["data"] == {"id": "apr_7", "version": 2}


def test_one_of_two_approvals_shows_who_approved_first_and_keeps_the_buttons() -> None:
    first = Decision(actor="supervisor:S-1", decision="approve", comment="ok by me", at="2026-12-01T11:00:00+00:00")
    card = approval_card(approval(decisions=(first,), version=3), names={"supervisor:S-1": "Dana"})
    shown = texts(card)
    assert "1 of 2 approvals" in shown
    assert "Approved by Dana on 2026-12-01 11:00 UTC" in shown and "ok by me" in shown
    assert card["actions"][0]["data"]["version"] == 3


def test_an_approved_and_executed_card_has_no_buttons_and_shows_the_result() -> None:
    card = approval_card(approval(status="approved", result={"status": "REFUNDED", "refund_id": "R-1"}))
    assert "actions" not in card and not of_type(card, "Input.Text")
    assert "Done: Refunded 189.00 USD on O-1042" in texts(card) and "Reference: R-1" in texts(card)


def test_an_approval_whose_action_had_already_run_says_replayed() -> None:
    card = approval_card(
        approval(
            status="approved",
            result={
                "status": "REFUNDED",
                "refund_id": "R-1",
                "replayed": True,
                "original_at": "2026-11-29T09:00:00+00:00",
            },
        )
    )
    assert "Already done on 2026-11-29 09:00 UTC (replayed) — nothing was done twice." in texts(card)


def test_a_rejected_card_shows_who_rejected_and_why() -> None:
    d = Decision(actor="supervisor:S-1", decision="reject", comment="over the limit", at="2026-12-01T12:00:00Z")
    card = approval_card(approval(status="rejected", decisions=(d,)), names={"supervisor:S-1": "Dana"})
    shown = texts(card)
    assert "Rejected by Dana on 2026-12-01 12:00 UTC" in shown and "over the limit" in shown
    assert "actions" not in card


def test_a_pending_approval_past_its_expiry_is_drawn_expired_without_buttons() -> None:
    card = approval_card(approval(), now=T0 + timedelta(hours=5))
    assert "actions" not in card and "nothing was done" in texts(card)


# -- hostile and huge input -----------------------------------------------------------
def hostile_approval() -> Approval:
    big = HOSTILE * 400
    return approval(
        summary=big,
        rationale=big,
        requester=big,
        customer_id=big,
        arguments={f"{HOSTILE}{i}": big for i in range(50)},
        evidence=tuple({"id": big, "title": big, "excerpt": big} for _ in range(30)),
        decisions=tuple(Decision(actor=big, decision="approve", comment=big, at=big) for _ in range(9)),
        provenance={f"{HOSTILE}{i}": "untrusted_text" for i in range(50)},
    )


def assert_defanged(card: dict[str, Any]) -> None:
    blob = json.dumps(card, ensure_ascii=False)
    assert "://" not in blob.replace("http://adaptivecards.io/schemas/adaptive-card.json", "")
    assert "<at>" not in blob.lower() and "\x00" not in blob and "\u202e" not in blob
    assert "www.evil" not in blob and "mailto:" not in blob
    # Untrusted text lives only in TextRuns (never markdown-parsed); TextBlocks hold our own words.
    for block in of_type(card, "TextBlock"):
        assert "evil" not in block["text"] and "CEO" not in block["text"]


def test_huge_hostile_approval_input_stays_a_valid_bounded_defanged_card() -> None:
    card = approval_card(hostile_approval())
    assert json.loads(json.dumps(card)) == card
    assert size(card) < MAX_CARD_BYTES
    assert_defanged(card)
    assert "…and 38 more" in texts(card)  # 50 arguments, 12 shown


def test_huge_hostile_confirmation_and_escalation_stay_bounded_and_defanged() -> None:
    big = HOSTILE * 400
    for card in (
        confirmation_card(confirmation(summary=big)),
        confirmation_card(confirmation(summary=big, status="declined"), decided_by=big),
        cards.confirmation_card(
            replace(
                confirmation_view(confirmation(summary=big, status="consumed"), tool=None),
                outcome=OutcomeView(kind="failed", label=big, reference=big, detail=big),
            )
        ),
        escalation_card(
            EscalationView(
                conversation_id=big,
                channel=big,
                customer_id=big,
                reason=big,
                summary=big,
                trace=tuple(TraceView(tool=big, decision=big, reason=big, is_error=True) for _ in range(40)),
            )
        ),
    ):
        assert size(card) < MAX_CARD_BYTES
        assert_defanged(card)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=3000))
def test_neutralized_text_never_carries_links_mentions_or_controls_and_respects_its_limit(text: str) -> None:
    out = neutralize(text, 300)
    assert len(out) <= 300
    assert "://" not in out and "<at>" not in out.lower()
    assert not any(ord(c) < 32 and c != "\n" for c in out)


@settings(max_examples=50, deadline=None)
@given(summary=st.text(max_size=2000), rationale=st.text(max_size=4000), name=st.text(max_size=500))
def test_any_text_gives_a_card_that_serializes_and_fits(summary: str, rationale: str, name: str) -> None:
    card = approval_card(approval(summary=summary, rationale=rationale or None, requester=name))
    assert size(card) < MAX_CARD_BYTES and json.loads(json.dumps(card)) == card


# -- escalation, money, invoke replies ------------------------------------------------
def test_the_escalation_card_gives_reason_summary_and_every_tool_call() -> None:
    card = escalation_card(
        EscalationView(
            conversation_id="conv_3",
            channel="teams",
            customer_id="C-7",
            reason="customer asked for a person",
            summary="Wants to talk about a late parcel.",
            trace=(
                TraceView(tool="get_order", decision="execute", reason=None, is_error=False),
                TraceView(tool="issue_refund", decision="reject", reason="amount_exceeds_refundable", is_error=True),
            ),
        )
    )
    shown = texts(card)
    assert "customer asked for a person" in shown and "Wants to talk about a late parcel." in shown
    assert "get_order" in shown and "amount_exceeds_refundable" in shown and "error" in shown
    assert "actions" not in card


def test_invoke_replies_have_the_sdk_shapes() -> None:
    card = notice_card("hello")
    assert card_reply(card).body == {
        "statusCode": 200,
        "type": "application/vnd.microsoft.card.adaptive",
        "value": card,
    }
    assert message_reply("ok").body == {
        "statusCode": 200,
        "type": "application/vnd.microsoft.activity.message",
        "value": "ok",
    }
    assert error_reply(403, "no").body == {
        "statusCode": 403,
        "type": "application/vnd.microsoft.error",
        "value": {"code": "403", "message": "no"},
    }
    assert default_reply().body == {"statusCode": 200}
    assert all(r.status == 200 for r in (card_reply(card), error_reply(409, "x"), default_reply()))


def test_a_refusal_keeps_the_card_and_puts_the_reason_on_top_for_the_clicker() -> None:
    original = approval_card(approval())
    reply = refusal_reply("You can't approve your own request.", card=original)
    value = reply.body["value"]
    assert value["body"][0]["style"] == "attention"
    assert "You can't approve your own request." in texts(value)
    assert value["body"][1:] == original["body"] and value["actions"] == original["actions"]
    assert refusal_reply("no").body["type"] == "application/vnd.microsoft.activity.message"


def test_cards_are_pure_the_same_record_gives_the_same_card() -> None:
    a = approval()
    assert approval_card(a) == approval_card(replace(a))


def test_the_escalation_cards_hand_off_verbs_are_the_runtimes() -> None:
    from agent import handoff, handoff_suggest
    from bot.teams import cards

    assert (cards.TAKEOVER, cards.HANDBACK, cards.CLOSE) == (handoff.TAKEOVER, handoff.HANDBACK, handoff.CLOSE)
    assert cards.SEND_SUGGESTION == handoff_suggest.SEND
