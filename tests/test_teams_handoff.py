"""A person takes over from Teams, in process through the fake Bot Connector.

A Teams customer asks for a person: the escalation card in the approvals channel carries
Take over, Hand back and Close (``Action.Execute``). A customer's click is refused in the
request and changes nothing; a rep's is decided in the worker and said once under the card.
The owner's reply in the card's reply chain reaches the customer's own Teams chat once, also
when Teams delivers it twice; another person's reply stays in the chain; the customer's answer
comes into the chain and the agent says nothing, but suggests a reply under the card, which
the owner's Send relays once; Hand back returns it to the agent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

import tests.test_teams_face as teams_face
from agent.llm.base import ModelRequest
from agent.llm.testing import Reply, tool_use_block
from storage.models import AuditEventRow, HandoffRow
from tests.teams_kit import APPROVALS, C7, PERSONAL, REP, SUP, click, message
from tests.test_teams_face import Rig, open_rig

ASK = "I want to speak to a person please"
DRAFT = "Glad to help! Care guide: https://shop.example/care <at>everyone</at>"


def plan(request: ModelRequest) -> Reply:
    if "Draft the next reply" in request.system:
        assert request.tools == []
        return DRAFT
    last = json.dumps(request.messages[-1].content)
    if "tool_result" in last:
        return "A colleague from our team will take it from here."
    if "speak to a person" in last:
        return [tool_use_block("escalate_to_human", {"reason": "customer_request", "summary": "Wants a person."})]
    return "Noted."


async def _handoff(rig: Rig) -> tuple[str, str | None]:
    async with rig.app.db.reader() as s:
        row = (await s.execute(select(HandoffRow))).scalar_one()
        return row.state, row.owner


async def _audited(rig: Rig, kind: str) -> list[str]:
    async with rig.app.db.reader() as s:
        return list((await s.execute(select(AuditEventRow.principal).where(AuditEventRow.kind == kind))).scalars())


def _chain(rig: Rig, card_id: str) -> list[str]:
    return [v.text or "" for v in rig.said(APPROVALS) if v.reply_to_id == card_id]


async def _suggestion_sent_once(rig: Rig, card_id: str) -> None:
    """The agent's suggestion is a card under the escalation card, marked, link- and mention-free,
    with Send; another person's Send is refused; the owner's two clicks relay it once."""
    [sug] = [v for v in rig.said(APPROVALS) if v.reply_to_id == card_id and v.card]
    shown = json.dumps(sug.card)
    assert "Suggestion from the agent" in shown and "https://" not in shown and "<at>" not in shown
    [send] = sug.card["actions"]
    assert send["verb"] == "signoff.suggestion.send" and set(send["data"]) == {"id", "version"}

    def press(aad: str, invoke_id: str) -> dict[str, Any]:
        return click(
            rig.connector.base_url, aad=aad, verb=send["verb"], target=send["data"]["id"], version=1,
            card_activity_id=sug.id, conversation_id=APPROVALS, invoke_id=invoke_id,
        )  # fmt: skip

    status, body = await rig.post(press(SUP, "f:sup-send"))
    assert status == 200 and "take it over first" in json.dumps(body)
    for invoke_id in ("f:send-1", "f:send-2"):
        assert (await rig.post(press(REP, invoke_id)))[0] == 200
    await rig.work()
    sent = [v.text or "" for v in rig.said(PERSONAL) if "Care guide" in (v.text or "")]
    assert len(sent) == 1 and sent[0].startswith("Priya Raman (support team): Glad to help!")
    assert "https://" not in sent[0] and "<at>" not in sent[0]
    assert _chain(rig, card_id).count("Priya Raman sent the agent's suggestion to the customer.") == 1
    assert len(await _audited(rig, "handoff.relayed")) == 2  # the typed reply and the suggestion


def _hand_off_click(rig: Rig, card: Any, *, aad: str, verb: str, invoke_id: str) -> dict[str, Any]:
    data = next(a["data"] for a in card.card["actions"] if a["verb"] == verb)
    return click(
        rig.connector.base_url,
        aad=aad,
        verb=verb,
        target=data["id"],
        version=data["version"],
        card_activity_id=card.id,
        conversation_id=APPROVALS,
        invoke_id=invoke_id,
    )


async def test_a_teams_rep_takes_over_replies_in_the_chain_and_hands_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(teams_face, "plan", plan)
    async with open_rig(tmp_path) as rig:
        base = rig.connector.base_url
        assert (await rig.post(message(base, text=ASK)))[0] == 202
        await rig.work()
        [card] = [v for v in rig.said(APPROVALS) if v.card and v.card.get("actions")]
        assert [a["verb"] for a in card.card["actions"]] == ["signoff.takeover", "signoff.handback", "signoff.close"]
        assert all(set(a["data"]) == {"id", "version"} for a in card.card["actions"])

        # A customer's click is refused in the request; a rep's is decided in the worker.
        status, body = await rig.post(_hand_off_click(rig, card, aad=C7, verb="signoff.takeover", invoke_id="f:c7"))
        assert status == 200 and "can't" in json.dumps(body)
        await rig.work()
        assert await _handoff(rig) == ("waiting", None)
        status, _ = await rig.post(_hand_off_click(rig, card, aad=REP, verb="signoff.takeover", invoke_id="f:rep"))
        assert status == 200
        await rig.work()
        assert await _handoff(rig) == ("taken", "S-1")
        assert _chain(rig, card.id) == [
            "Priya Raman took this over. Their replies to this card now go to the customer."
        ]
        assert await _audited(rig, "handoff.taken") == ["rep:S-1"]

        # The owner's reply in the chain reaches the customer once, however often Teams delivers it.
        chain = f"{APPROVALS};messageid={card.id}"
        reply = message(
            base, aad=REP, text="Your parcel ships today.", conversation_id=chain, activity_id="1700000000900",
            conversation_type="channel",
        )  # fmt: skip
        assert (await rig.post(reply))[0] == 202
        aside = message(
            base, aad=SUP, text="Side remark, not for the customer", conversation_id=chain,
            activity_id="1700000000901", conversation_type="channel",
        )  # fmt: skip
        assert (await rig.post(aside))[0] == 202
        await rig.work()
        assert (await rig.post(reply))[0] == 202
        await rig.work()
        customer_sees = [v.text or "" for v in rig.said(PERSONAL)]
        assert customer_sees.count("Priya Raman (support team): Your parcel ships today.") == 1
        assert not any("Side remark" in t for t in customer_sees)

        # The customer's answer comes into the chain; the agent says nothing.
        before = len(rig.said(PERSONAL))
        assert (await rig.post(message(base, text="Great, thanks!", activity_id="1700000000002")))[0] == 202
        await rig.work()
        assert len(rig.said(PERSONAL)) == before
        assert "Customer: Great, thanks!" in _chain(rig, card.id)
        await _suggestion_sent_once(rig, card.id)

        # A note: reply is a note for the agent, not a message to the customer.
        note = message(
            base, aad=REP, text="note: she was double charged last month", conversation_id=chain,
            activity_id="1700000000902", conversation_type="channel",
        )  # fmt: skip
        assert (await rig.post(note))[0] == 202
        await rig.work()
        assert not any("double charged" in (v.text or "") for v in rig.said(PERSONAL))

        # Hand back: said once under the card, with the note; the agent answers again.
        status, _ = await rig.post(_hand_off_click(rig, card, aad=REP, verb="signoff.handback", invoke_id="f:back"))
        assert status == 200
        await rig.work()
        assert await _handoff(rig) == ("returned", "S-1")
        async with rig.app.db.reader() as session:
            notes = (await session.execute(select(HandoffRow.notes))).scalar_one()
        assert notes == "she was double charged last month"
        assert _chain(rig, card.id).count("Priya Raman handed this back to the agent.") == 1
        assert (await rig.post(message(base, text="One more thing", activity_id="1700000000003")))[0] == 202
        await rig.work()
        assert rig.said(PERSONAL)[-1].text == "Noted."
