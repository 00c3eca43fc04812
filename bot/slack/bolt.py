"""The Bolt ``AsyncApp``: authenticate, deduplicate and persist what Slack sends, then answer.

Every listener runs before the response (``process_before_response``), and all it does
is write the message (or click) with its delivery keys and its job in one transaction
(:meth:`storage.inbox.Inbox.accept`); the worker acts on it. So Slack's 200 means
"it is in our database", a retry or a second delivery (``app_mention`` and ``message``
for one mention) writes nothing, and a crash after the 200 loses nothing. Bolt checks
the signature first (missing, bad or older than five minutes: 401, nothing happens). A
database outage or a full inbound queue (nothing stored) is never acked: 503 over HTTP
(``Retry-After`` for the queue), no ack over Socket Mode, so Slack redelivers it.

The one thing done inside the request is opening the reject modal: Slack's
``trigger_id`` is valid for three seconds only, and opening a modal changes nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_sdk.web.async_client import AsyncWebClient

from agent.boundary import unavailable
from bot.slack import handoff as handoffs
from bot.slack import ids, present
from bot.slack.face import SlackFace, thread_ref
from bot.slack.sender import SlackSendError
from bot.web import InboxFull

log = logging.getLogger(__name__)

FACE = "slack"
#: The bot scopes the OAuth install asks for (the same as manifest.yml's).
BOT_SCOPES = (
    "app_mentions:read",
    "assistant:write",
    "channels:history",
    "channels:read",
    "chat:write",
    "commands",
    "groups:history",
    "groups:read",
    "im:history",
    "im:write",
    "reactions:write",
    "usergroups:read",
    "users:read",
)
#: Message subtypes that are a person writing (everything else — edits, joins, bots — is not).
_PERSON_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
#: Bounded: an unclosed ``<@U1|…`` repeated over 40,000 characters must not rescan the rest each time.
_MENTION = re.compile(r"<@([A-Z0-9]{1,32})(?:\|[^>]{0,100})?>")
#: ``X-Slack-Retry-Num`` of Slack's last redelivery of an event (it retries three times).
LAST_RETRY = "3"
#: The longest message we keep (Slack's own limit is 40,000 characters).
MAX_TEXT = 40_000


def mentions(text: str) -> list[str]:
    """The user ids ``<@U…>`` mentions in ``text`` name (linear in its length)."""
    return _MENTION.findall(text)


def without_mention(text: str, bot: str | None) -> str:
    """``text`` without the mentions of ``bot`` (other mentions stay)."""
    return _MENTION.sub(lambda m: "" if m.group(1) == bot else m.group(0), text).strip()


def build_bolt(face: SlackFace) -> AsyncApp:
    """The Bolt app over ``face``; its listeners only accept (see the module doc)."""
    cfg = face.config
    oauth = None
    if cfg.client_id and face.installations is not None:
        from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings

        oauth = AsyncOAuthSettings(
            client_id=cfg.client_id,
            client_secret=cfg.client_secret,
            scopes=list(BOT_SCOPES),
            installation_store=face.installations,
            state_store=face.oauth_states,
        )
    app = AsyncApp(
        # A client without a token: who we are comes from `authorize` below (or the OAuth
        # installations), never from a Slack call inside the request — accepting a delivery
        # must not depend on Slack's Web API being reachable.
        client=AsyncWebClient(base_url=cfg.base_url or AsyncWebClient.BASE_URL),
        signing_secret=cfg.signing_secret,
        process_before_response=True,
        # Always on: an HTTP request without Slack's signature is 401 (Socket Mode envelopes
        # skip it, Slack authenticated the WebSocket); `routes` refuses to mount without a secret.
        request_verification_enabled=True,
        oauth_settings=oauth,
        authorize=None if oauth is not None else LocalAuthorize(face),  # type: ignore[arg-type]  # an AsyncAuthorize is accepted
        # The legacy assistant side panel and the agent Messages tab are handled by our own listeners.
        attaching_conversation_kwargs_enabled=False,
    )
    accept = Acceptor(face)
    app.event("app_mention")(accept.mention)
    app.event("message")(accept.message)
    app.event("app_home_opened")(accept.home)
    app.event("assistant_thread_started")(accept.thread_started)
    for action in (ids.CONFIRM, ids.DECLINE, ids.APPROVE, ids.FEEDBACK, *sorted(handoffs.CLICKS)):
        app.action(action)(accept.click)
    app.action(ids.REJECT)(accept.reject_button)
    app.view(ids.REJECT_MODAL)(accept.reject_submitted)
    app.command("/signoff")(accept.command)
    return app


class LocalAuthorize(AsyncAuthorize):
    """The single workspace's bot token, from the settings: no ``auth.test`` in the request."""

    def __init__(self, face: SlackFace) -> None:
        self.face = face

    async def __call__(
        self,
        *,
        context: AsyncBoltContext,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None,
        actor_enterprise_id: str | None = None,
        actor_team_id: str | None = None,
        actor_user_id: str | None = None,
    ) -> AuthorizeResult | None:
        token = self.face.config.bot_token
        allowed = self.face.config.allowed_teams
        if not token or (allowed is not None and (team_id or "") not in allowed):
            return None  # not ours to serve: Bolt answers without running a listener
        return AuthorizeResult(
            enterprise_id=enterprise_id, team_id=team_id, bot_token=token, bot_user_id=self.face.bot_user_id
        )


def events_route(app: AsyncApp) -> web.RouteDef:
    """``POST /slack/events`` on our aiohttp server: events, commands and interactivity."""

    async def handle(request: web.Request) -> web.Response:
        outages: list[BaseException] = []
        token = _OUTAGES.set(outages)
        try:
            response = await app.async_dispatch(await to_bolt_request(request))
        finally:
            _OUTAGES.reset(token)
        if outages:
            if isinstance(outages[0], InboxFull) and request.headers.get("X-Slack-Retry-Num") == LAST_RETRY:
                log.error("inbound queue still full on Slack's last retry: this Slack delivery is lost")
            # Nothing was accepted: the web middleware answers 503 (a full queue with Retry-After), Slack retries.
            raise outages[0]
        return await to_aiohttp_response(response)

    return web.post("/slack/events", handle)


#: A database outage a listener met, or a full inbound queue (Bolt answers a listener's error
#: with 500 itself; the route raises it instead, so the one 503 mapping of ``bot.web`` answers it).
_OUTAGES: ContextVar[list[BaseException] | None] = ContextVar("signoff_slack_outages", default=None)


class UnsignedSlack(ValueError):
    """A Slack HTTP route was asked for without ``SLACK_SIGNING_SECRET``."""


def routes(app: AsyncApp, signing_secret: str | None, *, events: bool = True) -> list[web.RouteDef]:
    """``/slack/events`` (unless ``events`` is off: Socket Mode brings the events), and with the
    OAuth install flow ``GET /slack/install`` and ``GET /slack/oauth_redirect`` (Bolt's flow:
    one-time state, installation stored in our database).

    Never without a signing secret: Slack's HTTP requests are only ever believed signed."""
    if not signing_secret:
        raise UnsignedSlack("SLACK_SIGNING_SECRET: required for any Slack HTTP route (Socket Mode mounts none)")
    out = [events_route(app)] if events else []
    flow = app.oauth_flow
    if flow is not None:

        async def install(request: web.Request) -> web.Response:
            return await to_aiohttp_response(await flow.handle_installation(await to_bolt_request(request)))

        async def callback(request: web.Request) -> web.Response:
            return await to_aiohttp_response(await flow.handle_callback(await to_bolt_request(request)))

        out += [web.get(flow.install_path, install), web.get(flow.redirect_uri_path, callback)]
    return out


Listener = Callable[..., Awaitable[None]]


class Acceptor:
    """Bolt listeners that turn what Slack sends into :class:`~storage.inbox.Inbound` rows."""

    def __init__(self, face: SlackFace) -> None:
        self.face = face

    async def _accept(self, keys: list[str], payload: dict[str, Any]) -> bool:
        try:
            accepted = await self.face.port.accept(FACE, keys, payload)
        except Exception as exc:
            trap = _OUTAGES.get()
            if trap is not None and unavailable(exc):
                trap.append(exc)
            raise
        if accepted.full:
            # Nothing was stored: never ack it. Over HTTP the route answers 503 with Retry-After;
            # over Socket Mode Bolt's 500 sends no ack. Either way Slack redelivers (three retries,
            # minutes apart); the refusal is logged and counted (Host.accept_inbound).
            full = InboxFull(self.face.port.retry_after_s)
            trap = _OUTAGES.get()
            if trap is not None:
                trap.append(full)
            raise full
        if not accepted.fresh:
            log.info("slack delivery already accepted (%s)", keys[0])
        return accepted.fresh

    # -- messages --------------------------------------------------------------------------
    async def mention(self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        await self._message(body, event, context, mentioned=True)

    async def message(self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        await self._message(body, event, context, mentioned=None)

    async def _message(
        self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext, *, mentioned: bool | None
    ) -> None:
        if event.get("bot_id") or event.get("subtype") not in _PERSON_SUBTYPES:
            return  # bots (ourselves included), edits, joins: nothing a person asked
        user, channel, ts = event.get("user"), event.get("channel"), event.get("ts")
        if not (isinstance(user, str) and isinstance(channel, str) and isinstance(ts, str)):
            return
        team = str(context.team_id or body.get("team_id") or "")
        actor_team = str(event.get("user_team") or context.actor_team_id or event.get("team") or team)
        text = str(event.get("text") or "")[:MAX_TEXT]
        is_dm = event.get("channel_type") == "im" or channel.startswith("D")
        # Our bot user: known from auth.test once the worker asked, else from Slack's own envelope.
        auths = body.get("authorizations") or [{}]
        bot = context.bot_user_id or (auths[0].get("user_id") if isinstance(auths[0], dict) else None)
        bot = bot or self.face.bot_user_id
        if mentioned and not bot and (lead := _MENTION.match(text.lstrip())):
            bot = lead.group(1)  # an app_mention names us first
        if mentioned is None:
            mentioned = bool(bot) and bot in mentions(text)
        thread_ts = str(event.get("thread_ts") or ts)
        if not is_dm and not mentioned:
            # A channel message that does not mention us counts only inside an assist thread
            # or a hand-off's staff thread (a person's reply to the customer).
            if not event.get("thread_ts") or (
                await self.face.port.binding(thread_ref(team, channel, thread_ts)) is None
                and not await handoffs.is_thread(self.face, team, channel, thread_ts)
            ):
                return
        keys = [f"slack:msg:{team}:{channel}:{ts}"]
        if body.get("event_id"):
            keys.insert(0, f"slack:event:{body['event_id']}")
        await self._accept(
            keys,
            {
                "kind": "message",
                "team": team,
                "actor_team": actor_team,
                "user": user,
                "channel": channel,
                "ts": ts,
                "thread_ts": thread_ts,
                "text": without_mention(text, bot),
                "dm": is_dm,
                "ext_shared": bool(body.get("is_ext_shared_channel")),
            },
        )

    async def home(self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        user = event.get("user")
        if not isinstance(user, str) or not body.get("event_id"):
            return
        payload = {
            "kind": "home",
            "tab": str(event.get("tab") or "home"),
            "team": str(context.team_id or ""),
            "actor_team": str(context.actor_team_id or context.team_id or ""),
            "user": user,
            "channel": str(event.get("channel") or ""),
        }
        await self._accept([f"slack:event:{body['event_id']}"], payload)

    async def thread_started(self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        thread = event.get("assistant_thread") or {}
        if not body.get("event_id") or not isinstance(thread, dict):
            return
        payload = {
            "kind": "welcome",
            "team": str(context.team_id or ""),
            "user": str(thread.get("user_id") or ""),
            "channel": str(thread.get("channel_id") or ""),
            "thread_ts": str(thread.get("thread_ts") or ""),
        }
        await self._accept([f"slack:event:{body['event_id']}"], payload)

    # -- interactivity -----------------------------------------------------------------------
    async def click(self, ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        action = (body.get("actions") or [{}])[0]
        user = body.get("user") or {}
        container = body.get("container") or {}
        message = body.get("message") or {}
        channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
        action_ts = action.get("action_ts")
        if not isinstance(user.get("id"), str) or not isinstance(action_ts, str):
            return
        team = str(context.team_id or (body.get("team") or {}).get("id") or "")
        payload = {
            "kind": "click",
            "action_id": str(action.get("action_id")),
            "value": action.get("value"),
            "team": team,
            "actor_team": str(user.get("team_id") or context.actor_team_id or team),
            "user": user["id"],
            "channel": str(channel or ""),
            "message_ts": str(container.get("message_ts") or message.get("ts") or ""),
            "action_ts": action_ts,
            "thread_ts": str(message.get("thread_ts") or container.get("thread_ts") or ""),
            "ext_shared": bool(body.get("is_ext_shared_channel")),
        }
        await self._accept([f"slack:click:{team}:{user['id']}:{payload['action_id']}:{action_ts}"], payload)

    async def reject_button(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        action = (body.get("actions") or [{}])[0]
        try:
            approval_id, _version = ids.decode_value(action.get("value"))
        except ids.BadValue:
            return
        approval = await self.face.port.approval(approval_id)
        if approval is None or approval.status != "pending" or not body.get("trigger_id"):
            return
        container = body.get("container") or {}
        channel, ts = container.get("channel_id"), container.get("message_ts")
        ok = isinstance(channel, str) and isinstance(ts, str) and ids._SLACK_ID.match(channel) and ids._TS.match(ts)
        view = present.reject_modal(self.face, approval, channel=channel if ok else None, ts=ts if ok else None)
        try:
            await self.face.sender.open_view(str(body["trigger_id"]), view)
        except SlackSendError as exc:
            log.warning("reject modal not opened: %s", exc.error)

    async def reject_submitted(self, ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        view = body.get("view") or {}
        values = (view.get("state") or {}).get("values") or {}
        comment = str(
            ((values.get(ids.REJECT_COMMENT_BLOCK) or {}).get(ids.REJECT_COMMENT_INPUT) or {}).get("value") or ""
        )
        if not comment.strip():
            await ack(response_action="errors", errors={ids.REJECT_COMMENT_BLOCK: "Please say why."})
            return
        await ack()
        user = body.get("user") or {}
        if not isinstance(user.get("id"), str) or not view.get("id"):
            return
        team = str(context.team_id or (body.get("team") or {}).get("id") or "")
        payload = {
            "kind": "reject",
            "metadata": view.get("private_metadata"),
            "comment": comment[:2000],
            "team": team,
            "actor_team": str(user.get("team_id") or context.actor_team_id or team),
            "user": user["id"],
        }
        await self._accept([f"slack:view:{view['id']}:{view.get('hash') or ''}"], payload)

    async def command(self, ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        if not body.get("trigger_id") or not isinstance(body.get("user_id"), str):
            return
        team = str(context.team_id or body.get("team_id") or "")
        payload = {
            "kind": "command",
            "text": str(body.get("text") or "")[:500],
            "team": team,
            "actor_team": str(context.actor_team_id or team),
            "user": body["user_id"],
            "channel": str(body.get("channel_id") or ""),
        }
        await self._accept([f"slack:command:{body['trigger_id']}"], payload)


def socket_handler(app: AsyncApp, app_token: str) -> Any:
    """Socket Mode (``signoff socket``): the same app over a WebSocket Slack opens to us."""
    from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

    return AsyncSocketModeHandler(app, app_token)
