"""The outbound path to Slack: one ``AsyncWebClient``, paced per channel, errors made ours.

``make_client`` builds the client with the retry handlers Slack needs (429s
honour ``Retry-After``; dropped connections are retried). ``SlackSender``
posts, updates, sends ephemerals, publishes Home tabs and opens modals, and
starts a :class:`~bot.slack.streaming.StreamingReply` for one turn. Messages
(posts, updates, stream starts) go through a per-channel queue at about one a
second; other channels never wait. Every Slack failure surfaces as
:class:`SlackSendError` with Slack's error code — never with the SDK's
exception, and never shown to a person as is.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.pacing import ChannelPacer, Clock, PacerClosed, Sleep
from bot.slack.view_models import Outbound

if TYPE_CHECKING:
    from bot.slack.streaming import Recipient, StreamingReply, StreamOptions

log = logging.getLogger(__name__)
T = TypeVar("T")


class SlackSendError(Exception):
    """A Web API call failed. ``error`` is Slack's code (``channel_not_found``, ``ratelimited``,
    ``message_not_in_streaming_state``…) or ``connection_error`` / ``closed``."""

    def __init__(self, method: str, error: str, *, status: int | None = None, retry_after: float | None = None):
        super().__init__(f"{method}: {error}")
        self.method, self.error, self.status, self.retry_after = method, error, status, retry_after


class RateLimitRetryHandler(AsyncRateLimitErrorRetryHandler):
    """The SDK's 429 handler, sleeping ``Retry-After`` (plus a little jitter) through an
    injectable ``sleep``; a wait longer than ``max_wait_s`` is not retried but raised."""

    def __init__(
        self,
        *,
        max_retry_count: int = 3,
        max_wait_s: float = 120.0,
        jitter_s: float = 0.5,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.max_wait_s, self.jitter_s, self._sleep = max_wait_s, jitter_s, sleep

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        return response is not None and response.status_code == 429 and retry_after(response) <= self.max_wait_s

    async def prepare_for_next_attempt_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        state.next_attempt_requested = True
        wait = retry_after(response) if response is not None else 1.0
        await self._sleep(wait + random.random() * self.jitter_s)
        state.increment_current_attempt()


def retry_after(response: HttpResponse) -> float:
    """Seconds from a 429's ``Retry-After`` (1 when absent or unreadable)."""
    for name, values in response.headers.items():
        if name.lower() == "retry-after" and values:
            try:
                return max(float(values[0]), 0.0)
            except ValueError:
                return 1.0
    return 1.0


def make_client(
    token: str,
    base_url: str | None = None,
    *,
    sleep: Sleep = asyncio.sleep,
    rate_limit_retries: int = 3,
    jitter_s: float = 0.5,
    timeout_s: int = 30,
    session: aiohttp.ClientSession | None = None,
) -> AsyncWebClient:
    """The bot's ``AsyncWebClient``: ``base_url`` for proxies and tests (``SIGNOFF_SLACK_API_URL``),
    429s retried after ``Retry-After``, connection resets retried twice."""
    handlers: list[AsyncRetryHandler] = [
        AsyncConnectionErrorRetryHandler(max_retry_count=2),
        RateLimitRetryHandler(max_retry_count=rate_limit_retries, jitter_s=jitter_s, sleep=sleep),
    ]
    kwargs: dict[str, Any] = {"base_url": base_url} if base_url else {}
    return AsyncWebClient(token=token, timeout=timeout_s, retry_handlers=handlers, session=session, **kwargs)


@dataclass(frozen=True, kw_only=True)
class SenderConfig:
    """Pacing and time: ``min_interval_s`` between messages in one channel; clock and sleep
    are injectable for tests."""

    min_interval_s: float = 1.0
    clock: Clock = time.monotonic
    sleep: Sleep = asyncio.sleep


class SlackSender:
    """Everything the Slack face sends, through one client. Use ``async with`` (or ``aclose``)."""

    def __init__(self, client: AsyncWebClient, config: SenderConfig | None = None) -> None:
        self.client = client
        self.config = config or SenderConfig()
        self._pacer = ChannelPacer(
            interval_s=self.config.min_interval_s, clock=self.config.clock, sleep=self.config.sleep
        )

    async def __aenter__(self) -> SlackSender:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Send what is queued (a few seconds at most), then refuse more."""
        await self._pacer.aclose()

    # -- messages ---------------------------------------------------------------------------
    async def post(
        self, channel: str, text: str, blocks: Sequence[dict[str, Any]] | None = None, thread_ts: str | None = None
    ) -> str:
        """``chat.postMessage``; returns the new message's ts."""
        response = await self.paced(
            channel,
            "chat.postMessage",
            lambda: self.client.chat_postMessage(
                channel=channel, text=text, blocks=list(blocks) if blocks else None, thread_ts=thread_ts
            ),
        )
        return str(response["ts"])

    async def post_all(self, channel: str, messages: Sequence[Outbound], thread_ts: str | None = None) -> list[str]:
        """Several messages in order (e.g. a split answer or a trace); their ts."""
        return [await self.post(channel, m.text, m.block_list, thread_ts) for m in messages]

    async def update(self, channel: str, ts: str, text: str, blocks: Sequence[dict[str, Any]] | None = None) -> str:
        """``chat.update`` of our own message at ``ts`` (a card redrawn from the record). Not in the
        channel's lane: the one-a-second pace is ``chat.postMessage``'s; ``chat.update`` is Tier 3
        (50+ a minute per workspace, a 429 waits its ``Retry-After``), and a decided card must not
        wait behind a queue of new ones."""
        response = await self.call(
            "chat.update",
            lambda: self.client.chat_update(
                channel=channel, ts=ts, text=text, blocks=list(blocks) if blocks is not None else None
            ),
        )
        return str(response.get("ts") or ts)

    async def ephemeral(
        self,
        channel: str,
        user: str,
        text: str,
        blocks: Sequence[dict[str, Any]] | None = None,
        thread_ts: str | None = None,
    ) -> str:
        """``chat.postEphemeral``: seen only by ``user`` (refusals, prompts). Returns its message_ts."""
        response = await self.paced(
            channel,
            "chat.postEphemeral",
            lambda: self.client.chat_postEphemeral(
                channel=channel, user=user, text=text, blocks=list(blocks) if blocks else None, thread_ts=thread_ts
            ),
        )
        return str(response.get("message_ts", ""))

    async def delete(self, channel: str, ts: str) -> None:
        """``chat.delete`` of our own message."""
        await self.call("chat.delete", lambda: self.client.chat_delete(channel=channel, ts=ts))

    # -- views ------------------------------------------------------------------------------
    async def publish_home(self, user: str, view: dict[str, Any]) -> None:
        """``views.publish``: the user's App Home tab."""
        await self.call("views.publish", lambda: self.client.views_publish(user_id=user, view=view))

    async def open_view(self, trigger_id: str, view: dict[str, Any]) -> str:
        """``views.open`` with a click's ``trigger_id`` (valid ~3 s); returns the view id."""
        response = await self.call("views.open", lambda: self.client.views_open(trigger_id=trigger_id, view=view))
        opened = response.get("view") or {}
        return str(opened.get("id", ""))

    # -- assistant threads ------------------------------------------------------------------------
    async def set_status(
        self, channel: str, thread_ts: str, status: str, loading_messages: Sequence[str] | None = None
    ) -> None:
        """``assistant.threads.setStatus`` (``status=""`` clears it)."""
        await self.call(
            "assistant.threads.setStatus",
            lambda: self.client.assistant_threads_setStatus(
                channel_id=channel,
                thread_ts=thread_ts,
                status=status,
                loading_messages=list(loading_messages) if loading_messages else None,
            ),
        )

    def reply(
        self, *, channel: str, thread_ts: str, recipient: Recipient | None = None, options: StreamOptions | None = None
    ) -> StreamingReply:
        """A :class:`~bot.slack.streaming.StreamingReply` for one turn in ``thread_ts``
        (``recipient`` required outside DMs: the acting user and their own team)."""
        from bot.slack.streaming import StreamingReply

        return StreamingReply(self, channel=channel, thread_ts=thread_ts, recipient=recipient, options=options)

    # -- plumbing ---------------------------------------------------------------------------
    async def paced(self, channel: str, method: str, send: Callable[[], Awaitable[T]]) -> T:
        """Run one message-creating call in ``channel``'s lane (≈1 a second per channel)."""
        try:
            return await self._pacer.run(channel, lambda: self.call(method, send))
        except PacerClosed:
            raise SlackSendError(method, "closed") from None

    async def call(self, method: str, send: Callable[[], Awaitable[T]]) -> T:
        """Run one call now, turning the SDK's exceptions into :class:`SlackSendError`."""
        try:
            return await send()
        except SlackApiError as exc:
            raise _send_error(method, exc) from None
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.warning("slack %s failed: %s", method, type(exc).__name__)
            raise SlackSendError(method, "connection_error") from None
        except SlackClientError as exc:  # e.g. appending to a stream the SDK already closed
            log.warning("slack %s refused by the SDK: %s", method, type(exc).__name__)
            raise SlackSendError(method, "client_error") from None


def _send_error(method: str, exc: SlackApiError) -> SlackSendError:
    response = exc.response
    error = response.get("error") if isinstance(response.data, dict) else None
    wait = response.headers.get("Retry-After") or response.headers.get("retry-after")
    try:
        after = float(wait[0] if isinstance(wait, list) else wait) if wait else None
    except ValueError:
        after = None
    return SlackSendError(
        method, str(error or f"http_{response.status_code}"), status=response.status_code, retry_after=after
    )
