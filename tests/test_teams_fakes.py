"""The fake Bot Connector is strict: it refuses what the channel service refuses, so a test
passing against it means the calls were well-formed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.fakes.bot_connector import FakeBotConnector

CONV = "a:conv"


@pytest.fixture
async def fake() -> AsyncIterator[FakeBotConnector]:
    async with FakeBotConnector(accept_token=lambda t: t == "good") as server:
        server.open_conversation(CONV)
        yield server


async def call(
    fake: FakeBotConnector, method: str, path: str, body: Any = None, token: str | None = "good"
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, fake.base_url + path, json=body, headers=headers) as resp,
    ):
        return resp.status, await resp.json()


def message(text: str = "hi", conv: str = CONV, **extra: Any) -> dict[str, Any]:
    return {"type": "message", "text": text, "conversation": {"id": conv}, **extra}


async def test_no_or_a_wrong_bearer_token_is_401(fake: FakeBotConnector) -> None:
    assert (await call(fake, "POST", f"v3/conversations/{CONV}/activities", message(), token=None))[0] == 401
    assert (await call(fake, "POST", f"v3/conversations/{CONV}/activities", message(), token="bad"))[0] == 401
    assert fake.visible(CONV) == []


async def test_an_unknown_conversation_and_an_unknown_activity_are_404(fake: FakeBotConnector) -> None:
    assert (await call(fake, "POST", "v3/conversations/a:other/activities", message(conv="a:other")))[0] == 404
    assert (await call(fake, "PUT", f"v3/conversations/{CONV}/activities/x", message()))[0] == 404
    assert (await call(fake, "DELETE", f"v3/conversations/{CONV}/activities/x"))[0] == 404


@pytest.mark.parametrize(
    "body",
    [
        {"type": "event", "conversation": {"id": CONV}, "text": "x"},
        {"type": "message", "conversation": {"id": "a:elsewhere"}, "text": "x"},
        {"type": "message", "conversation": {"id": CONV}},
        message(attachments=[{"contentType": "application/vnd.microsoft.card.adaptive", "content": {"body": []}}]),
        message(attachments=[{"content": {}}]),
    ],
)
async def test_malformed_activities_are_400(fake: FakeBotConnector, body: dict[str, Any]) -> None:
    status, answer = await call(fake, "POST", f"v3/conversations/{CONV}/activities", body)
    assert status == 400 and answer["error"]["code"] == "BadArgument"


async def test_updates_and_deletes_change_what_a_person_sees(fake: FakeBotConnector) -> None:
    _, first = await call(fake, "POST", f"v3/conversations/{CONV}/activities", message("one"))
    _, second = await call(fake, "POST", f"v3/conversations/{CONV}/activities", message("two"))
    await call(fake, "PUT", f"v3/conversations/{CONV}/activities/{first['id']}", message("one, edited"))
    await call(fake, "DELETE", f"v3/conversations/{CONV}/activities/{second['id']}")
    assert [(v.text, v.updates) for v in fake.visible(CONV)] == [("one, edited", 1)]


async def test_injected_failures_carry_retry_after_and_then_stop(fake: FakeBotConnector) -> None:
    fake.fail_next(1, status=429, retry_after="4")
    async with aiohttp.ClientSession() as http:
        async with http.post(
            fake.base_url + f"v3/conversations/{CONV}/activities",
            json=message(),
            headers={"Authorization": "Bearer good"},
        ) as resp:
            assert resp.status == 429 and resp.headers["Retry-After"] == "4"
    assert (await call(fake, "POST", f"v3/conversations/{CONV}/activities", message()))[0] == 201


async def test_wait_for_wakes_on_the_matching_call_and_records_headers_and_body(fake: FakeBotConnector) -> None:
    await call(fake, "POST", f"v3/conversations/{CONV}/activities", message("hello"))
    calls = await fake.wait_for(lambda reqs: any(r.method == "POST" for r in reqs))
    assert calls[0].headers["authorization"] == "Bearer good" and calls[0].body["text"] == "hello"
    with pytest.raises(TimeoutError):
        await fake.wait_for(lambda reqs: len(reqs) > 5, within_s=0.2)
