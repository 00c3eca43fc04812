"""Outbound to Teams: send, reply in a thread, update a card for everyone, delete,
and open a 1:1 chat — all out of turn, from a stored conversation reference.

Each call runs through the Agents SDK: ``CloudAdapter.continue_conversation`` (or
``create_conversation``) builds the connector client with a token from the
connection manager — MSAL client credentials in production
(:func:`msal_connections`), any ``AccessTokenProviderBase`` in tests
(:func:`connections_with`) — and the SDK's ``ConversationsOperations`` makes the
REST call. The SDK has no retries; :class:`RetryPolicy` adds them with tenacity:
429 always (honouring ``Retry-After``), 5xx only for idempotent calls (update,
delete), so a message is never posted twice by us.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import aiohttp
from microsoft_agents.activity import (
    Activity,
    Attachment,
    ChannelAccount,
    ConversationAccount,
    ConversationParameters,
    ConversationReference,
)
from microsoft_agents.authentication.msal import MsalConnectionManager
from microsoft_agents.hosting.aiohttp import CloudAdapter
from microsoft_agents.hosting.core import ConnectionManager, TurnContext
from microsoft_agents.hosting.core.authorization import (
    AccessTokenProviderBase,
    AgentAuthConfiguration,
    AuthenticationConstants,
    AuthTypes,
    Connections,
)
from microsoft_agents.hosting.core.connector import ConnectorClientBase
from microsoft_agents.hosting.core.connector.conversations_base import ConversationsBase
from pydantic import ValidationError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential

from bot.teams.auth import ServiceUrlPolicy
from bot.teams.config import TeamsConfig, is_loopback_host

log = logging.getLogger(__name__)

T = TypeVar("T")
ADAPTIVE = "application/vnd.microsoft.card.adaptive"
RETRY_5XX = frozenset({500, 502, 503, 504})


class TeamsDeliveryError(Exception):
    """Teams did not take the activity. ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How hard to try: attempts in all, the longest wait we honour, the per-call timeout."""

    attempts: int = 4
    base_wait_s: float = 0.5
    max_wait_s: float = 30.0
    timeout_s: float = 15.0


@dataclass(frozen=True, kw_only=True)
class Sent:
    """An activity we created, and a reference to its conversation (``activityId`` = the new id)."""

    activity_id: str
    reference: dict[str, Any]


def outbound_configuration(config: TeamsConfig) -> AgentAuthConfiguration:
    """The service connection: client secret, or a PFX certificate."""
    if config.certificate_pfx:
        return AgentAuthConfiguration(
            auth_type=AuthTypes.certificate,
            client_id=config.app_id,
            tenant_id=config.tenant_id,
            cert_pfx_file=config.certificate_pfx,
            connection_name="SERVICE_CONNECTION",
        )
    return AgentAuthConfiguration(
        auth_type=AuthTypes.client_secret,
        client_id=config.app_id,
        tenant_id=config.tenant_id,
        client_secret=config.app_password,
        connection_name="SERVICE_CONNECTION",
    )


def msal_connections(config: TeamsConfig) -> Connections:
    """Production tokens: the SDK's MSAL connection manager (client credentials, cached)."""
    if not config.has_outbound_credentials:
        raise ValueError("SIGNOFF_TEAMS_APP_PASSWORD or SIGNOFF_TEAMS_CERTIFICATE_PFX is required to send")
    return MsalConnectionManager(connections_configurations={"SERVICE_CONNECTION": outbound_configuration(config)})


def connections_with(
    config: TeamsConfig, provider: Callable[[AgentAuthConfiguration], AccessTokenProviderBase]
) -> Connections:
    """Tokens from any provider (tests): the SDK's generic connection manager around it."""
    return ConnectionManager(
        provider_factory=provider, connections_configurations={"SERVICE_CONNECTION": outbound_configuration(config)}
    )


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date; ``None`` if absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        at = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return max(0.0, (at - (now or datetime.now(UTC))).total_seconds())


class DevToken:
    """Outbound tokens for local development against a connector on this machine (the Bot
    Framework Emulator, a fake): one fixed token. A sender using it sends to loopback service
    URLs only, so the token never leaves the machine."""

    def __init__(self, token: str) -> None:
        self._token = token
        self.configuration: AgentAuthConfiguration | None = None

    def __call__(self, configuration: AgentAuthConfiguration) -> DevToken:
        self.configuration = configuration
        return self

    async def get_access_token(self, resource_url: str, scopes: list[str], force_refresh: bool = False) -> str:
        return self._token

    def get_token_credential(self) -> Any:
        raise NotImplementedError("the connector client asks for tokens only")


def dev_token_connections(config: TeamsConfig, token: str) -> Connections:
    """The connection manager around a :class:`DevToken`."""
    return connections_with(config, cast(Callable[[AgentAuthConfiguration], AccessTokenProviderBase], DevToken(token)))


async def _raise(context: TurnContext, error: Exception) -> None:
    # The SDK's default turn-error handler posts "Exception caught: …" into the chat; never that.
    raise error


class TeamsSender:
    """Sends into Teams conversations we hold a reference for; returns the ids it created."""

    def __init__(
        self,
        config: TeamsConfig,
        *,
        connections: Connections,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        loopback_only: bool = False,
    ) -> None:
        self.config = config
        self.loopback_only = loopback_only
        self.retry = retry or RetryPolicy()
        self._policy = ServiceUrlPolicy(config)
        self._sleep = sleep
        self._adapter = CloudAdapter(connection_manager=connections)
        self._adapter.on_turn_error = _raise
        self._backoff = wait_exponential(multiplier=self.retry.base_wait_s, max=self.retry.max_wait_s)

    async def send(
        self, reference: Mapping[str, Any], *, text: str | None = None, card: dict[str, Any] | None = None
    ) -> str:
        """Post a new message into the referenced conversation (channel thread included)."""
        ref = _reference(reference)
        activity = _message(ref, text, card)
        out = await self._run(
            ref, lambda ops: ops.send_to_conversation(ref.conversation.id, activity), idempotent=False
        )
        return _created(out.id)

    async def reply(
        self,
        reference: Mapping[str, Any],
        *,
        reply_to_id: str,
        text: str | None = None,
        card: dict[str, Any] | None = None,
    ) -> str:
        """Reply to ``reply_to_id`` in the referenced conversation."""
        ref = _reference(reference)
        activity = _message(ref, text, card)
        activity.reply_to_id = reply_to_id
        out = await self._run(
            ref, lambda ops: ops.reply_to_activity(ref.conversation.id, reply_to_id, activity), idempotent=False
        )
        return _created(out.id)

    async def update(
        self,
        reference: Mapping[str, Any],
        *,
        activity_id: str,
        text: str | None = None,
        card: dict[str, Any] | None = None,
    ) -> None:
        """Replace activity ``activity_id`` for everyone (``PUT …/activities/{id}``)."""
        ref = _reference(reference)
        activity = _message(ref, text, card)
        activity.id = activity_id
        await self._run(
            ref, lambda ops: ops.update_activity(ref.conversation.id, activity_id, activity), idempotent=True
        )

    async def delete(self, reference: Mapping[str, Any], *, activity_id: str) -> None:
        """Delete activity ``activity_id``."""
        ref = _reference(reference)
        await self._run(ref, lambda ops: ops.delete_activity(ref.conversation.id, activity_id), idempotent=True)

    async def members(self, reference: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The referenced conversation's members as the connector lists them (Teams adds
        ``userRole`` — ``guest`` for a guest — and ``tenantId``)."""
        ref = _reference(reference)
        whole = ref.conversation.id.split(";", 1)[0]  # a channel thread's members are the channel's
        found = await self._run(ref, lambda ops: ops.get_conversation_members(whole), idempotent=True)
        return [m.model_dump(mode="json", by_alias=True, exclude_none=True) for m in found]

    async def open_personal_chat(
        self,
        *,
        service_url: str,
        tenant_id: str,
        user_id: str,
        text: str | None = None,
        card: dict[str, Any] | None = None,
    ) -> Sent:
        """Start (or find) the 1:1 chat with ``user_id`` (``29:…`` or an AAD object id) and post into it."""
        self._check_url(service_url)
        params = ConversationParameters(
            is_group=False,
            bot=ChannelAccount(id=f"28:{self.config.app_id}"),
            members=[ChannelAccount(id=user_id)],
            tenant_id=tenant_id,
            channel_data={"tenant": {"id": tenant_id}},
        )
        box: list[Sent] = []

        async def created(context: TurnContext) -> None:
            ref = context.activity.get_conversation_reference()
            ref.conversation = ConversationAccount(
                id=ref.conversation.id, tenant_id=tenant_id, conversation_type="personal"
            )
            ref.activity_id = None
            activity = _message(ref, text, card)
            out = await self._retrying(
                lambda: _ops(context).send_to_conversation(ref.conversation.id, activity), idempotent=False
            )
            ref.activity_id = _created(out.id)
            box.append(
                Sent(
                    activity_id=ref.activity_id, reference=ref.model_dump(mode="json", by_alias=True, exclude_none=True)
                )
            )

        async def create() -> None:
            await self._adapter.create_conversation(
                self.config.app_id, "msteams", service_url, AuthenticationConstants.AGENTS_SDK_SCOPE, params, created
            )

        await self._delivered(lambda: self._retrying(create, idempotent=False))
        return box[0]

    # -- plumbing --------------------------------------------------------------------
    async def _run(
        self, ref: ConversationReference, op: Callable[[ConversationsBase], Awaitable[T]], *, idempotent: bool
    ) -> T:
        self._check_url(ref.service_url)
        box: list[T] = []

        async def turn(context: TurnContext) -> None:
            box.append(await self._retrying(lambda: op(_ops(context)), idempotent=idempotent))

        continuation = ref.get_continuation_activity()
        await self._delivered(lambda: self._adapter.continue_conversation(self.config.app_id, continuation, turn))
        return box[0]

    async def _retrying(self, call: Callable[[], Awaitable[T]], *, idempotent: bool) -> T:
        def retryable(exc: BaseException) -> bool:
            return isinstance(exc, aiohttp.ClientResponseError) and (
                exc.status == 429 or (idempotent and exc.status in RETRY_5XX)
            )

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.retry.attempts),
            wait=self._wait,
            retry=retry_if_exception(retryable),
            sleep=self._sleep,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                async with asyncio.timeout(self.retry.timeout_s):
                    return await call()
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        headers = getattr(exc, "headers", None) or {}
        told = retry_after_seconds(headers.get("Retry-After"))
        return min(told, self.retry.max_wait_s) if told is not None else float(self._backoff(state))

    async def _delivered(self, call: Callable[[], Awaitable[None]]) -> None:
        """Vendor errors stop here, as :class:`TeamsDeliveryError`."""
        try:
            await call()
        except TeamsDeliveryError:
            raise
        except aiohttp.ClientResponseError as exc:
            log.warning("teams call failed with HTTP %s", exc.status)
            raise TeamsDeliveryError(
                f"Teams answered HTTP {exc.status}", status=exc.status, retryable=exc.status == 429 or exc.status >= 500
            ) from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("teams call failed: %s", type(exc).__name__)
            raise TeamsDeliveryError(f"Teams unreachable ({type(exc).__name__})", retryable=True) from exc
        except ValueError as exc:  # token acquisition and connection lookup report this way
            log.warning("teams call failed before sending: %s", exc)
            raise TeamsDeliveryError("could not get a token for Teams") from exc

    def _check_url(self, service_url: str | None) -> None:
        if not service_url or not self._policy.allows(service_url):
            raise TeamsDeliveryError("the conversation's service URL is not allowed")
        if self.loopback_only and not is_loopback_host(urlsplit(service_url).hostname or ""):
            raise TeamsDeliveryError("a development token is sent to loopback service URLs only")


def _ops(context: TurnContext) -> ConversationsBase:
    client = context.services.get(ConnectorClientBase)  # type: ignore[type-abstract]
    if client is None:
        raise TeamsDeliveryError("the SDK built no connector client")
    return client.conversations


def _reference(raw: Mapping[str, Any]) -> ConversationReference:
    try:
        ref = ConversationReference.model_validate(dict(raw))
    except ValidationError:
        raise TeamsDeliveryError("not a conversation reference") from None
    if not ref.service_url or not ref.conversation or not ref.conversation.id:
        raise TeamsDeliveryError("the conversation reference has no serviceUrl or conversation id")
    return ref


def _message(ref: ConversationReference, text: str | None, card: dict[str, Any] | None) -> Activity:
    if not text and card is None:
        raise ValueError("a message needs text or a card")
    fields: dict[str, Any] = {"type": "message"}
    if text:
        # Plain text: Teams renders no Markdown from it, so nothing in it becomes a link or a mention.
        fields["text"] = text
        fields["text_format"] = "plain"
    if card is not None:
        fields["attachments"] = [Attachment(content_type=ADAPTIVE, content=card)]
    activity = Activity(**fields)
    # No activity id on the reference: it would turn the post into a reply to the inbound message.
    return activity.apply_conversation_reference(ref.model_copy(update={"activity_id": None}))


def _created(activity_id: str | None) -> str:
    if not activity_id:
        raise TeamsDeliveryError("Teams returned no activity id")
    return activity_id
