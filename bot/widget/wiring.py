"""The chat widget's line in the registry (``bot.app.FACES``): on with ``SIGNOFF_WIDGET=true``."""

from __future__ import annotations

from agent.handoff_relay import Relay
from bot.faces import Face, FaceKit, Plain
from storage.records import Conversation


def face(kit: FaceKit) -> Face | None:
    if not kit.settings.signoff_widget:
        return None
    from bot.api.auth import AuthConfig
    from bot.widget.config import FACE, WidgetConfig
    from bot.widget.face import WidgetFace

    widget = WidgetFace(
        WidgetConfig.from_settings(kit.settings),
        backend=kit.backend,
        auth=AuthConfig.from_settings(kit.settings),
        mailer=kit.mailer,
    )
    widget.attach(kit.port)
    port = kit.port

    def relays(relay: Relay) -> None:
        """Hand-offs: a person's replies and the hand-off's state go into the customer's widget
        stream, once per key."""
        from bot.widget.events import announce_handoff, append_outbound, bind_started

        async def deliver(conversation: Conversation, text: str, name: str, key: str) -> None:
            await bind_started(port, conversation)
            await append_outbound(port, conversation.id, text=text, author=name, key=key)

        async def announce(conversation: Conversation, state: str, name: str | None, key: str) -> None:
            await bind_started(port, conversation)
            await announce_handoff(port, conversation.id, state=state, name=name, key=key)

        relay.deliver_on(FACE, deliver)
        relay.announce_on(FACE, announce)

    return Plain(
        name=FACE,
        handler=widget.handle,
        notifier=widget,
        served=widget.routes(),
        inner=widget,
        relays=relays,
        on_close=widget.close,
    )
