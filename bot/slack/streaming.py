"""One turn's reply, streamed into a thread: status while working, steps, text, cards last.

Built on the SDK's ``AsyncChatStream`` (``client.chat_stream``, slack_sdk ≥ 3.40
for task chunks) with our own buffering, so we always know which text Slack has
acknowledged in which message. That is what lets a reply survive Slack's
limits without losing or repeating a word:

* it rolls over into a new message before a stream ages past ``max_age_s``
  (streams die server-side after ~5 minutes) or grows past ``max_chars``;
* when Slack says ``message_not_in_streaming_state`` anyway, the broken message
  is finalised with ``chat.update`` to exactly the text it had received, and the
  reply carries on in a new message;
* when streaming is unavailable (``unknown_method``, ``not_allowed``,
  ``feature_not_enabled``… or switched off) it falls back to ``chat.postMessage``,
  the answer split to fit.

Outside DMs Slack requires the recipient's user and team: pass the actor's own
team (for an external Slack Connect user, *their* team, not the installer's).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from slack_sdk.models.messages.chunk import Chunk, PlanUpdateChunk, TaskUpdateChunk
from slack_sdk.web.async_chat_stream import AsyncChatStream

from bot.slack import answers, blocks, wording
from bot.slack.mrkdwn import clip_plain, defang, one_line, safe_prefix, take
from bot.slack.sender import SlackSender, SlackSendError
from bot.slack.view_models import Outbound, Step

log = logging.getLogger(__name__)

#: startStream errors that mean "no streaming here": fall back to chat.postMessage.
STREAMING_UNAVAILABLE = frozenset(
    {
        "unknown_method",
        "not_allowed",
        "feature_not_enabled",
        "method_deprecated",
        "not_allowed_token_type",
        "method_not_supported_for_channel_type",
    }
)
EXPIRED = "message_not_in_streaming_state"
#: Below this much room left in a message, start the next one instead of a sliver.
MIN_ROOM = 200


@dataclass(frozen=True, kw_only=True)
class Recipient:
    """Who a channel stream is for: the acting user and *their* team id."""

    user_id: str
    team_id: str


@dataclass(frozen=True, kw_only=True)
class StreamOptions:
    """How a reply streams. ``enabled=False`` posts plain messages instead."""

    enabled: bool = True
    max_age_s: float = 270.0
    max_chars: int = 10_000
    buffer_chars: int = 256
    task_display_mode: Literal["timeline", "plan"] = "timeline"
    plan_title: str | None = None
    status: str = wording.STATUS_WORKING
    loading_messages: tuple[str, ...] = wording.LOADING_MESSAGES
    #: Whether the channel is a DM; None: decided from the id (``D…``).
    is_dm: bool | None = None

    def __post_init__(self) -> None:
        # A broken stream is redrawn as one markdown block, which must fit the text budget.
        if not MIN_ROOM * 2 <= self.max_chars <= blocks.TEXT_BUDGET:
            raise ValueError(f"max_chars must be between {MIN_ROOM * 2} and {blocks.TEXT_BUDGET}")


@dataclass(frozen=True, kw_only=True)
class ReplyResult:
    """What a reply posted: every message ts in order, and whether it streamed."""

    ts: tuple[str, ...]
    streamed: bool


@dataclass
class _Segment:
    """One streamed message: the SDK stream and what Slack has acknowledged in it."""

    stream: AsyncChatStream
    started_at: float | None = None
    delivered: list[str] = field(default_factory=list)
    chars: int = 0
    steps: dict[str, Step] = field(default_factory=dict)


class StreamingReply:
    """The reply to one user message, in its thread. Use ``async with`` or call :meth:`finish`."""

    def __init__(
        self,
        sender: SlackSender,
        *,
        channel: str,
        thread_ts: str,
        recipient: Recipient | None = None,
        options: StreamOptions | None = None,
    ) -> None:
        self._sender, self.channel, self.thread_ts = sender, channel, thread_ts
        self._opts = options or StreamOptions()
        self._dm = self._opts.is_dm if self._opts.is_dm is not None else channel.startswith("D")
        if self._opts.enabled and not self._dm and recipient is None:
            raise ValueError("a stream outside a DM needs the recipient's user and team")
        self._recipient = None if self._dm else recipient
        self._streaming = self._opts.enabled
        self._seg: _Segment | None = None
        self._buffer = ""
        self._unsent: list[str] = []
        self._steps: dict[str, Step] = {}
        self._ts: list[str] = []
        self._status_on = False
        self._result: ReplyResult | None = None

    @property
    def ts(self) -> tuple[str, ...]:
        """The messages posted so far (callers record them to redraw cards later)."""
        return tuple(self._ts)

    async def __aenter__(self) -> StreamingReply:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if self._result is not None:
            return
        if exc_type is None:
            await self.finish()
            return
        try:  # the turn failed: keep what was said, without hiding the turn's own error
            await self.finish()
        except SlackSendError as exc:
            log.warning("slack reply not finished after an error: %s", exc.error)

    # -- what a turn does -------------------------------------------------------------------
    async def set_status(self, status: str | None = None, loading_messages: Sequence[str] | None = None) -> None:
        """Show "…is working on it" with rotating loading messages; best effort, cleared at the end."""
        try:
            await self._sender.set_status(
                self.channel,
                self.thread_ts,
                status or self._opts.status,
                loading_messages or self._opts.loading_messages,
            )
            self._status_on = True
        except SlackSendError as exc:
            log.info("slack status not shown: %s", exc.error)

    async def write(self, markdown: str) -> None:
        """Append Markdown (the model's answer, as it arrives)."""
        self._check_open()
        self._buffer += markdown
        if len(self._buffer) >= self._opts.buffer_chars:
            await self._flush(final=False)

    async def step(self, step: Step) -> None:
        """Show (or update, same ``id``) a step: a tool call and its gate decision."""
        self._check_open()
        self._steps[step.id] = step
        await self._flush(final=True)
        if not self._streaming:
            return
        chunk = TaskUpdateChunk(
            id=step.id,
            title=clip_plain(defang(one_line(step.title)), 200),
            status=step.status,
            details=clip_plain(defang(step.details), 500) if step.details else None,
            output=clip_plain(defang(step.output), 500) if step.output else None,
        )
        while self._streaming:
            seg = await self._segment()
            if await self._append(seg, chunks=[chunk]):
                seg.steps[step.id] = step
                return

    async def finish(
        self, *, cards: Sequence[Outbound] = (), extra_blocks: Sequence[dict[str, Any]] = ()
    ) -> ReplyResult:
        """Send what is left, put ``cards`` (and ``extra_blocks``, e.g. feedback) at the end,
        clear the status, and say what was posted. Calling it again returns the same result."""
        if self._result is not None:
            return self._result
        await self._flush(final=True)
        tail = tuple(b for c in cards for b in c.blocks) + tuple(extra_blocks)
        placed = await self._stop(tail) if self._streaming else False
        if not self._streaming:
            steps = [answers.steps_block(list(self._steps.values()))] if self._steps else []
            messages = answers.answer_messages("".join(self._unsent), cards=cards, extra_blocks=[*steps, *extra_blocks])
            self._ts += await self._sender.post_all(self.channel, messages, self.thread_ts)
        elif tail and not placed:
            messages = answers.answer_messages("", cards=cards, extra_blocks=extra_blocks)
            self._ts += await self._sender.post_all(self.channel, messages, self.thread_ts)
        if self._status_on:
            await self._clear_status()
        self._result = ReplyResult(ts=tuple(self._ts), streamed=self._streaming)
        return self._result

    # -- internals ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._result is not None:
            raise RuntimeError("this reply is finished")

    async def _clear_status(self) -> None:
        try:
            await self._sender.set_status(self.channel, self.thread_ts, "")
        except SlackSendError as exc:
            log.info("slack status not cleared: %s", exc.error)

    async def _flush(self, *, final: bool) -> None:
        send, self._buffer = (self._buffer, "") if final else safe_prefix(self._buffer)
        text = defang(send)  # idempotent, so text held back below is safe to defang again
        while text and self._streaming:
            seg = await self._segment()
            room = self._opts.max_chars - seg.chars
            if room < MIN_ROOM and seg.chars:
                await self._roll()
                continue
            lookahead = min(2000, self._opts.max_chars // 4)
            if seg.chars + len(text) > self._opts.max_chars - lookahead:
                # Near the end of this message: end it at a paragraph break, waiting for one if need be.
                cut = text.rfind("\n\n", 0, room) + 2
                if cut >= 2 and seg.chars + cut >= self._opts.max_chars - lookahead:
                    if await self._append(seg, markdown=text[:cut]):
                        text = text[cut:]
                        await self._roll()
                    continue
                if not final and len(text) <= room:
                    self._buffer = text + self._buffer
                    return
            head, rest = take(text, max(room, MIN_ROOM))
            if await self._append(seg, markdown=head):
                text = rest
        if text:
            self._unsent.append(text)

    async def _segment(self) -> _Segment:
        """The message being streamed, rolling over first when it is too old."""
        seg = self._seg
        if (
            seg is not None
            and seg.started_at is not None
            and (self._sender.config.clock() - seg.started_at >= self._opts.max_age_s)
        ):
            await self._roll()
            seg = None
        if seg is None:
            recipient = self._recipient
            stream = await self._sender.client.chat_stream(
                channel=self.channel,
                thread_ts=self.thread_ts,
                buffer_size=1,
                recipient_user_id=recipient.user_id if recipient else None,
                recipient_team_id=recipient.team_id if recipient else None,
                task_display_mode=self._opts.task_display_mode,
            )
            seg = self._seg = _Segment(stream=stream)
        return seg

    async def _append(self, seg: _Segment, *, markdown: str | None = None, chunks: list[Chunk] | None = None) -> bool:
        """Send to ``seg``; False when the segment broke (recovered) or streaming fell back."""
        starting = seg.stream.ts is None
        if starting and self._opts.plan_title and self._opts.task_display_mode == "plan":
            chunks = [PlanUpdateChunk(title=clip_plain(self._opts.plan_title, 200)), *(chunks or [])]
        try:
            if starting:
                await self._sender.paced(
                    self.channel, "chat.startStream", lambda: seg.stream.append(markdown_text=markdown, chunks=chunks)
                )
                seg.started_at = self._sender.config.clock()
                self._ts.append(str(seg.stream.ts))
            else:
                await self._sender.call(
                    "chat.appendStream", lambda: seg.stream.append(markdown_text=markdown, chunks=chunks)
                )
        except SlackSendError as exc:
            return await self._failed(seg, exc, starting)
        if markdown:
            seg.delivered.append(markdown)
            seg.chars += len(markdown)
        return True

    async def _failed(self, seg: _Segment, exc: SlackSendError, starting: bool) -> bool:
        if starting and exc.error in STREAMING_UNAVAILABLE:
            log.warning("slack streaming unavailable (%s); posting instead", exc.error)
            self._streaming, self._seg = False, None
            return False
        if exc.error == EXPIRED and not starting:
            await self._recover(seg)
            return False
        raise exc

    async def _roll(self) -> None:
        """Finish the current message (no cards) so the next text starts a new one."""
        seg, self._seg = self._seg, None
        if seg is None or seg.stream.ts is None:
            return
        try:
            await self._sender.call("chat.stopStream", lambda: seg.stream.stop())
        except SlackSendError as exc:
            if exc.error != EXPIRED:
                raise
            await self._recover(seg)

    async def _recover(self, seg: _Segment, tail: tuple[dict[str, Any], ...] = ()) -> None:
        """A stream Slack gave up on: make the message show exactly what it had received."""
        if self._seg is seg:
            self._seg = None
        message = answers.recovered_message("".join(seg.delivered), list(seg.steps.values()), tail)
        await self._sender.update(self.channel, str(seg.stream.ts), message.text, message.block_list)

    async def _stop(self, tail: tuple[dict[str, Any], ...]) -> bool:
        """Stop the last stream with ``tail`` under it when it fits; True when ``tail`` was placed."""
        if self._seg is None and not tail:
            return False
        seg = await self._segment()
        starting = seg.stream.ts is None
        fits = answers.fits_under_stream(seg.chars, tail)
        if starting and not (tail and fits):
            return False  # nothing streamed here, and nothing (that fits) to stream
        self._seg = None
        try:
            if starting:
                await self._sender.paced(self.channel, "chat.startStream", lambda: seg.stream.stop(blocks=list(tail)))
            else:
                await self._sender.call("chat.stopStream", lambda: seg.stream.stop(blocks=list(tail) if fits else None))
        except SlackSendError as exc:
            if starting and exc.error in STREAMING_UNAVAILABLE:
                self._streaming = False
                return False
            if exc.error != EXPIRED:
                raise
            await self._recover(seg, tail if fits else ())
        finally:
            if starting and seg.stream.ts is not None:
                self._ts.append(str(seg.stream.ts))
        return fits
