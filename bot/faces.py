"""One protocol for every face, and what the composition root hands each one.

A face is a folder under ``bot/`` and one line in :data:`bot.app.FACES`: a factory that reads
its own section of the settings (``None`` when the face is not configured here) and returns a
:class:`Face` built over a :class:`FaceKit`. The root then mounts the face's routes, gives the
worker its inbound handler, adds its notifier to the runtime's routing (as a staff surface
when it shows approvals and escalations), and starts and closes it with the process. The face
sees the runtime only through ``kit.port`` (:class:`agent.face_port.FacePort`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from agent.face_port import FacePort
from agent.handoff_relay import Relay
from agent.notify import Notifier
from storage.inbox import Inbound
from tools.backend import CommerceBackend

if TYPE_CHECKING:
    from bot.email.smtp import Mailer
    from bot.settings import Settings


@dataclass(frozen=True, kw_only=True)
class FaceKit:
    """What every face is built from."""

    settings: Settings
    port: FacePort
    backend: CommerceBackend
    clock: Callable[[], datetime]
    #: The one SMTP client, when ``SIGNOFF_SMTP_URL`` is set (replies, link codes).
    mailer: Mailer | None = None
    #: The database's engine, for a vendor SDK that keeps its own tables there (Slack's OAuth stores).
    engine: Any = None


class Face(Protocol):
    """A face as the composition root runs it."""

    #: The ``Inbox.accept`` face name of what it accepts, and its conversations' channel.
    name: str
    #: Follow-ups of its conversations (and, with ``staff``, approval cards and escalations).
    notifier: Notifier | None
    staff: bool

    def routes(self) -> Sequence[web.AbstractRouteDef]:
        """The HTTP routes it serves (mounted by ``bot.server.make_web_app``)."""
        ...

    async def handle(self, item: Inbound) -> None:
        """Work one item it accepted, in the worker (safe to run again)."""
        ...

    def join(self, relay: Relay) -> None:
        """Add its ends of a hand-off's relay (its customers; its staff threads), if it has any."""
        ...

    async def start(self) -> None: ...
    async def close(self) -> None: ...


#: A face's entry in the registry: its settings section read, the face built, or ``None``.
FaceFactory = Callable[[FaceKit], Face | None]


@dataclass(kw_only=True)
class Plain:
    """A :class:`Face` from its parts, for faces that are a handler and a notifier."""

    name: str
    handler: Callable[[Inbound], Any] | None = None
    notifier: Notifier | None = None
    staff: bool = False
    served: Sequence[web.AbstractRouteDef] = ()
    on_start: Callable[[], Awaitable[None]] | None = None
    on_close: Callable[[], Awaitable[None]] | None = None
    #: The face's own object, for the parts of the process that serve it (Slack's Bolt app).
    inner: Any = None
    #: Its ends of a hand-off's relay (``Relay.deliver_on`` / ``post_on``), if it has any.
    relays: Callable[[Relay], None] | None = None

    def join(self, relay: Relay) -> None:
        if self.relays is not None:
            self.relays(relay)

    def routes(self) -> Sequence[web.AbstractRouteDef]:
        return self.served

    async def handle(self, item: Inbound) -> None:
        if self.handler is None:
            raise RuntimeError(f"the {self.name} face accepts nothing")
        await self.handler(item)

    async def start(self) -> None:
        if self.on_start is not None:
            await self.on_start()

    async def close(self) -> None:
        if self.on_close is not None:
            await self.on_close()


__all__ = ["Face", "FaceFactory", "FaceKit", "Plain"]
