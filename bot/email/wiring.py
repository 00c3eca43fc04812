"""The email face in the registry (``bot.app.FACES``): each accepted mail's turn and its one
reply, and follow-ups over SMTP when the shop has an address. Its route (``POST
/email/inbound``) is the server's, with the HTTP API's limits."""

from __future__ import annotations

from bot.faces import Face, FaceKit, Plain


def face(kit: FaceKit) -> Face | None:
    from bot.email.bridge import smtp_config
    from bot.email.smtp import EmailFollowUps
    from bot.email.turns import FACE, EmailTurns

    cfg = smtp_config(kit.settings)
    shop = cfg.from_address if cfg is not None else None
    turns = EmailTurns(
        port=kit.port, backend=kit.backend, mailer=kit.mailer, from_address=shop, sent=kit.port.mailbox()
    )
    follow_ups = (
        EmailFollowUps(mailer=kit.mailer, backend=kit.backend, from_address=shop) if kit.mailer and shop else None
    )
    return Plain(name=FACE, handler=turns, notifier=follow_ups)
