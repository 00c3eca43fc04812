"""The customer's chat widget on the shop's own site: one script tag, a Web Component, an API
with a resumable event stream, three ways to know the customer (Shopify app proxy, a site's
JWT, a verified guest) and a Shopify theme app extension.

``wiring.face`` is its line in the registry (``bot.app.FACES``); ``append_outbound`` is how a
person's reply (the hand-off relay) reaches a widget customer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.face_port import FacePort


async def append_outbound(port: FacePort, conversation_id: str, *, text: str, author: str, key: str) -> int:
    """A person's reply into the widget conversation ``conversation_id``: once per ``key``, shown
    as ``author``'s. Returns how many widget sessions hold it (0: not a widget conversation)."""
    from bot.widget.events import append_outbound as append

    return await append(port, conversation_id, text=text, author=author, key=key)


__all__ = ["append_outbound"]
