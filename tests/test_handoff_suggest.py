"""The agent's suggestions while a person owns a conversation (SQLite and PostgreSQL).

The agent does not answer the customer; for the customer's message it drafts a reply for the
owner, with no tools, stored and shown once however often the job runs, and only when a staff
surface shows suggestions. The Slack post is ours: marked as a suggestion, the model's text
link-free and escaped, a Send button carrying ids only. A person's Send is their own reply:
relayed only for the owner, under their name, audited, once however often it is clicked.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

from agent import handoff, handoff_suggest
from agent.handoff_relay import PostKind, Relay, run_job
from agent.llm.testing import ScriptedModel
from bot.links import ZWSP, unlink
from bot.slack.handoff import suggestion_message
from storage.db import Database
from storage.handoffs import Handoff, Suggestion
from storage.records import Conversation
from tests.support import C7, Harness, seeded
from tests.test_handoff_rules import PRIYA, TOMAS

DRAFT = "Sorry about that! Details: [our page](https://evil.example/x) <img src=x onerror=alert(1)> <!channel>"


async def _taken(any_db: Database, model: ScriptedModel) -> tuple[Harness, Handoff]:
    h = await seeded(any_db, model)
    s = h.services
    conv = await h.runtime.open_conversation(principal=C7, channel="api")
    opened, _ = await handoff.open_handoff(s, conv, reason="customer_request", opened_by=C7.key)
    await s.handoffs.set_surface(opened.id, "slack", {"channel": "C1", "ts": "1.1"}, thread="slack:T:C1:1.1")
    taken = await handoff.take_over(s, opened.id, conv.id, PRIYA)
    assert taken.done and taken.handoff is not None
    return h, taken.handoff


async def test_the_agent_suggests_once_to_the_owner_and_says_nothing_to_the_customer(any_db: Database) -> None:
    model = ScriptedModel([DRAFT])
    h, taken = await _taken(any_db, model)
    s = h.services
    result = await h.runtime.take_message(
        principal=C7, channel="api", conversation_id=taken.conversation_id, message="Where is it?", message_key="m1"
    )
    assert result is not None and result.outcome == "held" and result.reply == ""
    shown: list[Suggestion] = []

    async def post(hof: Handoff, suggestion: Suggestion) -> None:
        shown.append(suggestion)

    mirrored: list[str] = []

    async def thread(hof: Handoff, kind: PostKind, text: str, key: str) -> None:
        mirrored.append(text)

    [mirror] = await s.jobs.claim("w", kinds=[handoff.MIRROR_JOB])
    await run_job(h.runtime, Relay(staff={"slack": thread}), mirror)  # no surface shows suggestions
    assert mirrored == ["Where is it?"] and not await s.jobs.claim("w", kinds=[handoff.SUGGEST_JOB])
    relay = Relay(staff={"slack": thread}, suggestions={"slack": post})
    await run_job(h.runtime, relay, mirror)  # the message is in the thread: now a draft is asked for
    await run_job(h.runtime, relay, mirror)  # a retry queues no second draft
    [job] = await s.jobs.claim("w", kinds=[handoff.SUGGEST_JOB], limit=5)
    assert model.requests == []
    await run_job(h.runtime, relay, job)
    await run_job(h.runtime, relay, job)  # a retry: the stored draft, the model is not asked again
    [request] = model.requests
    assert request.tools == [] and "Priya Raman" in request.system
    assert "Where is it?" in json.dumps([m.as_api() for m in request.messages])
    assert len({x.id for x in shown}) == 1 and shown[0].text == DRAFT
    [suggested] = await s.audit.list(kind="handoff.suggested")
    assert suggested.data["suggestion_id"] == shown[0].id and {"input_tokens", "output_tokens"} <= set(suggested.data)
    conv = await s.conversations.get(taken.conversation_id)
    assert conv is not None
    assert all(m.role == "user" for m in await s.conversations.history(conv.id))  # the agent said nothing


async def test_send_is_the_owners_own_reply_relayed_once(any_db: Database) -> None:
    model = ScriptedModel([DRAFT])
    h, taken = await _taken(any_db, model)
    s = h.services
    drafted = await handoff_suggest.draft(s, taken.id, "m1")
    assert drafted is not None
    _, sug = drafted
    send = handoff_suggest.send
    other = await send(s, sug.id, taken.conversation_id, TOMAS, shown=unlink)
    assert not other.done and other.reason == "not_owner"
    assert not (await send(s, sug.id, "conv_other", PRIYA, shown=unlink)).done
    clicks = await asyncio.gather(*(send(s, sug.id, taken.conversation_id, PRIYA, shown=unlink) for _ in range(2)))
    assert sorted(c.done for c in clicks) == [False, True]
    assert [c.reason for c in clicks if not c.done] == ["sent"]
    relayed = await s.audit.list(kind="handoff.relayed")
    assert [(e.principal, e.data["suggestion_id"]) for e in relayed] == [("rep:S-1", sug.id)]
    told: list[tuple[str, str]] = []

    async def deliver(conv: Conversation, text: str, name: str, key: str) -> None:
        told.append((text, name))

    [job] = await s.jobs.claim("w", kinds=[handoff.RELAY_JOB], limit=5)
    await run_job(h.runtime, Relay(customers={"api": deliver}), job)
    assert told == [(unlink(DRAFT), "Priya Raman")]
    assert "https://" not in told[0][0] and f"https:{ZWSP}//evil.example" in told[0][0]
    assert (await handoff.end(s, taken.id, taken.conversation_id, PRIYA, close=True)).done
    assert (await send(s, sug.id, taken.conversation_id, PRIYA, shown=unlink)).reason == "ended"


def test_the_slack_suggestion_is_ours_marked_link_free_and_its_send_carries_ids_only() -> None:
    sug = Suggestion(id="sug_1", handoff_id="hof_1", conversation_id="conv_1", text=DRAFT, created_at=datetime.now(UTC))
    message = suggestion_message(sug)
    dumped = json.dumps(message.blocks)
    assert "Suggestion from the agent" in message.blocks[0]["elements"][0]["text"]
    body = message.blocks[1]["text"]["text"]
    assert "https://" not in body and "evil.example" in body
    assert "<img" not in body and "&lt;img" in body and "<!channel>" not in body
    [button] = message.blocks[2]["elements"]
    assert button["action_id"] == handoff_suggest.SEND and button["text"]["text"] == "Send"
    assert json.loads(button["value"]) == {"conversation": "conv_1", "suggestion": "sug_1"}
    assert "https://" not in dumped and "https://" not in message.text
