"""``POST /teams/messages`` end to end: signed requests reach ``accept`` exactly once;
bad, missing, expired, foreign-audience, foreign-issuer tokens and a serviceUrl the token
does not name never do, and every refusal is JSON."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bot.teams.auth import InboundAuthenticator
from bot.teams.config import TeamsConfig
from bot.teams.inbound import TeamsActivity, TeamsBotAdded, TeamsCardAction, TeamsMessage
from bot.teams.invoke import InvokeReply, card_reply
from bot.teams.routes import teams_routes
from tests.fakes.bot_connector import APP_ID, TENANT_ID, TokenIssuer, card_action_activity, message_activity

SERVICE = "https://smba.trafficmanager.net/amer/"
CARD = {"type": "AdaptiveCard", "version": "1.5", "body": []}


@dataclass
class Recorder:
    got: list[tuple[TeamsActivity, dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    reply: InvokeReply | None = None
    fail: bool = False

    async def __call__(
        self, activity: TeamsActivity, raw: dict[str, Any], reference: dict[str, Any]
    ) -> InvokeReply | None:
        if self.fail:
            raise RuntimeError("database down")
        self.got.append((activity, raw, reference))
        return self.reply


@dataclass
class Bot:
    url: str
    http: aiohttp.ClientSession
    issuer: TokenIssuer
    accept: Recorder

    def token(self, **kw: Any) -> str:
        return self.issuer.mint(**{"audience": APP_ID, "service_url": SERVICE, **kw})

    async def post(
        self, body: Any, *, token: str | None = None, raw: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        if token is not None:
            hdrs["Authorization"] = f"Bearer {token}"
        data = raw if raw is not None else json.dumps(body).encode()
        async with self.http.post(self.url, data=data, headers=hdrs) as resp:
            text = await resp.text()
            return resp.status, (json.loads(text) if text else None)


async def start(config: TeamsConfig, accept: Recorder) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.add_routes(teams_routes(accept, auth=InboundAuthenticator(config)))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/teams/messages"


def config_for(issuer: TokenIssuer, **kw: Any) -> TeamsConfig:
    return TeamsConfig(
        app_id=APP_ID,
        tenant_id=TENANT_ID,
        botframework_jwks_url=issuer.jwks_url,
        entra_jwks_url=issuer.jwks_url,
        max_body_bytes=64 * 1024,
        **kw,
    )


@pytest.fixture
async def bot() -> AsyncIterator[Bot]:
    async with TokenIssuer() as issuer, aiohttp.ClientSession() as http:
        accept = Recorder()
        runner, url = await start(config_for(issuer), accept)
        try:
            yield Bot(url=url, http=http, issuer=issuer, accept=accept)
        finally:
            await runner.cleanup()


async def test_a_signed_message_reaches_accept_exactly_once_with_its_record_raw_json_and_reference(bot: Bot) -> None:
    body = message_activity(service_url=SERVICE, conversation_type="channel", mention_bot=True, text="queue")
    status, answer = await bot.post(body, token=bot.token())
    assert (status, answer) == (202, {})
    ((activity, raw, reference),) = bot.accept.got
    assert isinstance(activity, TeamsMessage) and activity.text == "queue"
    assert raw == body
    assert reference["serviceUrl"] == SERVICE and reference["conversation"]["id"] == body["conversation"]["id"]


async def test_two_requests_reach_accept_twice_dedup_is_accepts_job_by_key(bot: Bot) -> None:
    body = message_activity(service_url=SERVICE)
    await bot.post(body, token=bot.token())
    await bot.post(body, token=bot.token())
    keys = [a.dedup_key for a, _, _ in bot.accept.got]
    assert len(keys) == 2 and keys[0] == keys[1]


async def test_a_card_click_is_answered_with_the_invoke_reply_accept_returns(bot: Bot) -> None:
    bot.accept.reply = card_reply(CARD)
    status, answer = await bot.post(
        card_action_activity(service_url=SERVICE, verb="signoff.decline"), token=bot.token()
    )
    assert status == 200
    assert answer == {"statusCode": 200, "type": "application/vnd.microsoft.card.adaptive", "value": CARD}
    ((activity, _, _),) = bot.accept.got
    assert isinstance(activity, TeamsCardAction) and activity.verb == "signoff.decline"


async def test_a_card_click_accept_leaves_unanswered_gets_the_sdk_default(bot: Bot) -> None:
    status, answer = await bot.post(card_action_activity(service_url=SERVICE), token=bot.token())
    assert (status, answer) == (200, {"statusCode": 200})


async def test_the_bot_being_added_reaches_accept_as_a_welcome(bot: Bot) -> None:
    body = message_activity(service_url=SERVICE, type="conversationUpdate", membersAdded=[{"id": f"28:{APP_ID}"}])
    status, _ = await bot.post(body, token=bot.token())
    assert status == 202 and isinstance(bot.accept.got[0][0], TeamsBotAdded)


async def test_typing_is_answered_200_and_not_handed_on(bot: Bot) -> None:
    status, _ = await bot.post(message_activity(service_url=SERVICE, type="typing"), token=bot.token())
    assert status == 200 and bot.accept.got == []


@pytest.mark.parametrize("case", ["missing", "garbage", "rogue", "expired", "audience", "issuer", "basic"])
async def test_bad_tokens_are_401_json_and_never_reach_accept(bot: Bot, case: str) -> None:
    body = message_activity(service_url=SERVICE)
    token = {
        "missing": None,
        "garbage": "abc.def.ghi",
        "rogue": bot.token(rogue=True),
        "expired": bot.token(expires_in=-3600),
        "audience": bot.token(audience="00000000-0000-4000-8000-000000000000"),
        "issuer": bot.token(issuer="https://sts.evil.example/"),
        "basic": None,
    }[case]
    headers = {"Authorization": "Basic dXNlcjpwYXNz"} if case == "basic" else None
    status, answer = await bot.post(body, token=token, headers=headers)
    assert status == 401 and set(answer) == {"error", "message"}
    assert bot.accept.got == []


async def test_a_service_url_the_token_does_not_name_is_401_and_never_reaches_accept(bot: Bot) -> None:
    body = message_activity(service_url="https://smba.botframework.com/redirect/")
    status, answer = await bot.post(body, token=bot.token(service_url=SERVICE))
    assert (status, answer["error"]) == (401, "service_url_mismatch")
    assert bot.accept.got == []


async def test_a_service_url_off_the_allow_list_is_401_even_when_signed_for_it(bot: Bot) -> None:
    evil = "https://collector.evil.example/"
    status, answer = await bot.post(message_activity(service_url=evil), token=bot.token(service_url=evil))
    assert (status, answer["error"]) == (401, "service_url_not_allowed")
    assert bot.accept.got == []


async def test_another_tenant_is_403_and_never_reaches_accept(bot: Bot) -> None:
    body = message_activity(service_url=SERVICE, tenant_id="99999999-9999-4999-8999-999999999999")
    status, answer = await bot.post(body, token=bot.token())
    assert (status, answer["error"]) == (403, "tenant_not_allowed")
    assert bot.accept.got == []


@pytest.mark.parametrize(
    ("raw", "code"), [(b"{not json", "bad_json"), (b"[1, 2]", "bad_activity"), (b"\xff\xfe", "bad_json")]
)
async def test_a_body_that_is_not_an_activity_object_is_400(bot: Bot, raw: bytes, code: str) -> None:
    status, answer = await bot.post(None, token=bot.token(), raw=raw)
    assert (status, answer["error"]) == (400, code) and bot.accept.got == []


async def test_a_malformed_activity_is_400_with_a_clear_message(bot: Bot) -> None:
    body = message_activity(service_url=SERVICE)
    del body["conversation"]
    status, answer = await bot.post(body, token=bot.token())
    assert status == 400 and "conversation" in answer["message"] and bot.accept.got == []


async def test_a_body_over_the_limit_is_413_without_being_parsed(bot: Bot) -> None:
    body = message_activity(service_url=SERVICE, padding="x" * 70_000)
    status, answer = await bot.post(body, token=bot.token())
    assert (status, answer["error"]) == (413, "too_large") and bot.accept.got == []


async def test_a_card_click_with_forged_data_gets_an_invoke_error_and_never_reaches_accept(bot: Bot) -> None:
    body = card_action_activity(
        service_url=SERVICE, verb="signoff.approve", data={"id": "apr_1", "version": 1, "amount_minor": 999999}
    )
    status, answer = await bot.post(body, token=bot.token())
    assert status == 200 and answer["statusCode"] == 400
    assert answer["type"] == "application/vnd.microsoft.error" and bot.accept.got == []


async def test_when_accept_fails_the_channel_gets_500_not_a_false_ok(bot: Bot) -> None:
    bot.accept.fail = True
    status, answer = await bot.post(message_activity(service_url=SERVICE), token=bot.token())
    assert (status, answer["error"]) == (500, "internal")


async def test_without_a_token_only_the_dev_flag_lets_a_request_in() -> None:
    async with TokenIssuer() as issuer, aiohttp.ClientSession() as http:
        accept = Recorder()
        runner, url = await start(config_for(issuer, dev_allow_anonymous=True), accept)
        try:
            b = Bot(url=url, http=http, issuer=issuer, accept=accept)
            status, _ = await b.post(message_activity(service_url=SERVICE))
            assert status == 202 and len(accept.got) == 1
            # The allow-list still holds for anonymous requests.
            status, _ = await b.post(message_activity(service_url="https://evil.example/"))
            assert status == 401 and len(accept.got) == 1
        finally:
            await runner.cleanup()


async def chunked(data: bytes, piece: int = 1000) -> AsyncIterator[bytes]:
    for i in range(0, len(data), piece):
        yield data[i : i + piece]


async def test_a_chunked_body_is_read_whole_and_a_chunked_body_over_the_limit_is_413(bot: Bot) -> None:
    """No Content-Length: the route still reads every chunk, and stops at the limit."""
    headers = {"Authorization": f"Bearer {bot.token()}", "Content-Type": "application/json"}
    good = json.dumps(message_activity(service_url=SERVICE, note="y" * 20_000)).encode()
    async with bot.http.post(bot.url, data=chunked(good), headers=headers) as resp:
        assert resp.status == 202
    big = json.dumps(message_activity(service_url=SERVICE, note="z" * 70_000)).encode()
    async with bot.http.post(bot.url, data=chunked(big), headers=headers) as resp:
        assert resp.status == 413
    assert len(bot.accept.got) == 1
