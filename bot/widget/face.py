"""The widget face: what ``POST /widget/api/messages`` accepts, the worker's turn for each
accepted message, confirmation clicks, and the follow-ups the runtime sends later.

A message is stored with its job (``Runtime.accept_inbound("widget", …)``) before the 202,
under the key (session, the browser's message id): a resend writes nothing. The worker calls
:meth:`WidgetFace.handle` (``App.inbound["widget"]``): the echo of the message, the turn
(``Runtime.take_message`` keyed ``inbound:<id>``, so a retry returns the answer owed), the answer
kept on the inbound row, then written to the session's stream once per key (``events.deliver``).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agent.errors import LimitExceeded
from agent.face_port import FacePort, InboundItem
from agent.notify import EscalationNotice, ShadowNotice
from agent.outcomes import TurnResult
from bot.api.auth import AuthConfig, Authenticator
from bot.email.smtp import Mailer
from bot.web import InboxFull
from bot.widget import events
from bot.widget.config import CHANNEL, FACE, WidgetConfig
from bot.widget.sessions import Sessions, Visitor
from bot.widget.watch import Watch
from storage.inbox import Inbound
from storage.records import Approval, Conversation
from storage.widget import WidgetSession
from tools.backend import CommerceBackend


class TurnInProgress(Exception):
    """A live process is still answering this message; the job is retried later."""


class WidgetFace:
    """The widget of one process; :meth:`attach` hands it the runtime's port (its notifier is
    one of the runtime's collaborators)."""

    def __init__(
        self, config: WidgetConfig, *, backend: CommerceBackend, auth: AuthConfig, mailer: Mailer | None = None
    ) -> None:
        self.config = config
        self.backend = backend
        #: Verification codes go over SMTP when it is configured.
        self.mailer = mailer
        self.auth = auth
        self._port: FacePort | None = None
        self._sessions: Sessions | None = None
        self._watch: Watch | None = None

    def attach(self, port: FacePort) -> None:
        self._port = port
        store = events.store_of(port)
        self._sessions = Sessions(self.config, store, Authenticator(self.auth, self.backend, port), self.backend)
        self._watch = Watch(store, interval=self.config.poll_s)

    @property
    def watch(self) -> Watch:
        """The poller of this process's open streams (one query a tick for all of them)."""
        if self._watch is None:
            raise RuntimeError("the widget face was not attached to a runtime")
        return self._watch

    async def close(self) -> None:
        if self._watch is not None:
            await self._watch.close()

    @property
    def sessions(self) -> Sessions:
        if self._sessions is None:
            raise RuntimeError("the widget face was not attached to a runtime")
        return self._sessions

    @property
    def port(self) -> FacePort:
        if self._port is None:
            raise RuntimeError("the widget face was not attached to a runtime")
        return self._port

    # -- the route's door ---------------------------------------------------------------
    async def accept(self, visitor: Visitor, *, client_id: str, text: str, person: bool) -> None:
        """Store the message and its job (a resend with the same id stores nothing)."""
        session = visitor.session
        payload = {"session_id": session.id, "client_id": client_id, "text": text, "person": person}
        accepted = await self.port.accept(FACE, [f"widget:{session.id}:{client_id}"], payload)
        if accepted.full:
            raise InboxFull(self.port.retry_after_s)
        await self._echo(session.id, client_id, text)

    async def _echo(self, session_id: str, client_id: str, text: str) -> None:
        store = events.store_of(self.port)
        key = f"widget:user:{session_id}:{client_id}"
        await events.emit(store, session_id, key=key, kind="user", data={"text": text, "id": client_id})

    # -- the worker's turn --------------------------------------------------------------
    async def handle(self, item: Inbound) -> None:
        """Answer one accepted message into its session's stream (``App.inbound["widget"]``)."""
        inbox: InboundItem = self.port.item(item)
        p = item.payload
        session = await events.store_of(self.port).get(str(p.get("session_id")))
        if session is None:
            await inbox.finished("ignored")
            return
        await self._echo(session.id, str(p["client_id"]), str(p["text"]))  # before the answer, always
        if p.get("person") is True:
            await self._ask_for_person(item, session)
            await inbox.delivered()
            return
        if item.status == "answered" and item.result:
            result = TurnResult.from_dict(item.result)
        else:
            answer = await self._turn(item, session)
            if answer is None:
                await inbox.delivered()
                return
            result = answer
            await inbox.answered(result.as_dict())
        await events.deliver(self.port, session, result)
        await inbox.delivered()

    async def _ask_for_person(self, item: Inbound, session: WidgetSession) -> None:
        """ "Talk to a person": the hand-off opens (or the open one stands), and the customer is told
        honestly when a person will reply, once per message however often this runs."""
        principal = Visitor(session=session, page_held=False).principal
        conv = await self.port.open_conversation(
            principal=principal, channel=CHANNEL, external_ref=f"widget:{session.id}:{principal.key}"
        )
        store = events.store_of(self.port)
        if session.conversation_id != conv.id:
            await store.set_conversation(session.id, conv.id)
        key = f"widget:answer:{session.id}:person:{item.id}"

        async def tell(told: str) -> None:
            await events.emit(store, session.id, key=key, kind="answer", data={"text": told})

        await self.port.handoffs.ask_for_person(conv, by=principal.key, tell=tell)

    async def _turn(self, item: Inbound, session: WidgetSession) -> TurnResult | None:
        principal = Visitor(session=session, page_held=False).principal
        try:
            result = await self.port.take_message(
                principal=principal,
                channel=CHANNEL,
                message=str(item.payload["text"]),
                external_ref=f"widget:{session.id}:{principal.key}",
                deliver_later=True,
                message_key=f"inbound:{item.id}",
                meta={"widget": {"session": session.id}},
            )
        except LimitExceeded:
            # Nothing was stored for this message: say so once, never retried.
            await events.notice(self.port, session.id, "limit", item.id)
            return None
        if result is None:
            raise TurnInProgress(item.id)
        return result

    # -- a click on Confirm or Decline ------------------------------------------------------------
    async def answer(self, visitor: Visitor, confirmation_id: str, *, version: int, accept: bool) -> dict[str, Any]:
        rt = self.port
        conf = await rt.confirmation(confirmation_id)
        principal = visitor.principal
        if conf is None or await rt.visible_conversation(principal, conf.conversation_id) is None:
            return {"error": "not_found"}
        if conf.version != version:
            return {"error": "conflict"}
        settled = await rt.confirm(confirmation_id, actor=principal, accept=accept, via="button", deliver_later=True)
        store = events.store_of(rt)
        await events.show_confirmation(store, visitor.session.id, settled.confirmation)
        if settled.approval is not None:
            await events.show_approval(store, visitor.session.id, settled.approval)
        if settled.turn is not None:
            await events.deliver(rt, visitor.session, settled.turn)
        return {"status": settled.confirmation.status}

    async def verified(self, visitor: Visitor) -> None:
        """The session is now the customer's: said once in the stream."""
        await events.notice(self.port, visitor.session.id, "verified", "verified")

    # -- the runtime's news (Notifier) ---------------------------------------------------------
    async def follow_up(self, conversation: Conversation, result: TurnResult) -> None:
        """An answer that came later (an approval decided, a recovered turn): into every session
        of the conversation, with the approvals they were shown at their new status."""
        for session in await events.store_of(self.port).for_conversation(conversation.id):
            await events.refresh_approvals(self.port, session)
            await events.deliver(self.port, session, result)

    async def approval_requested(self, approval: Approval) -> None:
        return None

    async def approval_decided(self, approval: Approval) -> None:
        return None

    async def escalated(self, notice: EscalationNotice) -> None:
        return None

    async def shadow_recorded(self, notice: ShadowNotice) -> None:
        return None

    def routes(self) -> list[web.RouteDef]:
        from bot.widget.routes import widget_routes

        return widget_routes(self)


__all__ = ["TurnInProgress", "WidgetFace"]
