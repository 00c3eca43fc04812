"""The Slack face in the registry (``bot.app.FACES``). Its HTTP routes are the Bolt app's
(``/slack/events``, the OAuth install flow), served through this line like every face's: they
need the signing secret; Socket Mode brings the events over its WebSocket and needs none."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from agent.handoff_relay import Relay
from bot.faces import Face, FaceKit, Plain
from storage.inbox import Inbound

if TYPE_CHECKING:
    from bot.slack.face import SlackFace

log = logging.getLogger(__name__)


def face(kit: FaceKit) -> Face | None:
    """``None`` without ``SLACK_BOT_TOKEN`` or the OAuth client (the SDK is not even imported)."""
    cfg = kit.settings.slack_config()
    if cfg is None:
        return None
    from bot.slack import turns
    from bot.slack.face import SlackFace
    from bot.slack.notifier import SlackNotifier

    slack = SlackFace.build(cfg, kit.port, kit.backend, kit.mailer, engine=kit.engine)

    async def handle(item: Inbound) -> None:
        await turns.handle(slack, item)

    return Plain(
        name="slack",
        handler=handle,
        notifier=SlackNotifier(slack),
        staff=True,
        served=http_routes(slack),
        on_start=slack.start,
        on_close=slack.close,
        inner=slack,
        relays=lambda relay: relays(slack, relay),
    )


def http_routes(slack: SlackFace) -> list[web.RouteDef]:
    """The Bolt app's routes: ``/slack/events`` unless Socket Mode (``SLACK_APP_TOKEN``) brings
    the events, and the OAuth install flow (``SLACK_CLIENT_ID``); none without a signing secret."""
    cfg = slack.config
    if not cfg.signing_secret or (cfg.app_token and not cfg.client_id):
        log.info("Slack over Socket Mode or without SLACK_SIGNING_SECRET: no /slack/events route")
        return []
    from bot.slack.bolt import build_bolt, routes

    return routes(build_bolt(slack), cfg.signing_secret, events=not cfg.app_token)


def relays(slack: SlackFace, relay: Relay) -> None:
    """Hand-offs: Slack customers get a person's replies in their thread; the escalation thread
    gets the customer's messages and the SLA re-page."""
    from bot.slack import handoff

    relay.deliver_on("slack", handoff.customer_delivery(slack))
    relay.post_on(handoff.SURFACE, handoff.thread_post(slack))
    relay.suggest_on(handoff.SURFACE, handoff.suggestion_post(slack))
