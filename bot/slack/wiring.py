"""The Slack face in the registry (``bot.app.FACES``). Its HTTP routes are the Bolt app's,
mounted by the server from ``App.slack`` (they need the signing secret; Socket Mode needs none)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handoff_relay import Relay
from bot.faces import Face, FaceKit, Plain
from storage.inbox import Inbound

if TYPE_CHECKING:
    from bot.slack.face import SlackFace


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
        on_start=slack.start,
        on_close=slack.close,
        inner=slack,
        relays=lambda relay: relays(slack, relay),
    )


def relays(slack: SlackFace, relay: Relay) -> None:
    """Hand-offs: Slack customers get a person's replies in their thread; the escalation thread
    gets the customer's messages and the SLA re-page."""
    from bot.slack import handoff

    relay.deliver_on("slack", handoff.customer_delivery(slack))
    relay.post_on(handoff.SURFACE, handoff.thread_post(slack))
    relay.suggest_on(handoff.SURFACE, handoff.suggestion_post(slack))
