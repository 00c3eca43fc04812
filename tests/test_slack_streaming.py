"""A turn's streamed reply, with the real AsyncWebClient (``chat_stream``) against the strict fake:
status, steps as task chunks, text, cards at stop; rollover by size and age; recovery from an
expired stream without losing or repeating text; fallback to chat.postMessage; recipients."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.slack import answers, wording
from bot.slack.mrkdwn import ZWSP
from bot.slack.sender import SenderConfig, SlackSender, SlackSendError, make_client
from bot.slack.streaming import Recipient, StreamOptions
from bot.slack.view_models import Outbound, Step
from tests.fakes.slack_api import FakeClock, FakeSlackApi, Fault, SeenMessage

CARD = Outbound(
    text="Please confirm: Refund 189.00 USD on O-1042 (damaged)",
    blocks=(
        {"type": "section", "text": {"type": "mrkdwn", "text": "*Please confirm:* Refund 189.00 USD on O-1042"}},
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "action_id": "signoff.confirm",
                    "value": '{"id":"c","version":1}',
                    "text": {"type": "plain_text", "text": "Confirm"},
                }
            ],
        },
    ),
)
CUSTOMER = Recipient(user_id="U0CUST", team_id="T0EXT")  # an external Slack Connect user: their own team


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def slack(clock: FakeClock) -> AsyncIterator[FakeSlackApi]:
    async with FakeSlackApi(clock=clock, stream_ttl_s=300) as fake:
        yield fake


@pytest.fixture
async def sender(slack: FakeSlackApi, clock: FakeClock) -> AsyncIterator[SlackSender]:
    client = make_client(slack.token, slack.base_url, sleep=clock.sleep, jitter_s=0)
    async with SlackSender(client, SenderConfig(clock=clock, sleep=clock.sleep)) as s:
        yield s


def paragraphs(count: int, words: int = 40) -> str:
    return "".join(f"Paragraph {i}: " + "lorem " * words + "\n\n" for i in range(count))


def streamed_text(seen: list[SeenMessage]) -> str:
    """The answer as a reader has it across the thread's messages (markdown or markdown blocks)."""
    out = []
    for m in seen:
        if m.markdown is not None:
            out.append(m.markdown)
        out += [b["text"] for b in m.blocks if b["type"] == "markdown"]
    return "".join(out)


async def test_dm_reply_streams_status_steps_text_and_cards_at_stop(slack: FakeSlackApi, sender: SlackSender) -> None:
    parent = slack.add_user_message("D0CUST", "Where is O-1042? It arrived broken.")
    async with sender.reply(channel="D0CUST", thread_ts=parent) as reply:
        await reply.set_status()
        await reply.step(Step(id="t1", title="Looked up O-1042"))
        await reply.write("Your order O-1042 was delivered on 2 March. ")
        await reply.write("I can refund it.")
        await reply.step(Step(id="t2", title="Refund 189.00 USD — waiting for your confirmation", status="pending"))
        result = await reply.finish(cards=[CARD], extra_blocks=[answers.feedback_block("turn_1")])
    assert result.streamed and len(result.ts) == 1
    assert [c.method for c in slack.calls()] == [
        "assistant.threads.setStatus",
        "chat.startStream",
        "chat.appendStream",
        "chat.appendStream",
        "chat.stopStream",
        "assistant.threads.setStatus",
    ]
    start = slack.calls("chat.startStream")[0].args
    assert "recipient_user_id" not in start and "recipient_team_id" not in start  # a DM needs none
    assert start["task_display_mode"] == "timeline"
    assert slack.statuses == [("D0CUST", parent, wording.STATUS_WORKING), ("D0CUST", parent, "")]
    assert slack.calls("assistant.threads.setStatus")[0].args["loading_messages"] == list(wording.LOADING_MESSAGES)
    (message,) = slack.messages_in("D0CUST", parent)
    assert message.ts == result.ts[0] and message.state == "stopped"
    assert message.markdown == "Your order O-1042 was delivered on 2 March. I can refund it."
    assert [(t["id"], t["title"], t["status"]) for t in message.tasks] == [
        ("t1", "Looked up O-1042", "complete"),
        ("t2", "Refund 189.00 USD — waiting for your confirmation", "pending"),
    ]
    assert [b["type"] for b in message.blocks] == ["section", "actions", "context_actions"]


async def test_channel_stream_names_the_recipient_with_the_actors_own_team(
    slack: FakeSlackApi, sender: SlackSender
) -> None:
    parent = slack.add_user_message("C0SHARED", "hi")
    async with sender.reply(channel="C0SHARED", thread_ts=parent, recipient=CUSTOMER) as reply:
        await reply.write("Hello!")
    start = slack.calls("chat.startStream")[0]
    assert start.ok
    assert (start.args["recipient_user_id"], start.args["recipient_team_id"]) == ("U0CUST", "T0EXT")
    assert [m.markdown for m in slack.messages_in("C0SHARED", parent)] == ["Hello!"]


def test_a_channel_stream_without_recipient_is_a_programming_error(sender: SlackSender) -> None:
    with pytest.raises(ValueError, match="recipient"):
        sender.reply(channel="C0SUPPORT", thread_ts="1.1")
    sender.reply(channel="C0SUPPORT", thread_ts="1.1", options=StreamOptions(enabled=False))  # posts need none


async def test_small_writes_are_buffered_until_enough_text(slack: FakeSlackApi, sender: SlackSender) -> None:
    reply = sender.reply(channel="D0CUST", thread_ts="1.1", options=StreamOptions(buffer_chars=100))
    for _ in range(9):
        await reply.write("ten chars ")
    assert slack.calls("chat.startStream") == []
    await reply.write("ten chars ")
    assert len(slack.calls("chat.startStream")) == 1
    await reply.finish()
    assert slack.messages_in("D0CUST", "1.1")[0].markdown == "ten chars " * 10


async def test_rolls_over_into_new_messages_before_the_character_limit(
    slack: FakeSlackApi, sender: SlackSender
) -> None:
    answer = paragraphs(60)  # ~15k characters
    parent = slack.add_user_message("D0CUST", "tell me everything")
    reply = sender.reply(channel="D0CUST", thread_ts=parent, options=StreamOptions(max_chars=4000))
    for i in range(0, len(answer), 700):
        await reply.write(answer[i : i + 700])
    result = await reply.finish(cards=[CARD])
    seen = slack.messages_in("D0CUST", parent)
    assert len(seen) == len(result.ts) >= 4 and [m.ts for m in seen] == list(result.ts)
    assert all(len(m.markdown or "") <= 4000 for m in seen)
    assert all(m.state == "stopped" for m in seen)
    assert streamed_text(seen) == answer
    assert all((m.markdown or "").endswith("\n\n") for m in seen[:-1])  # cut at paragraph breaks
    assert seen[-1].blocks == CARD.blocks and all(not m.blocks for m in seen[:-1])
    assert all(c.ok for c in slack.calls())  # the fake refused nothing (12k per append, 50 blocks…)


async def test_one_huge_write_is_sent_in_pieces_slack_accepts(slack: FakeSlackApi, sender: SlackSender) -> None:
    answer = "x" * 25_000
    async with sender.reply(channel="D0CUST", thread_ts="1.1") as reply:
        await reply.write(answer)
    assert all(c.ok for c in slack.calls())
    assert streamed_text(slack.messages_in("D0CUST", "1.1")) == answer


async def test_rolls_over_before_the_stream_ages_out(
    slack: FakeSlackApi, sender: SlackSender, clock: FakeClock
) -> None:
    """Streams die after ~5 minutes; at 4.5 the reply stops the old message and starts a new one."""
    parent = slack.add_user_message("D0CUST", "slow question")
    reply = sender.reply(channel="D0CUST", thread_ts=parent, options=StreamOptions(buffer_chars=1))
    await reply.write("Checking the warehouse. ")
    clock.advance(269)
    await reply.write("Still checking. ")
    assert len(slack.calls("chat.startStream")) == 1
    clock.advance(2)  # 271 s old: past max_age_s=270
    await reply.step(Step(id="t1", title="Asked the carrier"))
    await reply.write("Found it.")
    result = await reply.finish()
    seen = slack.messages_in("D0CUST", parent)
    assert [m.markdown for m in seen] == ["Checking the warehouse. Still checking. ", "Found it."]
    assert [m.state for m in seen] == ["stopped", "stopped"] and len(result.ts) == 2
    assert not any(c.response.get("error") == "message_not_in_streaming_state" for c in slack.calls())
    assert [t["title"] for t in seen[1].tasks] == ["Asked the carrier"]


async def test_an_expired_stream_is_finalised_and_the_reply_goes_on_without_losing_or_repeating_text(
    slack: FakeSlackApi, sender: SlackSender, clock: FakeClock
) -> None:
    parent = slack.add_user_message("C0SHARED", "refund please")
    reply = sender.reply(
        channel="C0SHARED",
        thread_ts=parent,
        recipient=CUSTOMER,
        options=StreamOptions(buffer_chars=1, max_age_s=10_000),
    )
    await reply.step(Step(id="t1", title="Looked up O-1042"))
    await reply.write("First part. ")
    clock.advance(301)  # the fake's stream TTL is 300 s; ours was configured past it
    await reply.write("Second part. ")
    await reply.write("Third part.")
    result = await reply.finish(cards=[CARD])
    errors = [c for c in slack.calls() if c.response.get("error") == "message_not_in_streaming_state"]
    assert len(errors) == 1 and errors[0].method == "chat.appendStream"
    update = slack.calls("chat.update")[0]
    assert update.args["ts"] == result.ts[0]
    broken, fresh = slack.messages_in("C0SHARED", parent)
    assert (broken.state, broken.edited) == ("posted", True)
    assert [b["text"] for b in broken.blocks if b["type"] == "markdown"] == ["First part. "]
    assert "Looked up O-1042" in broken.visible  # its steps are kept in the redraw
    assert fresh.markdown == "Second part. Third part." and fresh.blocks == CARD.blocks
    assert streamed_text([broken, fresh]) == "First part. Second part. Third part."
    second_start = slack.calls("chat.startStream")[1].args
    assert second_start["recipient_team_id"] == "T0EXT"


async def test_a_stream_that_expires_at_stop_is_redrawn_with_its_cards(
    slack: FakeSlackApi, sender: SlackSender
) -> None:
    parent = slack.add_user_message("D0CUST", "q")
    reply = sender.reply(channel="D0CUST", thread_ts=parent, options=StreamOptions(buffer_chars=1))
    await reply.write("All done.")
    slack.expire_stream("D0CUST", reply.ts[0])
    result = await reply.finish(cards=[CARD])
    (message,) = slack.messages_in("D0CUST", parent)
    assert message.ts == result.ts[0] and message.edited
    assert [b["type"] for b in message.blocks] == ["markdown", "section", "actions"]
    assert streamed_text([message]) == "All done."


async def test_falls_back_to_post_message_when_streaming_is_unknown(slack: FakeSlackApi, sender: SlackSender) -> None:
    slack.fail("chat.startStream", Fault.slack_error("unknown_method"))
    answer = paragraphs(50)  # ~12.5k: more than one message
    parent = slack.add_user_message("C0SHARED", "q")
    reply = sender.reply(channel="C0SHARED", thread_ts=parent, recipient=CUSTOMER)
    await reply.step(Step(id="t1", title="Looked up O-1042"))
    await reply.write(answer)
    result = await reply.finish(cards=[CARD], extra_blocks=[answers.feedback_block("turn_2")])
    assert not result.streamed
    assert len(slack.calls("chat.startStream")) == 1 and not slack.calls("chat.appendStream")
    posts = slack.calls("chat.postMessage")
    assert len(posts) >= 2 and [p.response["ts"] for p in posts] == list(result.ts)
    seen = slack.messages_in("C0SHARED", parent)
    assert streamed_text(seen) == answer
    assert all(m.text for m in seen)  # notifications get text
    last = [b["type"] for b in seen[-1].blocks]
    assert last[-4:] == ["section", "actions", "context", "context_actions"]
    assert "✓ Looked up O-1042" in seen[-1].visible


async def test_streaming_switched_off_posts_plainly(slack: FakeSlackApi, sender: SlackSender) -> None:
    async with sender.reply(channel="C0SUPPORT", thread_ts="1.1", options=StreamOptions(enabled=False)) as reply:
        await reply.write("Plain answer.")
    assert [c.method for c in slack.calls()] == ["chat.postMessage"]
    assert slack.messages_in("C0SUPPORT", "1.1")[0].blocks[0] == {"type": "markdown", "text": "Plain answer."}


async def test_other_stream_errors_are_raised_as_send_errors(slack: FakeSlackApi, sender: SlackSender) -> None:
    slack.fail("chat.startStream", Fault.slack_error("channel_not_found"))
    reply = sender.reply(channel="D0CUST", thread_ts="1.1", options=StreamOptions(buffer_chars=1))
    with pytest.raises(SlackSendError) as caught:
        await reply.write("hello")
    assert caught.value.error == "channel_not_found"


async def test_status_is_best_effort(slack: FakeSlackApi, sender: SlackSender) -> None:
    slack.fail("assistant.threads.setStatus", Fault.slack_error("not_allowed"))
    async with sender.reply(channel="D0CUST", thread_ts="1.1") as reply:
        await reply.set_status()
        await reply.write("still answers")
    assert slack.messages_in("D0CUST", "1.1")[0].markdown == "still answers"
    assert len(slack.calls("assistant.threads.setStatus")) == 1  # never set, so never cleared


async def test_two_replies_starting_together_in_one_channel_are_paced(
    slack: FakeSlackApi, sender: SlackSender, clock: FakeClock
) -> None:
    a = sender.reply(channel="C0SUPPORT", thread_ts="1.1", recipient=CUSTOMER, options=StreamOptions(buffer_chars=1))
    b = sender.reply(channel="C0SUPPORT", thread_ts="2.2", recipient=CUSTOMER, options=StreamOptions(buffer_chars=1))
    await a.write("one")
    await b.write("two")
    starts = slack.calls("chat.startStream")
    assert starts[1].at - starts[0].at == 1.0
    await a.finish()
    await b.finish()


async def test_model_text_cannot_ping_the_channel(slack: FakeSlackApi, sender: SlackSender) -> None:
    async with sender.reply(channel="D0CUST", thread_ts="1.1", options=StreamOptions(buffer_chars=3)) as reply:
        for piece in ["Hey <", "!chan", "nel> and @", "here"]:
            await reply.write(piece)
    text = slack.messages_in("D0CUST", "1.1")[0].markdown or ""
    assert "<!channel>" not in text and "@here" not in text
    assert text.replace(ZWSP, "") == "Hey <!channel> and @here"


async def test_finish_is_idempotent_and_writing_after_it_is_refused(slack: FakeSlackApi, sender: SlackSender) -> None:
    reply = sender.reply(channel="D0CUST", thread_ts="1.1")
    await reply.write("done")
    first = await reply.finish()
    assert await reply.finish() == first
    with pytest.raises(RuntimeError):
        await reply.write("more")
    assert len(slack.calls("chat.stopStream")) == 1


async def test_cards_too_big_for_the_streamed_message_follow_in_their_own(
    slack: FakeSlackApi, sender: SlackSender
) -> None:
    big = Outbound(
        text="card", blocks=tuple({"type": "section", "text": {"type": "mrkdwn", "text": "c" * 2900}} for _ in range(3))
    )
    async with sender.reply(channel="D0CUST", thread_ts="1.1", options=StreamOptions(buffer_chars=1)) as reply:
        await reply.write("a" * 5000)
        result = await reply.finish(cards=[big])
    streamed, card = slack.messages_in("D0CUST", "1.1")
    assert streamed.blocks == () and streamed.markdown == "a" * 5000
    assert card.blocks == big.blocks and list(result.ts) == [streamed.ts, card.ts]


async def test_a_turn_that_fails_still_finishes_its_reply_and_keeps_its_error(
    slack: FakeSlackApi, sender: SlackSender
) -> None:
    with pytest.raises(LookupError):
        async with sender.reply(channel="D0CUST", thread_ts="1.1") as reply:
            await reply.write("Partial answer")
            raise LookupError("the turn broke")
    (message,) = slack.messages_in("D0CUST", "1.1")
    assert (message.markdown, message.state) == ("Partial answer", "stopped")
