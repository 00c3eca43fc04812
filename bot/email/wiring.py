"""The email face in the registry (``bot.app.FACES``): its webhook ``POST /email/inbound``
(always served: without ``SIGNOFF_EMAIL_SECRET`` it answers 503), each accepted mail's turn and
its one reply, and follow-ups over SMTP when the shop has an address."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.handoff_relay import Relay
from bot.faces import Face, FaceKit, Plain

if TYPE_CHECKING:
    from bot.email.bridge import EmailConfig


def face(kit: FaceKit) -> Face:
    from bot.email.bridge import EmailConfig

    return build(kit, EmailConfig.from_settings(kit.settings))


def build(kit: FaceKit, config: EmailConfig) -> Face:
    """The email face with its webhook checked as ``config`` says (tests give their own)."""
    from bot.email.bridge import EmailBridge
    from bot.email.smtp import EmailFollowUps
    from bot.email.turns import FACE, EmailTurns

    cfg = kit.settings.smtp_config()
    shop = cfg.from_address if cfg is not None else None
    turns = EmailTurns(
        port=kit.port, backend=kit.backend, mailer=kit.mailer, from_address=shop, sent=kit.port.mailbox()
    )
    follow_ups = (
        EmailFollowUps(mailer=kit.mailer, backend=kit.backend, from_address=shop) if kit.mailer and shop else None
    )
    bridge = EmailBridge(kit.port, kit.backend, config)
    mailer = kit.mailer

    def relays(relay: Relay) -> None:
        """Hand-offs: a person's replies go to email customers by email, threaded, from the shop."""
        from bot.email.handoff import email_delivery

        if mailer is not None and shop:
            relay.deliver_on("email", email_delivery(kit.port, kit.backend, mailer, shop, kit.port.mailbox()))

    return Plain(name=FACE, handler=turns, notifier=follow_ups, served=bridge.routes(), relays=relays)
