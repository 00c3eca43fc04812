"""Block Kit rendering: every card's words come from the record (or wording.py), outsiders'
text is escaped, limits hold for absurd inputs, and buttons carry only ``{"id", "version"}``."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from agent.views import EscalationView, TraceView, approval_view, confirmation_view, outcome_view
from agent.wording import OUTCOME_REOPENED
from bot.slack import answers, blocks, ids, wording
from bot.slack.mrkdwn import date
from bot.slack.view_models import AssistThread, Directory, Outbound, Step
from storage.records import Approval, Confirmation, Decision
from tests.fakes.slack_api import FakeSlackApi, render_blocks, text_size
from tools.catalogue import build_registry

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
EXPIRES = NOW + timedelta(hours=4)  # 2026-03-01 16:00 UTC = 1772380800
EXPIRES_TOKEN = "<!date^1772380800^{date_short_pretty} at {time}|2026-03-01 16:00 UTC>"
INJECTIONS = "<!channel> <@U123> <http://x|y> *bold* & more"
ESCAPED = "&lt;!channel&gt; &lt;@U123&gt; &lt;http://x|y&gt; *bold* &amp; more"
PEOPLE = Directory(
    slack_ids={"S-1": "U0LEAD", "supervisor:S-3": "U0LEAD2", "customer:C-7": "U0CUST"}, names={"S-2": "Rita Rep"}
)


def approval(**changes: Any) -> Approval:
    base = Approval(
        id="apr_1",
        proposal_id="prop_9",
        run_id="run_4",
        conversation_id="conv_8",
        tool="issue_refund",
        arguments={
            "order_id": "O-1042",
            "amount_minor": 18900,
            "currency": "USD",
            "reason_code": "damaged",
            "evidence": ["refund-policy@7#window"],
        },
        args_hash="h",
        customer_id="C-7",
        summary="Refund 189.00 USD on O-1042 (damaged)",
        status="pending",
        version=1,
        required_role="supervisor",
        approvals_required=1,
        decisions=(),
        requester="rep:S-2",
        decider=None,
        comment=None,
        rationale="The parcel arrived crushed; policy allows a refund.",
        evidence=(
            {
                "id": "refund-policy@7#window",
                "title": "Refund policy",
                "excerpt": "Damaged items are refunded within 30 days.",
            },
        ),
        provenance={
            "order_id": "system_of_record",
            "amount_minor": "system_of_record",
            "currency": "system_of_record",
            "reason_code": "untrusted_text",
            "evidence": "search_knowledge",
        },
        idempotency_key="refund:O-1042:18900",
        policy_version="policy-3",
        result=None,
        superseded_by=None,
        surfaces={},
        expires_at=EXPIRES,
        created_at=NOW,
        decided_at=None,
    )
    return dataclasses.replace(base, **changes)


def confirmation(**changes: Any) -> Confirmation:
    base = Confirmation(
        id="cnf_5",
        conversation_id="conv_8",
        run_id="run_4",
        proposal_id="prop_9",
        tool="issue_refund",
        arguments={"order_id": "O-1042", "amount_minor": 18900},
        args_hash="h",
        principal="customer:C-7",
        code="K7Q2",
        summary="Refund 189.00 USD on O-1042 (damaged)",
        status="pending",
        version=2,
        created_at=NOW,
        decided_at=None,
    )
    return dataclasses.replace(base, **changes)


REGISTRY = build_registry()


def confirmation_card(c: Confirmation, *, directory: Directory | None = None) -> Outbound:
    """The card of ``c`` through its view, as the face draws it."""
    return blocks.confirmation_card(confirmation_view(c, tool=REGISTRY.get(c.tool)), directory=directory)


def view(a: Approval, now: datetime = NOW) -> Any:
    return approval_view(a, tool=REGISTRY.get(a.tool), now=now)


def approval_card(a: Approval, *, directory: Directory | None = None, now: datetime = NOW) -> Outbound:
    """The card of ``a`` at ``now`` through its view, as the face draws it."""
    return blocks.approval_card(view(a, now), directory=directory)


def of_type(card: Outbound | dict[str, Any], kind: str) -> list[dict[str, Any]]:
    found = card.blocks if isinstance(card, Outbound) else card["blocks"]
    return [b for b in found if b["type"] == kind]


def buttons(card: Outbound | dict[str, Any]) -> list[dict[str, Any]]:
    return [e for b in of_type(card, "actions") for e in b["elements"]]


def seen(card: Outbound) -> str:
    return render_blocks(card.blocks)


# -- confirmation card ---------------------------------------------------------------------
def test_pending_confirmation_card_reads_the_summary_and_offers_confirm_and_decline() -> None:
    card = confirmation_card(confirmation())
    assert seen(card) == (
        "*Please confirm:* Refund 189.00 USD on O-1042 (damaged)\n"
        "Nothing happens until you confirm.\n"
        "[Confirm] [Decline]"
    )
    assert card.text == "Please confirm: Refund 189.00 USD on O-1042 (damaged)"
    confirm, decline = buttons(card)
    assert (confirm["action_id"], confirm["style"]) == (ids.CONFIRM, "primary")
    assert decline["action_id"] == ids.DECLINE and "style" not in decline
    for b in (confirm, decline):
        assert json.loads(b["value"]) == {"id": "cnf_5", "version": 2}
        assert ids.decode_value(b["value"]) == ("cnf_5", 2)


def test_money_confirmations_ask_again_in_a_dialog_others_do_not() -> None:
    confirm = buttons(confirmation_card(confirmation()))[0]
    assert confirm["confirm"]["text"]["text"] == "Refund 189.00 USD on O-1042 (damaged)"
    other = confirmation_card(confirmation(tool="update_contact_details", summary="Change email"))
    assert "confirm" not in buttons(other)[0]


def test_confirmation_card_shows_nothing_internal() -> None:
    """It may be read by the customer's organisation: no ids but the button's, no code, no principal key."""
    card = confirmation_card(confirmation())
    dumped = json.dumps([b for b in card.blocks if b["type"] != "actions"]) + card.text
    for internal in ("conv_8", "run_4", "prop_9", "K7Q2", "customer:C-7", "C-7", "apr_", "refund:O-1042"):
        assert internal not in dumped
    values = [b["value"] for b in buttons(card)]
    assert all(json.loads(v).keys() == {"id", "version"} for v in values)
    decided = confirmation_card(confirmation(status="confirmed", decided_at=NOW))
    assert "C-7" not in json.dumps(decided.blocks) + decided.text  # no mapping: no one is named


AT_NOON = "<!date^1772366400^{date_short_pretty} at {time}|2026-03-01 12:00 UTC>"


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("confirmed", f"Refund 189.00 USD on O-1042 (damaged)\nConfirmed by <@U0CUST> · {AT_NOON}"),
        ("consumed", f"Refund 189.00 USD on O-1042 (damaged)\nConfirmed by <@U0CUST> · {AT_NOON}\nDone."),
        ("declined", f"~Refund 189.00 USD on O-1042 (damaged)~\nDeclined by <@U0CUST> · {AT_NOON}\nNothing was done."),
        (
            "superseded",
            f"~Refund 189.00 USD on O-1042 (damaged)~\nReplaced · {AT_NOON}\n"
            "A newer request replaced this one; it can no longer be confirmed.",
        ),
    ],
)
def test_decided_confirmation_card_shows_outcome_who_and_when_without_buttons(status: str, expected: str) -> None:
    card = confirmation_card(confirmation(status=status, decided_at=NOW), directory=PEOPLE)
    assert seen(card) == expected
    assert buttons(card) == []


def test_confirmed_card_can_say_a_supervisor_still_has_to_approve() -> None:
    waiting = {"decision": "approval", "approval_id": "apr_1"}
    card = confirmation_card(confirmation(status="confirmed", decided_at=NOW, outcome=waiting))
    assert seen(card).endswith(wording.CONFIRMATION_AWAITING_APPROVAL)


# -- approval card ---------------------------------------------------------------------------
ROUTING: dict[str, Any] = {
    "amount_minor": 18900,
    "currency": "USD",
    "routing": {"reason": "over_ceiling", "ceiling_minor": 10000, "aggregate_minor": 18900},
}


def test_pending_approval_card_text() -> None:
    card = approval_card(approval(**ROUTING), directory=PEOPLE)
    assert card.text == "Approval needed: Refund 189.00 USD on O-1042 (damaged)"
    assert seen(card) == "\n".join(
        [
            "Approval needed",
            "*Refund 189.00 USD on O-1042 (damaged)*",
            "*Requested by*\nRita Rep",
            "*Account*\nC-7",
            "*Amount*\n189.00 USD (ceiling 100.00 USD)",
            "*Why it needs approval*\nOver the requester's ceiling",
            f"*Expires*\n{EXPIRES_TOKEN}",
            "*Policy*\npolicy-3",
            "---",
            "*Evidence cited*\n• *Refund policy* `refund-policy@7#window`\n>Damaged items are refunded within 30 days.",
            "*Where each value came from*\n"
            "• `order_id` = O-1042 — from our records\n"
            "• `amount_minor` = 18900 — from our records\n"
            "• `currency` = USD — from our records\n"
            "• `reason_code` = damaged — from text an outsider wrote — check it\n"
            '• `evidence` = ["refund-policy@7#window"] — evidence ids from the knowledge search',
            "_The agent's own explanation — written by the model, not verified_",
            ">The parcel arrived crushed; policy allows a refund.",
            "[Approve] [Reject]",
        ]
    )
    approve, reject = buttons(card)
    assert (approve["action_id"], approve["style"], reject["action_id"], reject["style"]) == (
        ids.APPROVE,
        "primary",
        ids.REJECT,
        "danger",
    )
    assert ids.decode_value(approve["value"]) == ids.decode_value(reject["value"]) == ("apr_1", 1)


def test_approval_card_renders_without_routing_figures() -> None:
    """The record lacks the routing figures today: the amount comes from the exact arguments."""
    text = seen(approval_card(approval()))
    assert "*Amount*\n189.00 USD\n" in text
    assert wording.FIELD_ROUTING not in text and "ceiling" not in text
    assert "*Requested by*\nrep:S-2" in text  # unknown to the directory: the escaped key


def test_approval_card_shows_the_aggregate_that_splitting_adds_up_to() -> None:
    split = approval(
        amount_minor=6000,
        currency="USD",
        routing={"reason": "aggregate_over_ceiling", "ceiling_minor": 10000, "aggregate_minor": 12000},
    )
    text = seen(approval_card(split))
    assert "*Amount*\n60.00 USD (ceiling 100.00 USD; 120.00 USD with earlier refunds)" in text
    assert "*Why it needs approval*\nOver the ceiling with the day's earlier refunds" in text


def test_two_person_approval_shows_progress_and_who_approved_first() -> None:
    fresh = seen(approval_card(approval(approvals_required=2), directory=PEOPLE))
    assert "Needs 2 approvals from different supervisors; 0 so far." in fresh
    half = approval(
        approvals_required=2,
        version=2,
        decisions=(Decision(actor="supervisor:S-1", decision="approve", comment=None, at=NOW.isoformat()),),
    )
    card = approval_card(half, directory=PEOPLE)
    text = seen(card)
    assert text.startswith("Second approval needed\n")
    assert "1 of 2 approvals — approved by <@U0LEAD>; waiting for a second supervisor" in text
    assert ids.decode_value(buttons(card)[0]["value"]) == ("apr_1", 2)


def decided(status: str, **changes: Any) -> Approval:
    return approval(status=status, version=2, decided_at=NOW + timedelta(minutes=5), **changes)


APPROVED_BY = (Decision(actor="supervisor:S-1", decision="approve", comment="ok <!here>", at=NOW.isoformat()),)


def test_approved_card_shows_who_when_comment_and_the_refund() -> None:
    result = {
        "status": "REFUNDED",
        "refund_id": "R-77",
        "order_id": "O-1042",
        "amount": "189.00 USD",
        "created_at": NOW.isoformat(),
    }
    card = approval_card(
        decided("approved", decisions=APPROVED_BY, decider="supervisor:S-1", comment="ok <!here>", result=result),
        directory=PEOPLE,
    )
    text = seen(card)
    assert card.text == "Approved: Refund 189.00 USD on O-1042 (damaged)"
    assert text.startswith("Approved\n*Refund 189.00 USD on O-1042 (damaged)*\n")
    assert "Approved by <@U0LEAD> · <!date^1772366400^" in text
    assert "Comment: ok &lt;!here&gt;" in text and "<!here>" not in json.dumps(card.blocks)
    assert text.endswith("Refunded 189.00 USD on O-1042 · `R-77`")
    assert buttons(card) == [] and "Evidence cited" not in text


def test_rejected_card_shows_the_comment_escaped() -> None:
    rejected = decided(
        "rejected",
        decider="supervisor:S-1",
        comment=INJECTIONS,
        decisions=(Decision(actor="supervisor:S-1", decision="reject", comment=INJECTIONS, at=NOW.isoformat()),),
    )
    text = seen(approval_card(rejected, directory=PEOPLE))
    assert text.startswith("Rejected\n")
    assert (
        f"Rejected by <@U0LEAD> · <!date^1772366400^{{date_short_pretty}} at {{time}}|2026-03-01 12:00 UTC>\n"
        f"Comment: {ESCAPED}" in text
    )


def test_expired_and_superseded_cards_say_nothing_was_done() -> None:
    expired = seen(approval_card(decided("expired")))
    assert expired.startswith("Expired\n") and "Nobody decided before it expired. Nothing was done." in expired
    lapsed = approval_card(approval(), now=EXPIRES)  # still pending in the database, but past its expiry
    assert seen(lapsed).startswith("Expired\n") and buttons(lapsed) == []
    superseded = seen(approval_card(decided("superseded", superseded_by="apr_2")))
    assert "A newer version replaced this request (apr_2); decide that one instead." in superseded


REPLAYED_AT = wording.RESULT_REPLAYED.format(when=date(NOW))


@pytest.mark.parametrize(
    ("tool", "result", "expected"),
    [
        ("cancel_order", {"status": "CANCELLED", "order_id": "O-9"}, "Cancelled order O-9 · `O-9`"),
        (
            "issue_refund",
            {
                "status": "FAILED",
                "reason": "A precondition no longer holds; nothing was done.",
                "error": "amount_exceeds_refundable",
            },
            "Not done: a precondition no longer holds (`amount_exceeds_refundable`)",
        ),
        ("issue_refund", {"status": "REOPENED", "new_approval_id": "apr_3"}, f"{OUTCOME_REOPENED} (`apr_3`)"),
        (
            "issue_refund",
            {"status": "REFUNDED", "refund_id": "R-77", "replayed": True, "executed_at": NOW.isoformat()},
            f"{REPLAYED_AT} (Refunded 189.00 USD on O-1042 · `R-77`)",
        ),
        (
            "issue_refund",
            {"status": "REFUNDED", "replayed": True},
            f"{wording.RESULT_REPLAYED_NO_TIME} (Refunded 189.00 USD on O-1042)",
        ),
        ("no_such_tool", {"status": "WEIRD<>"}, "Outcome not recognised: WEIRD&lt;&gt;"),
        ("issue_refund", "done", "Outcome not recognised: done"),
    ],
)
def test_execution_results_in_words_come_from_the_tool(tool: str, result: Any, expected: str) -> None:
    args = {"order_id": "O-9" if tool == "cancel_order" else "O-1042", "amount_minor": 18900, "currency": "USD"}
    outcome = outcome_view(result, tool=REGISTRY.get(tool), args=args)
    assert outcome is not None and blocks.outcome_text(outcome) == expected


def test_untrusted_text_is_escaped_everywhere_on_the_approval_card() -> None:
    hostile = approval(
        summary=f"Refund 1.00 USD on O-1 ({INJECTIONS})",
        rationale=INJECTIONS,
        customer_id=INJECTIONS,
        requester=f"rep:{INJECTIONS}",
        evidence=({"id": INJECTIONS, "title": INJECTIONS, "excerpt": INJECTIONS},),
        arguments={"order_id": INJECTIONS, "`injected`": "`x`"},
        provenance={"order_id": "untrusted_text"},
        policy_version=INJECTIONS,
    )
    card = approval_card(hostile)
    dumped = json.dumps(card.blocks) + card.text
    for raw in ("<!channel>", "<@U123>", "<http://x|y>"):
        assert raw not in dumped
    assert dumped.count("&lt;!channel&gt;") >= 7
    assert "<!date^" in dumped  # our own date token survives


# -- limits -----------------------------------------------------------------------------------
def huge_approval() -> Approval:
    return approval(
        summary="S" * 5000,
        rationale="why " * 2500,
        evidence=tuple({"id": f"doc@{i}#s", "title": "T" * 500, "excerpt": "E" * 5000} for i in range(50)),
        arguments={f"arg_{i}": "v" * 5000 for i in range(200)},
        provenance={f"arg_{i}": "model" for i in range(200)},
        result={"status": "FAILED", "reason": "r" * 2_000_000, "detail": "d" * 2_000_000},
    )


@pytest.mark.parametrize("status", ["pending", "approved"])
def test_huge_inputs_stay_inside_slack_limits(status: str) -> None:
    """10k-char rationale, 50 evidence items, 200 arguments, a 2 MB result: ≤50 blocks, sections ≤3,000,
    the cumulative text under our budget — and the SDK validators passed while rendering."""
    card = approval_card(dataclasses.replace(huge_approval(), status=status, **ROUTING))
    assert len(card.blocks) <= blocks.MAX_MESSAGE_BLOCKS
    assert text_size(list(card.blocks)) <= blocks.TEXT_BUDGET
    assert "…and 45 more evidence item(s), in the API/CLI." in seen(card) or status != "pending"
    assert "…and 190 more argument(s), in the API/CLI." in seen(card) or status != "pending"


async def test_the_fake_slack_api_accepts_every_card_even_for_huge_inputs() -> None:
    """The strict fake runs Slack's checks (block count, section/field/button limits, cumulative text)."""
    huge = huge_approval()
    cards = [
        approval_card(dataclasses.replace(huge, **ROUTING)),
        approval_card(dataclasses.replace(huge, status="rejected", comment="c" * 10_000)),
        confirmation_card(confirmation(summary="S" * 10_000)),
        blocks.escalation_message(escalation(reason="r" * 5000, summary="s" * 20_000, conversation_id="c" * 500)),
        *blocks.trace_messages(
            [
                TraceView(
                    tool="t" * 300,
                    decision="reject",
                    reason="x" * 5000,
                    is_error=False,
                    result={"blob": "y" * 2_000_000},
                )
                for _ in range(25)
            ]
        ),
        *answers.answer_messages("para\n\n" * 8000, cards=[approval_card(approval())]),
    ]
    async with FakeSlackApi() as slack:
        client = AsyncWebClient(token=slack.token, base_url=slack.base_url)
        for card in cards:
            response = await client.chat_postMessage(channel="C0APPROVALS", text=card.text, blocks=card.block_list)
            assert response["ok"]
        modal = blocks.reject_modal(
            view(dataclasses.replace(huge, id="apr_" + "x" * 100)), channel="C0APPROVALS", ts="1700000001.000001"
        )
        assert (await client.views_open(trigger_id="trig", view=modal))["ok"]
        queue = [approval(id=f"apr_{i}", created_at=NOW + timedelta(minutes=i), summary="S" * 5000) for i in range(80)]
        home = blocks.home_view(
            queue=[view(a) for a in queue],
            threads=[AssistThread(channel="C0SUPPORT", thread_ts="1.2", customer_id="C-7")] * 40,
        )
        assert (await client.views_publish(user_id="U0LEAD", view=home))["ok"]


# -- modal, home, escalation, feedback, answers ----------------------------------------------------
def escalation(*, reason: str, summary: str, conversation_id: str) -> EscalationView:
    return EscalationView(
        conversation_id=conversation_id, channel="slack", customer_id="C-7", reason=reason, summary=summary, trace=()
    )


def test_reject_modal_asks_for_a_comment_and_remembers_only_id_version_and_card() -> None:
    modal = blocks.reject_modal(view(approval(version=4)), channel="C0APPROVALS", ts="1700000001.000100")
    assert modal["type"] == "modal" and modal["callback_id"] == ids.REJECT_MODAL
    assert ids.decode_modal_metadata(modal["private_metadata"]) == ids.ModalRef(
        id="apr_1", version=4, channel="C0APPROVALS", ts="1700000001.000100"
    )
    (intro, field) = modal["blocks"]
    assert intro["text"]["text"] == "You are rejecting: Refund 189.00 USD on O-1042 (damaged)"
    assert field["block_id"] == ids.REJECT_COMMENT_BLOCK and not field.get("optional")
    assert field["element"]["action_id"] == ids.REJECT_COMMENT_INPUT and field["element"]["multiline"] is True


def test_home_queue_lists_pending_approvals_newest_first_and_counts_the_rest() -> None:
    queue = [
        approval(id=f"apr_{i}", summary=f"Refund {i}", created_at=NOW + timedelta(minutes=i)) for i in range(60)
    ] + [approval(id="apr_done", status="approved")]
    home = blocks.home_view(queue=[view(a) for a in queue], directory=PEOPLE, pending_total=75)
    assert len(home["blocks"]) <= blocks.MAX_VIEW_BLOCKS
    shown = [ids.decode_value(b["elements"][0]["value"])[0] for b in home["blocks"] if b["type"] == "actions"]
    assert shown == [f"apr_{i}" for i in range(59, 59 - len(shown), -1)] and len(shown) == 24
    assert home["blocks"][-1]["elements"][0]["text"] == (
        "51 more waiting — see `signoff approvals list` or `GET /api/approvals?status=pending`."
    )
    block_ids = [b["block_id"] for b in home["blocks"] if "block_id" in b]
    assert len(block_ids) == len(set(block_ids))


def test_home_for_a_rep_lists_assist_threads_and_for_nobody_an_empty_state() -> None:
    threads = [
        AssistThread(
            channel="C0SUPPORT", thread_ts="1700000001.000100", customer_id="C-7", customer_name="Ada <!channel>"
        )
    ]
    home = blocks.home_view(threads=threads)
    assert render_blocks(home["blocks"]) == (
        "Your assist threads\n• Ada &lt;!channel&gt; (C-7) — <#C0SUPPORT>, thread `1700000001.000100`"
    )
    assert render_blocks(blocks.home_view(threads=[])["blocks"]).endswith(wording.HOME_THREADS_EMPTY)
    assert render_blocks(blocks.home_view(queue=[])["blocks"]) == "Approvals waiting\n" + wording.HOME_QUEUE_EMPTY
    assert render_blocks(blocks.home_view()["blocks"]) == wording.HOME_EMPTY


def test_escalation_message_names_case_and_pings_the_on_call_group() -> None:
    card = blocks.escalation_message(
        escalation(reason="customer asked for a person <@U9>", summary="Wants a call", conversation_id="conv_8"),
        oncall_group="S0ONCALL",
    )
    assert seen(card) == "\n".join(
        [
            "Handed to a person",
            "Reason (the agent's words): customer asked for a person &lt;@U9&gt;",
            "Summary (the agent's words): Wants a call",
            "*Customer*\nC-7",
            "*Conversation*\n`conv_8`",
            "<!subteam^S0ONCALL> can someone pick this up?",
            wording.ESCALATION_TRACE_FOLLOWS,
        ]
    )
    forged = blocks.escalation_message(
        escalation(reason="r", summary="s", conversation_id="c"), oncall_group="S1> <!channel"
    )
    assert "subteam" not in json.dumps(forged.blocks)


def test_trace_lists_each_call_with_its_gate_and_result_across_messages() -> None:
    steps = [
        TraceView(
            tool="get_order",
            decision="execute",
            reason=None,
            is_error=False,
            result={"order_id": "O-1042", "note": "<!channel>"},
        ),
        TraceView(tool="issue_refund", decision="approval", reason="above ceiling", is_error=False),
        TraceView(tool="get_order", decision="reject", reason="not_found", is_error=True),
    ] * 5
    messages = blocks.trace_messages(steps)
    assert len(messages) == 2
    first = seen(messages[0])
    assert first.startswith("Trace (1–10 of 15)\n*1.* `get_order` — ran\n```\n")
    assert "&lt;!channel&gt;" in first and "<!channel>" not in json.dumps(messages[0].blocks)
    assert "*2.* `issue_refund` — sent for approval · above ceiling" in first
    assert "*3.* `get_order` — refused (error) · not_found" in first
    assert seen(messages[1]).startswith("Trace (11–15 of 15)")
    assert seen(blocks.trace_messages([])[0]) == wording.TRACE_EMPTY


def test_feedback_buttons_carry_only_the_turn_and_vote() -> None:
    block = answers.feedback_block("turn_3")
    assert block["type"] == "context_actions" and block["block_id"] == ids.FEEDBACK_BLOCK
    (element,) = block["elements"]
    assert element["type"] == "feedback_buttons" and element["action_id"] == ids.FEEDBACK
    assert ids.decode_feedback(element["positive_button"]["value"]) == ("turn_3", "positive")
    assert ids.decode_feedback(element["negative_button"]["value"]) == ("turn_3", "negative")


def test_answer_is_split_into_markdown_messages_with_the_card_last() -> None:
    answer = "\n\n".join(f"Paragraph {i}: " + "text " * 200 for i in range(30))
    card = confirmation_card(confirmation())
    messages = answers.answer_messages(answer, cards=[card], extra_blocks=[answers.feedback_block("turn_3")])
    markdown = [b["text"] for m in messages for b in m.blocks if b["type"] == "markdown"]
    assert "".join(markdown) == answer
    assert all(len(t) <= answers.ANSWER_CHUNK for t in markdown)
    assert all(len(m.text) <= blocks.MESSAGE_TEXT_CHARS and m.text for m in messages)
    assert all(text_size(list(m.blocks)) <= blocks.TEXT_BUDGET for m in messages)
    last = messages[-1]
    assert [b["type"] for b in last.blocks][-4:] == ["section", "context", "actions", "context_actions"]
    only_card = answers.answer_messages("", cards=[card])
    assert only_card == [card]


@pytest.mark.parametrize(
    ("decision", "title", "status"),
    [
        ("confirmation", "Refund 189.00 USD on O-1042 — waiting for your confirmation", "pending"),
        ("approval", "Refund 189.00 USD on O-1042 — waiting for a supervisor's approval", "pending"),
        ("reject", "Refund 189.00 USD on O-1042 — not allowed", "error"),
        ("execute", "Refund 189.00 USD on O-1042", "complete"),
    ],
)
def test_gate_decisions_become_steps_in_our_words(decision: str, title: str, status: str) -> None:
    step = Step.for_gate("prop_1", "Refund 189.00 USD on O-1042", decision)
    assert (step.id, step.title, step.status) == ("prop_1", title, status)


def test_steps_block_lists_each_step_with_its_state() -> None:
    block = answers.steps_block(
        [Step(id="1", title="Looked up O-1042"), Step(id="2", title="Refund <!here>", status="error")]
    )
    assert block["elements"][0]["text"] == "*Steps*\n✓ Looked up O-1042\n✗ Refund &lt;!here&gt;"
