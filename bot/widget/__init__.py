"""The customer's chat widget on the shop's own site: one script tag, a Web Component, an API
with a resumable event stream, three ways to know the customer (Shopify app proxy, a site's
JWT, a verified guest) and a Shopify theme app extension.

``install`` is the composition root's one line; ``append_outbound`` is how a person's reply
(the hand-off relay) reaches a widget customer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

    from agent.notify import RoutingNotifier
    from agent.runtime import Runtime
    from storage.inbox import Inbound
    from tools.backend import CommerceBackend


def install(
    settings: Any,
    runtime: Runtime,
    backend: CommerceBackend,
    routed: RoutingNotifier,
    inbound: MutableMapping[str, Callable[[Inbound], Awaitable[None]]],
) -> list[web.RouteDef]:
    """With ``SIGNOFF_WIDGET=true``: the face's routes, its worker handler and its follow-ups."""
    if not getattr(settings, "signoff_widget", False):
        return []
    from bot.api.auth import AuthConfig
    from bot.widget.config import CHANNEL, FACE, WidgetConfig
    from bot.widget.face import WidgetFace

    face = WidgetFace(WidgetConfig.from_settings(settings), backend=backend, auth=AuthConfig.from_settings(settings))
    face.attach(runtime)
    inbound[FACE] = face.handle
    routed.add(CHANNEL, face)
    return face.routes()


async def append_outbound(runtime: Runtime, conversation_id: str, *, text: str, author: str, key: str) -> int:
    """A person's reply into the widget conversation ``conversation_id``: once per ``key``, shown
    as ``author``'s. Returns how many widget sessions hold it (0: not a widget conversation)."""
    from bot.widget.events import append_outbound as append

    return await append(runtime, conversation_id, text=text, author=author, key=key)


__all__ = ["append_outbound", "install"]
