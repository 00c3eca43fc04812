"""Outbound through the Agents SDK's CloudAdapter and connector client, against the strict
fake Bot Connector on 127.0.0.1: bearer tokens, threads, card updates, deletes, 1:1 chats,
retries on 429 honouring Retry-After, and no retry that could post twice."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.teams.cards import notice_card
from bot.teams.config import TeamsConfig
from bot.teams.sender import (
    RetryPolicy,
    TeamsDeliveryError,
    TeamsSender,
    connections_with,
    msal_connections,
    retry_after_seconds,
)
from tests.fakes.bot_connector import APP_ID, TENANT_ID, FakeBotConnector, StaticTokenProvider, bearer

CONV = "a:1personal-conversation"
TOKEN = "outbound-token-for-tests"


@dataclass
class Harness:
    fake: FakeBotConnector
    sender: TeamsSender
    tokens: StaticTokenProvider
    slept: list[float] = field(default_factory=list)

    def reference(self, conversation_id: str = CONV, **extra: Any) -> dict[str, Any]:
        return {
            "activityId": "1700000000001",
            "user": {"id": "29:1user", "name": "Ann"},
            "bot": {"id": f"28:{APP_ID}", "name": "signoff"},
            "conversation": {"id": conversation_id, "conversationType": "personal", "tenantId": TENANT_ID},
            "channelId": "msteams",
            "serviceUrl": self.fake.base_url,
            **extra,
        }


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    async with FakeBotConnector(accept_token=lambda t: t == TOKEN) as fake:
        config = TeamsConfig(app_id=APP_ID, tenant_id=TENANT_ID, service_url_allow=("http://127.0.0.1",))
        tokens = StaticTokenProvider(TOKEN)
        harness = Harness(fake=fake, sender=None, tokens=tokens)  # type: ignore[arg-type]

        async def sleep(seconds: float) -> None:
            harness.slept.append(seconds)

        harness.sender = TeamsSender(
            config,
            connections=connections_with(config, tokens),
            sleep=sleep,
            retry=RetryPolicy(attempts=3, base_wait_s=0.25, max_wait_s=10),
        )
        fake.open_conversation(CONV)
        yield harness


CARD = notice_card("Refund 15.00 USD on order O-1042")


async def test_send_posts_a_new_message_with_the_sdk_bearer_token_and_returns_its_id(h: Harness) -> None:
    activity_id = await h.sender.send(h.reference(), text="On it.", card=CARD)
    (call,) = h.fake.calls("POST")
    assert call.path == f"/v3/conversations/{CONV}/activities" and call.status == 201
    assert bearer(call) == TOKEN
    assert call.body["text"] == "On it." and call.body["attachments"][0]["content"] == CARD
    assert call.body["from"]["id"] == f"28:{APP_ID}" and call.body["recipient"]["id"] == "29:1user"
    assert "replyToId" not in call.body  # a new message, not a reply to the inbound one
    assert [v.id for v in h.fake.visible(CONV)] == [activity_id]
    assert h.tokens.asked and h.tokens.asked[0][0] == "https://api.botframework.com"


async def test_reply_posts_to_the_activity_it_answers(h: Harness) -> None:
    await h.sender.reply(h.reference(), reply_to_id="1700000000001", text="Threaded.")
    (call,) = h.fake.calls("POST")
    assert call.path == f"/v3/conversations/{CONV}/activities/1700000000001"
    assert call.body["replyToId"] == "1700000000001"
    assert h.fake.visible(CONV)[0].reply_to_id == "1700000000001"


async def test_update_redraws_the_card_for_everyone(h: Harness) -> None:
    """PUT v3/conversations/{id}/activities/{activityId}: the fake shows the new card, once."""
    activity_id = await h.sender.send(h.reference(), card=CARD)
    decided = notice_card("Confirmed by Ann")
    await h.sender.update(h.reference(), activity_id=activity_id, card=decided)
    put = h.fake.calls("PUT")[0]
    assert put.path == f"/v3/conversations/{CONV}/activities/{activity_id}" and bearer(put) == TOKEN
    (shown,) = h.fake.visible(CONV)
    assert shown.card == decided and shown.updates == 1


async def test_updating_an_activity_that_does_not_exist_is_a_delivery_error(h: Harness) -> None:
    with pytest.raises(TeamsDeliveryError) as caught:
        await h.sender.update(h.reference(), activity_id="nope", card=CARD)
    assert caught.value.status == 404


async def test_delete_removes_what_a_person_sees(h: Harness) -> None:
    first = await h.sender.send(h.reference(), text="one")
    second = await h.sender.send(h.reference(), text="two")
    await h.sender.delete(h.reference(), activity_id=first)
    assert [v.id for v in h.fake.visible(CONV)] == [second]


async def test_429_is_retried_honouring_retry_after(h: Harness) -> None:
    h.fake.fail_next(2, status=429, retry_after="7")
    activity_id = await h.sender.send(h.reference(), text="hello")
    assert [c.status for c in h.fake.calls("POST")] == [429, 429, 201]
    assert h.slept == [7.0, 7.0]
    assert [v.id for v in h.fake.visible(CONV)] == [activity_id]


async def test_a_retry_after_beyond_the_cap_is_capped_and_a_missing_one_backs_off(h: Harness) -> None:
    h.fake.fail_next(1, status=429, retry_after="3600")
    h.fake.fail_next(1, status=429, retry_after=None)
    await h.sender.send(h.reference(), text="hello")
    assert h.slept[0] == 10 and 0 < h.slept[1] <= 10


async def test_429_that_never_ends_is_a_retryable_delivery_error_after_the_attempts(h: Harness) -> None:
    h.fake.fail_next(5, status=429, retry_after="1")
    with pytest.raises(TeamsDeliveryError) as caught:
        await h.sender.send(h.reference(), text="hello")
    assert (caught.value.status, caught.value.retryable) == (429, True)
    assert len(h.fake.calls("POST")) == 3 and h.fake.visible(CONV) == []


async def test_a_5xx_on_a_post_is_not_retried_so_a_message_is_never_posted_twice(h: Harness) -> None:
    h.fake.fail_next(1, status=502, retry_after=None)
    with pytest.raises(TeamsDeliveryError) as caught:
        await h.sender.send(h.reference(), text="hello")
    assert caught.value.status == 502
    assert len(h.fake.calls("POST")) == 1


async def test_a_5xx_on_an_update_is_retried_because_put_is_idempotent(h: Harness) -> None:
    activity_id = await h.sender.send(h.reference(), card=CARD)
    h.fake.fail_next(1, status=503, retry_after=None, method="PUT")
    await h.sender.update(h.reference(), activity_id=activity_id, card=notice_card("done"))
    assert [c.status for c in h.fake.calls("PUT")] == [503, 200]
    assert h.fake.visible(CONV)[0].card == notice_card("done")


async def test_a_failure_never_posts_the_sdk_exception_text_into_the_chat(h: Harness) -> None:
    """The SDK's default turn-error handler would send "Exception caught: …" to the user."""
    h.fake.fail_next(1, status=500, retry_after=None)
    with pytest.raises(TeamsDeliveryError):
        await h.sender.send(h.reference(), text="hello")
    assert len(h.fake.requests) == 1 and h.fake.visible(CONV) == []


async def test_a_rejected_token_is_a_delivery_error(h: Harness) -> None:
    h.tokens.token = "wrong"
    with pytest.raises(TeamsDeliveryError) as caught:
        await h.sender.send(h.reference(), text="hello")
    assert caught.value.status == 401


async def test_a_reference_whose_service_url_is_not_allowed_is_refused_before_any_call(h: Harness) -> None:
    for url in ("https://attacker.example/", "http://10.1.2.3/", "http://localhost:1/"):
        with pytest.raises(TeamsDeliveryError, match="not allowed"):
            await h.sender.send(h.reference(serviceUrl=url), text="hello")
    assert h.fake.requests == [] and h.tokens.asked == []


async def test_a_broken_reference_is_a_delivery_error(h: Harness) -> None:
    with pytest.raises(TeamsDeliveryError):
        await h.sender.send({"serviceUrl": h.fake.base_url}, text="x")
    with pytest.raises(ValueError):
        await h.sender.send(h.reference(), text="")


async def test_open_personal_chat_creates_the_conversation_posts_and_returns_a_usable_reference(h: Harness) -> None:
    sent = await h.sender.open_personal_chat(
        service_url=h.fake.base_url, tenant_id=TENANT_ID, user_id="29:supervisor", card=CARD
    )
    create = h.fake.calls("POST")[0]
    assert create.path == "/v3/conversations" and bearer(create) == TOKEN
    assert create.body["members"] == [{"id": "29:supervisor"}] and create.body["tenantId"] == TENANT_ID
    conv = sent.reference["conversation"]["id"]
    assert [v.id for v in h.fake.visible(conv)] == [sent.activity_id]
    await h.sender.update(sent.reference, activity_id=sent.activity_id, card=notice_card("Approved"))
    assert h.fake.visible(conv)[0].card == notice_card("Approved")


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    assert retry_after_seconds("12") == 12.0
    assert retry_after_seconds("Tue, 01 Dec 2026 10:00:30 GMT", now=now) == 30.0
    assert retry_after_seconds("yesterday") is None and retry_after_seconds(None) is None


def test_production_tokens_come_from_the_sdk_msal_connection_manager() -> None:
    config = TeamsConfig(app_id=APP_ID, tenant_id=TENANT_ID, app_password="s3cret")
    connections = msal_connections(config)
    assert type(connections).__name__ == "MsalConnectionManager"
    service = connections.get_default_connection_configuration()
    assert (service.CLIENT_ID, service.TENANT_ID, service.CLIENT_SECRET) == (APP_ID, TENANT_ID, "s3cret")
    with pytest.raises(ValueError, match="SIGNOFF_TEAMS_APP_PASSWORD"):
        msal_connections(TeamsConfig(app_id=APP_ID, tenant_id=TENANT_ID))
