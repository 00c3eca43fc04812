"""The widget's settings: where it may be served, how the app proxy is verified, its limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from agent.errors import ConfigError
from bot.settings import reveal

#: The face's name in the inbox and the channel of its conversations.
FACE = "widget"
CHANNEL = "widget"


def _origin(value: str) -> str:
    """``https://shop.example`` exactly (scheme, host, port): what a browser sends as ``Origin``."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.path not in ("", "/"):
        raise ConfigError(f"SIGNOFF_WIDGET_ORIGINS: {value.strip()[:80]!r} is not an origin like https://shop.example")
    if parts.query or parts.fragment or parts.username:
        raise ConfigError(f"SIGNOFF_WIDGET_ORIGINS: {value.strip()[:80]!r} is not an origin like https://shop.example")
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname.lower()}{port}"


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Per session, per address and per shop (a guest's shop budget is the policy's ``strangers``
    group budget: every guest session of one shop is in the group ``widget-shop:<shop>``)."""

    messages_per_minute: int = 12
    messages_per_day: int = 300
    sessions_per_hour_per_ip: int = 20
    minute: timedelta = timedelta(minutes=1)
    day: timedelta = timedelta(days=1)
    hour: timedelta = timedelta(hours=1)


@dataclass(frozen=True, kw_only=True)
class WidgetConfig:
    #: The shop this deployment serves (the guests' budget group; an app-proxy request names its own).
    shop: str = "default"
    #: Origins that may use the widget cross-site (the session is then held by the page).
    origins: frozenset[str] = frozenset()
    #: The Shopify app's client secret: app-proxy requests are signed with it.
    proxy_secret: str | None = field(default=None, repr=False)
    #: Cookies are ``Secure``; off only for a plain-HTTP test server that is not loopback.
    secure_cookie: bool = True
    #: A live answer is sent in pieces this far apart (``0``: at once); a replay is never paced.
    chunk_delay_s: float = 0.03
    #: The stream ends after this long; the browser reconnects with ``Last-Event-ID``.
    stream_max_s: float = 300.0
    #: How often the process's one poller asks the store which open streams have events another
    #: process wrote (one query for all of them, ``bot/widget/watch.py``); also how often a
    #: stream checks that its reader is still there.
    poll_s: float = 1.0
    #: An open stream reads its store at least this often even when nothing woke it (a net under
    #: the poller; what this process writes wakes it at once).
    reread_s: float = 60.0
    #: A comment line this often keeps proxies from closing an idle stream.
    heartbeat_s: float = 15.0
    #: How long a logged-in customer's conversation continues on the next page.
    resume_window: timedelta = timedelta(hours=24)
    limits: Limits = field(default_factory=Limits)

    @classmethod
    def from_settings(cls, settings: Any) -> WidgetConfig:
        origins = frozenset(_origin(o) for o in (settings.signoff_widget_origins or "").split(",") if o.strip())
        return cls(
            shop=settings.signoff_shopify_shop or "default",
            origins=origins,
            proxy_secret=reveal(settings.signoff_shopify_client_secret),
            chunk_delay_s=settings.signoff_widget_chunk_delay_s,
            limits=Limits(sessions_per_hour_per_ip=settings.signoff_widget_sessions_per_ip_hour),
        )


__all__ = ["CHANNEL", "FACE", "Limits", "WidgetConfig"]
