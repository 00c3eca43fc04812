"""Limits for principals bound to no account (issue 20 B.1): a Slack user nobody linked and an
unverified email sender are limited by their own key like a known customer, every such
principal of one Slack team or sender domain shares a budget (policy ``strangers``), and the
accept-first faces turn messages away above a cap on queued inbound jobs (policy ``inbound``)."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer
from slack_bolt.request.async_request import AsyncBoltRequest
from sqlalchemy import func, select

from agent.errors import LimitExceeded
from agent.llm.testing import CompromisedModel, ScriptedModel
from agent.metrics import attach_metrics
from bot.app import create_app
from bot.cli.slack_demo import demo_database
from bot.email.turns import unverified_principal
from bot.server import make_web_app
from bot.settings import load_settings
from bot.slack.bolt import build_bolt
from bot.slack.face import Person
from bot.teams.invoke import InvokeReply
from bot.web import InboxFull
from storage.db import Database
from storage.inbox import Inbox
from storage.jobs import JobQueue
from storage.models import InboundRow, JobRow
from tests.api_kit import client_for, counts, drain, settings
from tests.fakes.bot_connector import APP_ID, TokenIssuer, message_activity
from tests.fakes.slack_api import FakeSlackApi
from tests.gatekeeper_kit import C7, make_env, policy_with
from tests.slack_kit import PRIYA, SIGNING_SECRET, event_body, mention, signed_headers
from tests.support import seeded
from tests.test_email_bridge import mail, signed
from tests.test_teams_routes import SERVICE, Recorder, config_for, start
from tools.context import Principal


def stranger(team: str, user: str) -> Principal:
    """A Slack user of ``team`` nobody linked to an account, as the Slack face names them."""
    return Person(team=team, user=user, kind="stranger").principal()


def test_unbound_principals_name_their_group() -> None:
    assert stranger("T1", "U1") == Principal(kind="customer", id="slack-T1-U1", customer_id=None, group="slack-team:T1")
    p = unverified_principal(" Maya.Chen@Example.COM ")
    assert (p.customer_id, p.group) == (None, "email-domain:example.com")
    assert p.id == unverified_principal("maya.chen@example.com").id


async def test_a_slack_stranger_gets_the_customer_limit_of_new_conversations(any_db: Database) -> None:
    env = await make_env(
        any_db, model=CompromisedModel(), policy=policy_with(customer={"max_new_conversations_per_hour": 2})
    )
    metrics = attach_metrics(env.services)
    who = stranger("T1", "U1")
    first = await env.runtime.chat(principal=who, channel="slack", message="hello")
    await env.runtime.chat(principal=who, channel="slack", message="hello again")
    before = await counts(any_db)
    with pytest.raises(LimitExceeded) as refused:
        await env.runtime.chat(principal=who, channel="slack", message="a third")
    assert refused.value.limit == "conversations_per_hour"
    assert await counts(any_db) == before
    assert metrics.registry.get_sample_value("signoff_limit_refusals_total", {"limit": "conversations_per_hour"}) == 1
    # the open conversation continues; another stranger of the team is counted apart
    await env.runtime.chat(principal=who, channel="slack", message="still here", conversation_id=first.conversation_id)
    await env.runtime.chat(principal=stranger("T1", "U2"), channel="slack", message="hello")


async def test_strangers_of_one_team_or_domain_share_a_budget(any_db: Database) -> None:
    policy = policy_with(strangers={"max_new_conversations_per_hour_per_group": 3})
    env = await make_env(any_db, model=CompromisedModel(), policy=policy)
    for user in ("U1", "U2", "U3"):
        await env.runtime.chat(principal=stranger("T1", user), channel="slack", message="hello")
    with pytest.raises(LimitExceeded) as refused:
        await env.runtime.chat(principal=stranger("T1", "U4"), channel="slack", message="a fresh identity")
    assert refused.value.limit == "group_conversations_per_hour"
    # another workspace, and a customer with an account, are not in that budget
    await env.runtime.chat(principal=stranger("T2", "U1"), channel="slack", message="hello")
    await env.runtime.chat(principal=C7, channel="slack", message="hello")
    # unverified senders of one domain share theirs
    for n in range(3):
        await env.runtime.chat(principal=unverified_principal(f"p{n}@spam.example"), channel="email", message="hi")
    with pytest.raises(LimitExceeded):
        await env.runtime.chat(principal=unverified_principal("p9@spam.example"), channel="email", message="hi")
    await env.runtime.chat(principal=unverified_principal("p9@other.example"), channel="email", message="hi")


async def test_a_strangers_model_tokens_per_day_are_limited(any_db: Database) -> None:
    env = await make_env(any_db, model=CompromisedModel())
    who = stranger("T1", "U1")
    first = await env.runtime.chat(principal=who, channel="slack", message="hello")
    used = await env.services.usage.unbound_tokens("customer", who.id, timedelta(hours=24))
    assert used >= 1000
    env.services.use_policy(policy_with(customer={"max_model_tokens_per_day": used}))
    with pytest.raises(LimitExceeded) as refused:
        await env.runtime.chat(principal=who, channel="slack", message="more", conversation_id=first.conversation_id)
    assert refused.value.limit == "model_tokens_per_day"
    # the team's budget: another stranger of the team is refused once the team spent it
    env.services.use_policy(policy_with(strangers={"max_model_tokens_per_day_per_group": used}))
    with pytest.raises(LimitExceeded) as refused:
        await env.runtime.chat(principal=stranger("T1", "U2"), channel="slack", message="hello")
    assert refused.value.limit == "group_model_tokens_per_day"
    await env.runtime.chat(principal=stranger("T2", "U2"), channel="slack", message="hello")


async def test_inbox_accept_refuses_above_the_queued_cap_and_stores_nothing(any_db: Database) -> None:
    inbox = Inbox(any_db, JobQueue(any_db))
    a = await inbox.accept("slack", ["k1"], {"n": 1}, max_queued=2)
    b = await inbox.accept("slack", ["k2"], {"n": 2}, max_queued=2)
    assert a.fresh and b.fresh
    before = await counts(any_db)
    full = await inbox.accept("slack", ["k3"], {"n": 3}, max_queued=2)
    assert (full.fresh, full.full, full.id) == (False, True, None)
    assert await counts(any_db) == before
    # once one is answered there is room, and the refused message's key was never recorded
    assert a.id is not None
    await inbox.finish(a.id, "delivered")
    again = await inbox.accept("slack", ["k3"], {"n": 3}, max_queued=2)
    assert again.fresh and not again.full


async def test_email_over_the_queue_cap_is_503_with_retry_after(db: Database) -> None:
    policy = policy_with(inbound={"max_queued_jobs": 1, "retry_after_s": 45})
    h = await seeded(db, ScriptedModel(["Thanks.", "Thanks again."]), policy=policy)
    async with client_for(h, settings()) as client:
        first = mail("Where is my order?", message_id="<q1@example.com>")
        r = await client.post("/email/inbound", data=first, headers=signed(first))
        assert r.status == 200, await r.text()
        before = await counts(db)
        second = mail("And another thing", message_id="<q2@example.com>")
        r = await client.post("/email/inbound", data=second, headers=signed(second))
        body = await r.json()
        assert (r.status, r.headers.get("Retry-After"), body["error"]) == (503, "45", "unavailable"), body
        assert await counts(db) == before
        await drain(client)
        r = await client.post("/email/inbound", data=second, headers=signed(second))
        assert r.status == 200 and (await r.json())["status"] == "accepted"
    assert json.loads(second)["subject"]


class _FullInbox(Recorder):
    """The Teams face's door when the inbound queue is at its cap."""

    async def __call__(self, activity: Any, raw: dict[str, Any], reference: dict[str, Any]) -> InvokeReply | None:
        raise InboxFull(17)


async def test_teams_over_the_queue_cap_is_503_with_retry_after() -> None:
    async with TokenIssuer() as issuer, aiohttp.ClientSession() as http:
        runner, url = await start(config_for(issuer), _FullInbox())
        try:
            token = issuer.mint(audience=APP_ID, service_url=SERVICE)
            body = message_activity(service_url=SERVICE, text="hello")
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
            async with http.post(url, data=json.dumps(body).encode(), headers=headers) as r:
                answer = await r.json()
                assert (r.status, r.headers.get("Retry-After"), answer["error"]) == (503, "17", "unavailable")
        finally:
            await runner.cleanup()


async def test_slack_over_the_queue_cap_is_503_before_anything_is_stored_so_slack_redelivers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A full queue is never acked: over HTTP 503 with Retry-After (Slack retries three times; the
    last one still refused is logged as lost), over Socket Mode no ack (Bolt's answer is not 200,
    so Slack redelivers the envelope); a redelivery once there is room is stored."""
    url = await demo_database(tmp_path / "cap.db")
    async with FakeSlackApi() as slack:
        env = {
            "SIGNOFF_DATABASE_URL": url,
            "SIGNOFF_LLM_PROVIDER": "scripted",
            "SIGNOFF_SLACK_API_URL": slack.base_url,
            "SLACK_BOT_TOKEN": "xoxb-test-token",
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        }
        app = await create_app(load_settings(env), seed=False)
        try:
            app.runtime.s.use_policy(policy_with(inbound={"max_queued_jobs": 1, "retry_after_s": 41}))
            async with TestClient(TestServer(make_web_app(app))) as c:

                async def post(body: str, **headers: str) -> ClientResponse:
                    kind = {"Content-Type": "application/json"}
                    return await c.post("/slack/events", data=body, headers={**kind, **signed_headers(body), **headers})

                assert (await post(event_body(mention(PRIYA, "hello", channel="D0PRIYA")))).status == 200
                before = await _stored(app.db)
                second = event_body(mention(PRIYA, "and again", channel="D0PRIYA"))
                r = await post(second)
                assert (r.status, r.headers.get("Retry-After")) == (503, "41"), await r.text()
                assert await _stored(app.db) == before
                with caplog.at_level(logging.ERROR):
                    r = await post(second, **{"X-Slack-Retry-Num": "3", "X-Slack-Retry-Reason": "http_error"})
                assert r.status == 503 and "still full on Slack's last retry" in caplog.text
                # socket mode: the same listener, no 200, so no ack
                envelope = json.loads(event_body(mention(PRIYA, "over the socket", channel="D0PRIYA")))
                answer = await build_bolt(app.slack).async_dispatch(AsyncBoltRequest(body=envelope, mode="socket_mode"))  # type: ignore[arg-type]
                assert answer.status != 200 and await _stored(app.db) == before
                # room again: Slack's redelivery is stored
                for item in await _queued(app.db):
                    await app.runtime.s.inbox.finish(item, "ignored")
                assert (await post(second, **{"X-Slack-Retry-Num": "1"})).status == 200
                assert await _stored(app.db) == (before[0] + 1, before[1] + 1)
        finally:
            await app.close()


async def _stored(db: Database) -> tuple[int, int]:
    """(inbound rows, jobs): what a turned-away delivery must leave as it was."""
    async with db.reader() as s:
        inbound = (await s.execute(select(func.count()).select_from(InboundRow))).scalar_one()
        jobs = (await s.execute(select(func.count()).select_from(JobRow))).scalar_one()
    return int(inbound), int(jobs)


async def _queued(db: Database) -> list[str]:
    async with db.reader() as s:
        return [str(i) for i in (await s.execute(select(InboundRow.id).where(InboundRow.status == "queued"))).scalars()]
