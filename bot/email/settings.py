"""The email face's section of the settings: ``SIGNOFF_SMTP_URL`` and ``SIGNOFF_EMAIL_FROM``
read into a :class:`SmtpConfig` (``ValueError`` naming the variable). ``bot/settings.py`` holds
the variables; this folder says what they mean. Nothing here imports the SMTP client or the
face's runtime code."""

from __future__ import annotations

import dataclasses

from bot.email.config import SmtpConfig
from bot.settings import Settings


def smtp_config_of(s: Settings) -> SmtpConfig | None:
    """The SMTP settings, or ``None`` without ``SIGNOFF_SMTP_URL``; the shop's address is
    ``SIGNOFF_EMAIL_FROM`` (else the URL's ``from=``). ``ValueError`` naming the variable."""
    url, shop = s.signoff_smtp_url, s.signoff_email_from
    if shop is not None and (shop.count("@") != 1 or any(c in shop for c in " <>\r\n")):
        raise ValueError("SIGNOFF_EMAIL_FROM: must be a plain address like support@shop.example")
    if not url:
        return None
    cfg = SmtpConfig.from_url(url)  # ``SIGNOFF_SMTP_URL: must be smtp://host:port …``
    # Replies come from the shop's own address, never from whatever the inbound mail was sent to.
    if not shop and not cfg.from_address:
        raise ValueError(
            "SIGNOFF_EMAIL_FROM: required with SIGNOFF_SMTP_URL (the shop's address replies come from), "
            "or give it in the URL as ?from=support@shop.example"
        )
    return dataclasses.replace(cfg, from_address=shop) if shop else cfg
