"""The outbound path with the real AsyncWebClient against the strict fake: retries that honour
Retry-After, one message a second per channel without holding other channels, Slack errors as
``SlackSendError`` codes, and a clean shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)

from bot.slack.pacing import ChannelPacer
from bot.slack.sender import SenderConfig, SlackSender, SlackSendError, make_client
from tests.fakes.slack_api import FakeClock, FakeSlackApi, Fault


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def slack(clock: FakeClock) -> AsyncIterator[FakeSlackApi]:
    async with FakeSlackApi(clock=clock) as fake:
        yield fake


@pytest.fixture
async def sender(slack: FakeSlackApi, clock: FakeClock) -> AsyncIterator[SlackSender]:
    client = make_client(slack.token, slack.base_url, sleep=clock.sleep, jitter_s=0)
    async with SlackSender(client, SenderConfig(clock=clock, sleep=clock.sleep)) as s:
        yield s


def test_make_client_installs_the_rate_limit_and_connection_handlers() -> None:
    client = make_client("xoxb-1", "http://127.0.0.1:9/api/")
    kinds = [type(h) for h in client.retry_handlers]
    assert AsyncConnectionErrorRetryHandler in kinds
    assert any(issubclass(k, AsyncRateLimitErrorRetryHandler) for k in kinds)
    assert client.base_url == "http://127.0.0.1:9/api/"
    assert make_client("xoxb-1").base_url == "https://slack.com/api/"


async def test_429_with_retry_after_is_retried_after_that_long_and_succeeds(
    slack: FakeSlackApi, sender: SlackSender, clock: FakeClock
) -> None:
    slack.fail("chat.postMessage", Fault.rate_limited(retry_after=3))
    ts = await sender.post("C0SUPPORT", "hello")
    calls = slack.calls("chat.postMessage")
    assert [c.status for c in calls] == [429, 200]
    assert clock.slept == [3.0]
    assert calls[1].at - calls[0].at == 3.0
    assert [m.ts for m in slack.messages_in("C0SUPPORT")] == [ts]


async def test_rate_limit_that_outlasts_the_retries_is_a_send_error_with_retry_after(
    slack: FakeSlackApi, sender: SlackSender
) -> None:
    slack.fail("chat.postMessage", *[Fault.rate_limited(retry_after=2)] * 4)
    with pytest.raises(SlackSendError) as caught:
        await sender.post("C0SUPPORT", "hello")
    assert (caught.value.error, caught.value.status, caught.value.retry_after) == ("ratelimited", 429, 2.0)
    assert len(slack.calls("chat.postMessage")) == 4  # first try + 3 retries


async def test_a_retry_after_beyond_the_maximum_wait_is_not_slept(
    slack: FakeSlackApi, sender: SlackSender, clock: FakeClock
) -> None:
    slack.fail("chat.postMessage", Fault.rate_limited(retry_after=3600))
    with pytest.raises(SlackSendError) as caught:
        await sender.post("C0SUPPORT", "hello")
    assert caught.value.retry_after == 3600 and clock.slept == []


async def test_messages_in_one_channel_go_a_second_apart_while_other_channels_do_not_wait() -> None:
    clock = FakeClock(auto=False)
    async with FakeSlackApi(clock=clock) as slack:
        client = make_client(slack.token, slack.base_url, sleep=clock.sleep, jitter_s=0)
        async with SlackSender(client, SenderConfig(clock=clock, sleep=clock.sleep)) as sender:
            busy = [asyncio.create_task(sender.post("C0BUSY", f"busy {i}")) for i in range(3)]
            await slack.wait_for("chat.postMessage", count=1)
            await clock.wait_for_sleepers(1)  # busy 1 waits for its slot
            other = await sender.post("C0OTHER", "other")  # not held behind C0BUSY
            assert [c.args["channel"] for c in slack.calls("chat.postMessage")] == ["C0BUSY", "C0OTHER"]
            assert other and not any(t.done() for t in busy[1:])
            assert slack.calls("chat.postMessage")[1].at == slack.calls("chat.postMessage")[0].at
            clock.advance(0.5)
            assert len(slack.calls("chat.postMessage")) == 2  # half a second wakes nobody
            clock.advance(0.5)
            await slack.wait_for("chat.postMessage", count=3)
            await clock.wait_for_sleepers(1)  # busy 2 waits for the next second
            clock.advance(1.0)
            await slack.wait_for("chat.postMessage", count=4)
            await asyncio.gather(*busy)
            busy_at = [c.at for c in slack.calls("chat.postMessage") if c.args["channel"] == "C0BUSY"]
            assert [b - a for a, b in zip(busy_at, busy_at[1:], strict=False)] == [1.0, 1.0]
            assert [m.text for m in slack.messages_in("C0BUSY")] == ["busy 0", "busy 1", "busy 2"]


async def test_pacing_spaces_posts_and_ephemerals_in_one_lane_while_a_card_update_goes_at_once(
    slack: FakeSlackApi, sender: SlackSender, clock: FakeClock
) -> None:
    """The one-a-second pace is chat.postMessage's: a decided card is redrawn at once, never
    behind a queue of new cards in the approvals channel (chat.update is Tier 3)."""
    ts = await sender.post("C0SUPPORT", "card v1")
    await sender.update("C0SUPPORT", ts, "card v2", [{"type": "section", "text": {"type": "mrkdwn", "text": "v2"}}])
    await sender.ephemeral("C0SUPPORT", "U0LEAD", "Only a supervisor can decide this.")
    await sender.post("C0SUPPORT", "card two")
    methods = ["chat.postMessage", "chat.update", "chat.postEphemeral", "chat.postMessage"]
    assert [c.method for c in slack.calls()] == methods
    assert [round(c.at - slack.calls()[0].at, 3) for c in slack.calls()] == [0.0, 0.0, 1.0, 2.0]
    assert [m.visible for m in slack.messages_in("C0SUPPORT")] == ["v2", "card two"]


async def test_slack_errors_surface_as_send_errors_with_slacks_code(slack: FakeSlackApi, sender: SlackSender) -> None:
    with pytest.raises(SlackSendError) as caught:
        await sender.post("C0SUPPORT", "x" * 40_001)
    assert (caught.value.method, caught.value.error) == ("chat.postMessage", "msg_too_long")
    with pytest.raises(SlackSendError) as caught:
        await sender.update("C0SUPPORT", "1.2", "nothing there")
    assert caught.value.error == "message_not_found"
    slack.fail("views.publish", Fault.server_error(500))
    with pytest.raises(SlackSendError) as caught:
        await sender.publish_home("U0LEAD", {"type": "home", "blocks": [{"type": "divider"}]})
    assert (caught.value.error, caught.value.status) == ("internal_error", 500)


async def test_a_failed_call_does_not_stop_the_channels_lane(slack: FakeSlackApi, sender: SlackSender) -> None:
    slack.fail("chat.postMessage", Fault.slack_error("is_archived"))
    first = asyncio.create_task(sender.post("C0SUPPORT", "one"))
    second = asyncio.create_task(sender.post("C0SUPPORT", "two"))
    with pytest.raises(SlackSendError):
        await first
    assert await second
    assert [m.text for m in slack.messages_in("C0SUPPORT")] == ["two"]


async def test_views_ephemeral_and_post_all_return_what_callers_record(
    slack: FakeSlackApi, sender: SlackSender
) -> None:
    modal = {
        "type": "modal",
        "title": {"type": "plain_text", "text": "Reject request"},
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "why?"}}],
    }
    view_id = await sender.open_view("trigger-1", modal)
    assert view_id.startswith("V") and slack.calls("views.open")[0].args["trigger_id"] == "trigger-1"
    await sender.publish_home("U0LEAD", {"type": "home", "blocks": [{"type": "divider"}]})
    assert "U0LEAD" in slack.home
    assert await sender.ephemeral("C0SUPPORT", "U0LEAD", "hi")
    from bot.slack.view_models import Outbound

    parent = slack.add_user_message("C0SUPPORT", "q")
    posted = await sender.post_all("C0SUPPORT", [Outbound(text="a"), Outbound(text="b")], thread_ts=parent)
    assert [m.ts for m in slack.messages_in("C0SUPPORT", parent)] == posted
    await sender.delete("C0SUPPORT", posted[0])
    assert [m.text for m in slack.messages_in("C0SUPPORT", parent)] == ["b"]


async def test_shutdown_sends_what_is_queued_then_refuses_more(slack: FakeSlackApi, clock: FakeClock) -> None:
    client = make_client(slack.token, slack.base_url, sleep=clock.sleep, jitter_s=0)
    sender = SlackSender(client, SenderConfig(clock=clock, sleep=clock.sleep))
    queued = [asyncio.create_task(sender.post("C0SUPPORT", f"m{i}")) for i in range(3)]
    await asyncio.sleep(0)
    await sender.aclose()
    assert all(t.done() and not t.exception() for t in queued)
    with pytest.raises(SlackSendError) as caught:
        await sender.post("C0SUPPORT", "late")
    assert caught.value.error == "closed"


async def test_shutdown_cancels_a_lane_that_cannot_drain_and_fails_its_callers() -> None:
    clock = FakeClock(auto=False)
    pacer = ChannelPacer(interval_s=1.0, clock=clock, sleep=clock.sleep)

    async def call() -> str:
        return "sent"

    first = await pacer.run("C1", call)
    stuck = asyncio.create_task(pacer.run("C1", call))
    await clock.wait_for_sleepers(1)
    await pacer.aclose(drain_s=0.01)
    assert first == "sent"
    with pytest.raises(RuntimeError):
        await stuck
    assert not pacer.busy()
