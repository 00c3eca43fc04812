"""The email face in the registry (``bot.app.FACES``): each accepted mail's turn and its one
reply, and follow-ups over SMTP when the shop has an address. Its route (``POST
/email/inbound``) is the server's, with the HTTP API's limits."""

from __future__ import annotations

from agent.handoff_relay import Relay
from bot.faces import Face, FaceKit, Plain


def face(kit: FaceKit) -> Face | None:
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
    mailer = kit.mailer

    def relays(relay: Relay) -> None:
        """Hand-offs: a person's replies go to email customers by email, threaded, from the shop."""
        from bot.email.handoff import email_delivery

        if mailer is not None and shop:
            relay.deliver_on("email", email_delivery(kit.port, kit.backend, mailer, shop, kit.port.mailbox()))

    return Plain(name=FACE, handler=turns, notifier=follow_ups, relays=relays)
