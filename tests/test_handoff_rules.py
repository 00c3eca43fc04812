"""The hand-off's rules on the repository (SQLite and PostgreSQL): one owner however many
people click at once, only the owner relays or hands back, a click made before the owner took
it never moves it, each relayed message is queued once, every transition is audited; the
support hours say honestly when a person replies; the metrics follow the transitions."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, time, timedelta

import pytest
from sqlalchemy.exc import IntegrityError

from agent import handoff
from agent.handoff_relay import PostKind, Relay, run_job
from agent.llm.testing import ScriptedModel
from agent.metrics import Metrics
from agent.policy import SupportHours
from storage.audit import AuditEvent
from storage.db import Database
from storage.handoffs import Handoff
from storage.models import HandoffRow
from storage.records import Conversation
from tests.support import C7, REP, Harness, seeded
from tools.context import Principal

PRIYA = handoff.Person(principal=REP, name="Priya Raman")
TOMAS = handoff.Person(principal=Principal(kind="rep", id="S-2"), name="Tomás Ortega")
MAYA = handoff.Person(principal=C7, name="Maya Chen")


async def _opened(any_db: Database) -> tuple[Harness, Handoff]:
    h = await seeded(any_db, ScriptedModel([]))
    conv = await h.runtime.open_conversation(principal=C7, channel="api")
    opened, new = await handoff.open_handoff(h.services, conv, reason="customer_request", opened_by=C7.key)
    again, second = await handoff.open_handoff(h.services, conv, reason="customer_request", opened_by=C7.key)
    assert new and not second and again.id == opened.id  # one active hand-off per conversation
    return h, opened


async def test_two_people_clicking_at_once_get_one_owner(any_db: Database) -> None:
    h, opened = await _opened(any_db)
    s = h.services
    results = await asyncio.gather(
        *(handoff.take_over(s, opened.id, opened.conversation_id, p, clicked_at=s.clock()) for p in (PRIYA, TOMAS) * 3)
    )
    winners = [r for r in results if r.done]
    assert len(winners) == 1
    final = await s.handoffs.get(opened.id)
    assert final is not None and winners[0].handoff is not None
    assert final.state == "taken" and final.owner == winners[0].handoff.owner
    assert [e.kind for e in await s.audit.list() if e.kind == "handoff.taken"] == ["handoff.taken"]


async def test_only_the_owner_relays_notes_and_hands_back_and_a_customer_takes_nothing(any_db: Database) -> None:
    h, opened = await _opened(any_db)
    s = h.services
    assert not (await handoff.take_over(s, opened.id, opened.conversation_id, MAYA)).done
    assert not (await handoff.take_over(s, opened.id, "conv_other", PRIYA)).done
    taken = await handoff.take_over(s, opened.id, opened.conversation_id, PRIYA)
    assert taken.done and taken.handoff is not None
    assert not await handoff.relay_reply(s, taken.handoff, TOMAS, "hi", key="k-tomas")
    assert await handoff.relay_reply(s, taken.handoff, PRIYA, "hi", key="k-1")
    assert not await handoff.relay_reply(s, taken.handoff, PRIYA, "hi", key="k-1")  # Slack's retry: queued once
    assert await handoff.add_note(s, taken.handoff, PRIYA, "be gentle")
    assert not (await handoff.end(s, opened.id, opened.conversation_id, TOMAS, close=False)).done
    back = await handoff.end(s, opened.id, opened.conversation_id, PRIYA, close=False)
    assert back.done and back.handoff is not None and back.handoff.state == "returned"
    assert back.handoff.notes == "be gentle"
    kinds = [e.kind for e in await s.audit.list() if e.kind.startswith("handoff.")]
    assert kinds == ["handoff.opened", "handoff.taken", "handoff.relayed", "handoff.noted", "handoff.returned"]


async def test_a_click_made_before_the_owner_took_it_never_moves_it(any_db: Database) -> None:
    h, opened = await _opened(any_db)
    s = h.services
    before = s.clock() - timedelta(seconds=1)
    assert (await handoff.take_over(s, opened.id, opened.conversation_id, PRIYA, clicked_at=before)).done
    late = await handoff.take_over(s, opened.id, opened.conversation_id, TOMAS, clicked_at=before)
    assert not late.done and late.reason == "taken"
    h.clock.now += timedelta(seconds=5)
    later = await handoff.take_over(s, opened.id, opened.conversation_id, TOMAS, clicked_at=s.clock())
    assert later.done and later.handoff is not None and later.handoff.owner == "S-2"


def test_support_hours_say_when_a_person_replies() -> None:
    hours = SupportHours(timezone="Europe/Berlin", opens=time(9), closes=time(17))
    saturday_noon = datetime(2026, 12, 5, 11, 0, tzinfo=UTC)
    assert not hours.is_open(saturday_noon)
    assert hours.next_opening(saturday_noon) == datetime(2026, 12, 7, 8, 0, tzinfo=UTC)
    monday_ten_berlin = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
    assert hours.is_open(monday_ten_berlin) and hours.next_opening(monday_ten_berlin) == monday_ten_berlin


def test_metrics_follow_the_transitions() -> None:
    m = Metrics()
    data = {"handoff_id": "hof_1", "conversation_id": "conv_1"}
    m.observe([AuditEvent(kind="handoff.opened", data=data)])
    m.observe([AuditEvent(kind="handoff.taken", data={**data, "owner": "S-1", "waited_s": 42.0})])
    m.observe([AuditEvent(kind="handoff.closed", data={**data, "owner": "S-1"})])
    text = m.render().decode()
    assert "signoff_handoffs_open 0.0" in text
    assert "signoff_handoff_takeover_seconds_count 1.0" in text
    assert 'signoff_handoffs_handled_total{staff="s-1"} 1.0' in text


async def test_nobody_takes_it_on_call_is_mentioned_again_and_the_customer_told(any_db: Database) -> None:
    """The SLA check runs one SLA after the team is next on: a waiting hand-off re-pages every
    staff surface and tells the customer (once per key, whatever retries); a taken one does not."""
    h, opened = await _opened(any_db)
    s = h.services
    posts: list[tuple[str, str]] = []
    told: list[tuple[str, str, str]] = []

    async def post(hof: Handoff, kind: PostKind, text: str, key: str) -> None:
        posts.append((kind, key))

    async def deliver(conv: Conversation, text: str, name: str, key: str) -> None:
        told.append((text, name, key))

    relay = Relay(customers={"api": deliver}, staff={"slack": post})
    await s.handoffs.set_surface(opened.id, "slack", {"channel": "C1", "ts": "1.1"}, thread="slack:T:C1:1.1")
    assert not await s.jobs.claim("w", kinds=[handoff.SLA_JOB])  # not due before the SLA
    h.clock.now += timedelta(days=4, seconds=s.handoff_sla_s)  # past any weekend and the SLA
    [job] = await s.jobs.claim("w", kinds=[handoff.SLA_JOB])
    await run_job(h.runtime, relay, job)
    await run_job(h.runtime, relay, job)  # a retry of the same job
    assert posts[0][0] == "repage" and len({k for _, k in posts}) == 1
    assert told and told[0][1] == "signoff" and len({k for *_, k in told}) == 1
    assert [e.kind for e in await s.audit.list(kind="handoff.repaged")]
    taken = await handoff.take_over(s, opened.id, opened.conversation_id, PRIYA)
    assert taken.done
    h.clock.now += timedelta(seconds=s.handoff_sla_s + 1)
    [second] = await s.jobs.claim("w", kinds=[handoff.SLA_JOB])
    before = len(posts)
    await run_job(h.runtime, relay, second)
    assert len(posts) == before  # a person owns it: nobody is paged


async def test_each_transition_is_announced_once_to_the_customers_face(any_db: Database) -> None:
    """The widget's ``handoff`` events: waiting, taken (with the person's name), returned."""
    h, opened = await _opened(any_db)
    s = h.services
    seen: list[tuple[str, str | None, str]] = []

    async def announce(conv: Conversation, state: str, name: str | None, key: str) -> None:
        seen.append((state, name, key))

    relay = Relay(states={"api": announce})
    assert (await handoff.take_over(s, opened.id, opened.conversation_id, PRIYA)).done
    assert (await handoff.end(s, opened.id, opened.conversation_id, PRIYA, close=False)).done
    for job in await s.jobs.claim("w", kinds=[handoff.STATE_JOB], limit=10):
        await run_job(h.runtime, relay, job)
    assert sorted((state, name) for state, name, _ in seen) == [
        ("returned", "Priya Raman"),
        ("taken", "Priya Raman"),
        ("waiting", None),
    ]
    assert len({key for *_, key in seen}) == 3


async def test_opening_at_once_opens_one_and_the_database_refuses_a_second_active(any_db: Database) -> None:
    """The one-active rule is the database's (a partial unique index on both backends), not
    only a look-then-insert: many opens at once open one, audited once; a second active row
    written past the repository is refused, while ended hand-offs may pile up."""
    h = await seeded(any_db, ScriptedModel([]))
    s = h.services
    conv = await h.runtime.open_conversation(principal=C7, channel="api")
    results = await asyncio.gather(
        *(handoff.open_handoff(s, conv, reason="customer_request", opened_by=C7.key) for _ in range(8))
    )
    assert sum(opened for _, opened in results) == 1
    assert len({hof.id for hof, _ in results}) == 1
    assert len(await s.audit.list(kind="handoff.opened")) == 1

    def row(id: str, state: str) -> HandoffRow:
        return HandoffRow(
            id=id, conversation_id=conv.id, state=state, reason="r", opened_by="x", surfaces={}, version=1,
            opened_at=s.clock(),
        )  # fmt: skip

    async with any_db.sessions() as session, session.begin():
        session.add_all([row("hof_old1", "closed"), row("hof_old2", "returned")])
    with pytest.raises(IntegrityError):
        async with any_db.sessions() as session, session.begin():
            session.add(row("hof_second", "waiting"))
    assert (await s.handoffs.active_for(conv.id)) == results[0][0]
