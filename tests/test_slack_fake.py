"""The fake Slack Web API is strict where Slack is: the real AsyncWebClient gets Slack's error
codes for what Slack would refuse, and ``messages_in`` shows what a person would see."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack_api import FakeClock, FakeSlackApi, Fault, slack_channel, slack_user


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlackApi]:
    async with FakeSlackApi(
        users=[
            slack_user("U0CUST", team_id="T0EXT", is_stranger=True),
            slack_user("U0GRID", team_id="T0SIB", enterprise_id="E0ORG", email="g@example.com"),
        ],
        channels=[
            slack_channel("C0SHARED", is_ext_shared=True),
            slack_channel("D0DM", is_im=True, user="U0CUST"),
            slack_channel("C0SUPPORT"),
        ],
        usergroups={"S0LEADS": ["U0LEAD"]},
    ) as fake:
        yield fake


@pytest.fixture
def client(slack: FakeSlackApi) -> AsyncWebClient:
    return AsyncWebClient(token=slack.token, base_url=slack.base_url)


async def error_of(call: object) -> str:
    with pytest.raises(SlackApiError) as caught:
        await call  # type: ignore[misc]
    return str(caught.value.response["error"])


def test_base_url_ends_with_api_slash(slack: FakeSlackApi) -> None:
    assert slack.base_url.startswith("http://127.0.0.1:") and slack.base_url.endswith("/api/")


async def test_bearer_token_is_checked(slack: FakeSlackApi) -> None:
    wrong = AsyncWebClient(token="xoxb-wrong", base_url=slack.base_url)
    assert await error_of(wrong.auth_test()) == "invalid_auth"
    async with aiohttp.ClientSession() as http, http.post(slack.base_url + "auth.test") as response:
        assert (await response.json())["error"] == "not_authed"


@pytest.mark.filterwarnings("ignore:The top-level `text` argument is missing")
async def test_unknown_methods_and_missing_arguments_are_refused(client: AsyncWebClient) -> None:
    assert await error_of(client.api_call("chat.scheduleEverything")) == "unknown_method"
    assert await error_of(client.api_call("chat.postMessage", json={"text": "no channel"})) == "invalid_arguments"
    assert await error_of(client.chat_postMessage(channel="C0SUPPORT")) == "no_text"
    assert await error_of(client.chat_postMessage(channel="C0NOWHERE", text="x")) == "channel_not_found"


async def test_reads_query_form_and_json_bodies_as_the_sdk_sends_them(
    slack: FakeSlackApi, client: AsyncWebClient
) -> None:
    posted = await client.chat_postMessage(
        channel="C0SUPPORT", text="hi", blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "hi"}}]
    )
    await client.reactions_add(channel="C0SUPPORT", timestamp=posted["ts"], name="eyes")  # query string
    await client.users_info(user="U0CUST")  # GET
    await client.api_call(
        "chat.update",
        data={"channel": "C0SUPPORT", "ts": posted["ts"], "text": "form", "blocks": '[{"type": "divider"}]'},
    )  # form, JSON string
    post, react, info, update = slack.calls()
    assert post.http_method == "POST" and post.args["blocks"][0]["type"] == "section"
    assert react.args == {"channel": "C0SUPPORT", "timestamp": posted["ts"], "name": "eyes"}
    assert info.http_method == "GET" and info.args == {"user": "U0CUST"}
    assert update.args["blocks"] == [{"type": "divider"}]
    assert post.headers["authorization"] == f"Bearer {slack.token}"


async def test_post_returns_fresh_increasing_ts_per_channel(client: AsyncWebClient) -> None:
    first = await client.chat_postMessage(channel="C0SUPPORT", text="one")
    second = await client.chat_postMessage(channel="C0SUPPORT", text="two")
    assert first["channel"] == "C0SUPPORT" and first["message"]["text"] == "one"
    assert float(second["ts"]) > float(first["ts"])


@pytest.mark.parametrize(
    ("blocks", "error"),
    [
        ([{"type": "divider"}] * 51, "invalid_blocks"),
        ([{"text": {"type": "mrkdwn", "text": "no type"}}], "invalid_blocks"),
        ([{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}], "invalid_blocks"),
        ([{"type": "section", "fields": [{"type": "mrkdwn", "text": "f"}] * 11}], "invalid_blocks"),
        (
            [
                {
                    "type": "actions",
                    "elements": [
                        {
                            "type": "button",
                            "text": {"type": "plain_text", "text": "b"},
                            "action_id": "a",
                            "value": "v" * 2001,
                        }
                    ],
                }
            ],
            "invalid_blocks",
        ),
        (
            [
                {
                    "type": "actions",
                    "elements": [
                        {"type": "button", "text": {"type": "plain_text", "text": "b"}, "action_id": "a" * 256}
                    ],
                }
            ],
            "invalid_blocks",
        ),
        (
            [
                {
                    "type": "actions",
                    "elements": [{"type": "button", "text": {"type": "plain_text", "text": "b"}, "action_id": "same"}]
                    * 2,
                }
            ],
            "invalid_blocks",
        ),
        ([{"type": "header", "text": {"type": "mrkdwn", "text": "header"}}], "invalid_blocks"),
        (
            [{"type": "input", "label": {"type": "plain_text", "text": "l"}, "element": {"type": "plain_text_input"}}],
            "invalid_blocks",
        ),
        (
            [
                {"type": "section", "block_id": "b", "text": {"type": "mrkdwn", "text": "1"}},
                {"type": "section", "block_id": "b", "text": {"type": "mrkdwn", "text": "2"}},
            ],
            "invalid_blocks",
        ),
        ([{"type": "markdown", "text": "m" * 7000}, {"type": "markdown", "text": "m" * 7000}], "msg_blocks_too_long"),
    ],
)
async def test_malformed_or_oversized_blocks_are_refused(
    client: AsyncWebClient, blocks: list[object], error: str
) -> None:
    assert await error_of(client.chat_postMessage(channel="C0SUPPORT", text="t", blocks=blocks)) == error


async def test_text_and_markdown_limits(client: AsyncWebClient) -> None:
    assert await error_of(client.chat_postMessage(channel="C0SUPPORT", text="x" * 40_001)) == "msg_too_long"
    assert (
        await error_of(client.chat_postMessage(channel="C0SUPPORT", markdown_text="x" * 12_001)) == "invalid_arguments"
    )
    assert (
        await error_of(client.chat_postMessage(channel="C0SUPPORT", markdown_text="m", text="t")) == "invalid_arguments"
    )
    assert (await client.chat_postMessage(channel="C0SUPPORT", markdown_text="x" * 12_000))["ok"]


async def test_streaming_outside_a_dm_needs_the_recipient(client: AsyncWebClient) -> None:
    assert (
        await error_of(client.chat_startStream(channel="C0SUPPORT", thread_ts="1.1", markdown_text="x"))
        == "invalid_arguments"
    )
    assert (
        await error_of(
            client.chat_startStream(channel="C0SUPPORT", thread_ts="1.1", markdown_text="x", recipient_user_id="U0CUST")
        )
        == "invalid_arguments"
    )
    assert (
        await client.chat_startStream(
            channel="C0SUPPORT",
            thread_ts="1.1",
            markdown_text="x",
            recipient_user_id="U0CUST",
            recipient_team_id="T0EXT",
        )
    )["ok"]
    assert (await client.chat_startStream(channel="D0DM", thread_ts="1.1", markdown_text="x"))["ok"]


async def test_a_stream_tracks_its_state_and_an_expired_one_refuses_append_and_stop(
    slack: FakeSlackApi, client: AsyncWebClient
) -> None:
    parent = slack.add_user_message("D0DM", "where is my order?")
    ts = (await client.chat_startStream(channel="D0DM", thread_ts=parent, markdown_text="Your order "))["ts"]
    await client.chat_appendStream(
        channel="D0DM",
        ts=ts,
        chunks=[
            {"type": "markdown_text", "text": "shipped."},
            {"type": "task_update", "id": "t1", "title": "Looked up O-1042", "status": "complete"},
        ],
    )
    assert (
        await error_of(client.chat_appendStream(channel="D0DM", ts=ts, markdown_text="y" * 12_001))
        == "invalid_arguments"
    )
    assert (
        await error_of(client.chat_appendStream(channel="D0DM", ts=ts, chunks=[{"type": "nope"}])) == "invalid_chunks"
    )
    slack.expire_stream("D0DM", ts)
    assert (
        await error_of(client.chat_appendStream(channel="D0DM", ts=ts, markdown_text="z"))
        == "message_not_in_streaming_state"
    )
    assert await error_of(client.chat_stopStream(channel="D0DM", ts=ts)) == "message_not_in_streaming_state"
    (seen,) = slack.messages_in("D0DM", parent)
    assert (seen.markdown, seen.state) == ("Your order shipped.", "expired")
    assert seen.tasks == ({"id": "t1", "title": "Looked up O-1042", "status": "complete"},)
    await client.chat_update(
        channel="D0DM", ts=ts, text="Your order shipped.", blocks=[{"type": "markdown", "text": "Your order shipped."}]
    )
    (fixed,) = slack.messages_in("D0DM", parent)
    assert (fixed.markdown, fixed.tasks, fixed.state, fixed.edited) == (None, (), "posted", True)
    assert fixed.visible == "Your order shipped."


async def test_streams_expire_by_age_when_given_a_ttl() -> None:
    clock = FakeClock()
    async with FakeSlackApi(clock=clock, stream_ttl_s=300) as slack:
        client = AsyncWebClient(token=slack.token, base_url=slack.base_url)
        ts = (await client.chat_startStream(channel="D0DM", thread_ts="1.1", markdown_text="a"))["ts"]
        clock.advance(299)
        await client.chat_appendStream(channel="D0DM", ts=ts, markdown_text="b")
        clock.advance(1)
        assert await error_of(client.chat_stopStream(channel="D0DM", ts=ts)) == "message_not_in_streaming_state"


async def test_messages_in_reflects_updates_deletes_threads_and_ephemerals(
    slack: FakeSlackApi, client: AsyncWebClient
) -> None:
    top = (await client.chat_postMessage(channel="C0SUPPORT", text="card v1"))["ts"]
    reply = (await client.chat_postMessage(channel="C0SUPPORT", text="in thread", thread_ts=top))["ts"]
    gone = (await client.chat_postMessage(channel="C0SUPPORT", text="oops", thread_ts=top))["ts"]
    await client.chat_update(
        channel="C0SUPPORT",
        ts=top,
        text="card v2",
        blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "*v2*"}}],
    )
    await client.chat_delete(channel="C0SUPPORT", ts=gone)
    await client.chat_postEphemeral(channel="C0SUPPORT", user="U0LEAD", text="only you")
    assert [m.visible for m in slack.messages_in("C0SUPPORT")] == ["*v2*"]
    assert [m.ts for m in slack.messages_in("C0SUPPORT", top)] == [reply]
    assert [m.visible for m in slack.messages_in("C0SUPPORT", top, include_parent=True)] == ["*v2*", "in thread"]
    assert slack.ephemeral[0]["user"] == "U0LEAD" and slack.ephemeral[0]["text"] == "only you"
    assert await error_of(client.chat_update(channel="C0SUPPORT", ts=gone, text="x")) == "message_not_found"
    user_ts = slack.add_user_message("C0SUPPORT", "mine")
    assert await error_of(client.chat_update(channel="C0SUPPORT", ts=user_ts, text="x")) == "cant_update_message"


async def test_lookups_answer_from_configuration(client: AsyncWebClient) -> None:
    user = (await client.users_info(user="U0CUST"))["user"]
    assert (user["team_id"], user["is_stranger"]) == ("T0EXT", True)
    assert (await client.users_info(user="U0GRID"))["user"]["enterprise_user"]["enterprise_id"] == "E0ORG"
    assert await error_of(client.users_info(user="U0NOBODY")) == "user_not_found"
    assert (await client.conversations_info(channel="C0SHARED"))["channel"]["is_ext_shared"] is True
    assert (await client.conversations_info(channel="D0DM"))["channel"]["is_im"] is True
    assert (await client.usergroups_users_list(usergroup="S0LEADS"))["users"] == ["U0LEAD"]
    assert await error_of(client.usergroups_users_list(usergroup="S0NONE")) == "no_such_subteam"
    assert (await client.auth_test())["user_id"] == "U0SIGNOFF"


async def test_assistant_and_views_methods(slack: FakeSlackApi, client: AsyncWebClient) -> None:
    await client.assistant_threads_setStatus(
        channel_id="D0DM", thread_ts="1.1", status="is working…", loading_messages=["Looking…"]
    )
    await client.assistant_threads_setStatus(channel_id="D0DM", thread_ts="1.1", status="")
    assert slack.statuses == [("D0DM", "1.1", "is working…"), ("D0DM", "1.1", "")]
    await client.assistant_threads_setSuggestedPrompts(channel_id="D0DM", prompts=[{"title": "t", "message": "m"}])
    await client.assistant_threads_setTitle(channel_id="D0DM", thread_ts="1.1", title="Order help")
    home = {"type": "home", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "hi"}}]}
    await client.views_publish(user_id="U0LEAD", view=home)
    assert slack.home["U0LEAD"]["blocks"] == home["blocks"]
    modal = {
        "type": "modal",
        "title": {"type": "plain_text", "text": "Reject"},
        "blocks": [
            {
                "type": "input",
                "label": {"type": "plain_text", "text": "Why"},
                "element": {"type": "plain_text_input", "action_id": "c"},
            }
        ],
    }
    opened = (await client.views_open(trigger_id="trig", view=modal))["view"]
    assert (await client.views_update(view_id=opened["id"], view=modal))["ok"]
    assert await error_of(client.views_update(view_id="V404", view=modal)) == "not_found"
    assert (
        await error_of(
            client.views_open(trigger_id="trig", view={**modal, "title": {"type": "plain_text", "text": "x" * 25}})
        )
        == "invalid_arguments"
    )


async def test_faults_are_served_once_each_in_order(slack: FakeSlackApi, client: AsyncWebClient) -> None:
    slack.fail("auth.test", Fault.slack_error("account_inactive"), Fault.server_error(503))
    assert await error_of(client.auth_test()) == "account_inactive"
    with pytest.raises(SlackApiError) as caught:
        await client.auth_test()
    assert caught.value.response.status_code == 503
    assert (await client.auth_test())["ok"]
    slack.fail("auth.test", Fault.rate_limited(retry_after=7))
    with pytest.raises(SlackApiError) as limited:
        await client.auth_test()  # the SDK's default handlers do not retry 429
    assert limited.value.response.status_code == 429 and limited.value.response.headers["Retry-After"] == "7"


async def test_wait_for_is_event_driven(slack: FakeSlackApi, client: AsyncWebClient) -> None:
    waiter = asyncio.create_task(slack.wait_for("chat.postMessage", count=2, within_s=5))
    await client.chat_postMessage(channel="C0SUPPORT", text="1")
    assert not waiter.done()
    await client.chat_postMessage(channel="C0SUPPORT", text="2")
    assert [c.args["text"] for c in await waiter] == ["1", "2"]
    with pytest.raises(TimeoutError):
        await slack.wait_for("chat.delete", within_s=0.05)


async def test_transcript_prints_a_thread_as_people_see_it(slack: FakeSlackApi, client: AsyncWebClient) -> None:
    parent = slack.add_user_message("C0SUPPORT", "assist C-7", user="U0REP")
    await client.chat_postMessage(
        channel="C0SUPPORT",
        thread_ts=parent,
        text="Bound to C-7",
        blocks=[
            {"type": "section", "text": {"type": "mrkdwn", "text": "Bound to *C-7*"}},
            {
                "type": "actions",
                "elements": [{"type": "button", "action_id": "a", "text": {"type": "plain_text", "text": "Confirm"}}],
            },
        ],
    )
    assert slack.transcript("C0SUPPORT", parent) == "[U0REP] assist C-7\n\n[U0SIGNOFF] Bound to *C-7*\n[Confirm]"
