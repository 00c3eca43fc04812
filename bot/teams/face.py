"""The Teams face wired to the runtime: what ``POST /teams/messages`` accepts, and the
worker's turn for each accepted message.

A message (or the bot being added) is recorded with ``Inbox.accept("teams", keys, payload)``
— its keys are the activity's (conversation, id) and (tenant, sender, id) — before the
route answers 202; a redelivery writes nothing. The worker then calls :meth:`TeamsFace.handle`
(``App.inbound["teams"]``): who the sender is (``teams_user_id`` in the dataset), the turn
(``Runtime.take_message`` keyed ``inbound:<id>``, so a retry returns the answer owed instead
of asking twice), the answer stored (``Inbox.answered``), posted once per key, ``delivered``.
A card click is persisted the same way and answered at once with a "working on it" card;
the worker decides it (:mod:`bot.teams.clicks`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import asdict
from datetime import datetime
from typing import Any

from aiohttp import web

from agent.boundary import unavailable
from agent.errors import Unavailable
from agent.face_port import FacePort
from bot.teams import takeover
from bot.teams import wording as say
from bot.teams.auth import InboundAuthenticator
from bot.teams.clicks import Clicks, click_payload
from bot.teams.config import TeamsConfig
from bot.teams.delivery import Poster, Reply, reply_of
from bot.teams.inbound import TeamsActivity, TeamsBotAdded, TeamsCardAction, TeamsMessage, TeamsUser
from bot.teams.invoke import InvokeReply
from bot.teams.people import identify
from bot.teams.routes import teams_routes
from bot.teams.sender import TeamsDeliveryError, TeamsSender
from bot.web import InboxFull
from storage.identities import Staff
from storage.inbox import Inbound
from storage.records import wall_clock
from tools.backend import CommerceBackend
from tools.context import Principal

FACE = "teams"
CHANNEL = "teams"


class TurnInProgress(Exception):
    """A live process is still answering this message; the job is retried later."""


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:40]


def inbound_keys(activity: TeamsActivity) -> list[str]:
    """The delivery keys of an activity: Teams redelivers with the same ids."""
    place = activity.place
    return [activity.dedup_key, f"teams:act:{_digest(place.tenant_id or '', activity.sender.id, activity.activity_id)}"]


def thread_ref(conversation_id: str) -> str:
    """The assist binding's key of a Teams conversation (a channel thread, a chat)."""
    return f"teams:{_digest(conversation_id)}"


class TeamsFace:
    """The Teams face of one process. Built by the composition root before the runtime exists
    (its notifier is one of the runtime's collaborators); :meth:`attach` hands it the runtime."""

    def __init__(
        self,
        config: TeamsConfig,
        *,
        sender: TeamsSender,
        backend: CommerceBackend,
        approvals_reference: Mapping[str, Any] | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.config = config
        self.sender = sender
        self.backend = backend
        self.auth = InboundAuthenticator(config)
        self.approvals_reference = dict(approvals_reference) if approvals_reference else None
        self.clock = clock or wall_clock
        self._port: FacePort | None = None
        self._poster: Poster | None = None
        self._clicks: Clicks | None = None

    def attach(self, port: FacePort) -> None:
        self._port = port
        self._poster = Poster(port=port, sender=self.sender)
        self._clicks = Clicks(
            port=port, backend=self.backend, sender=self.sender, poster=self._poster, clock=self.clock
        )

    @property
    def port(self) -> FacePort:
        if self._port is None:
            raise RuntimeError("the Teams face was not attached to a runtime")
        return self._port

    @property
    def poster(self) -> Poster:
        if self._poster is None:
            raise RuntimeError("the Teams face was not attached to a runtime")
        return self._poster

    @property
    def clicks(self) -> Clicks:
        if self._clicks is None:
            raise RuntimeError("the Teams face was not attached to a runtime")
        return self._clicks

    def routes(self) -> list[web.RouteDef]:
        """``POST /teams/messages``."""
        # A database outage goes to the shared 503 mapping (bot/web.py), not the route's own 500.
        return teams_routes(self.accept, auth=self.auth, passthrough=(Unavailable,))

    # -- the route's door -------------------------------------------------------------
    async def accept(
        self, activity: TeamsActivity, raw: dict[str, Any], reference: dict[str, Any]
    ) -> InvokeReply | None:
        """Persist a message before the 202; persist a click and answer it with its card marked
        "working on it" (the worker decides it), or refuse it here, persisting nothing."""
        if isinstance(activity, TeamsCardAction):
            reply, act = await self.clicks.answer(activity)
            if act:
                await self._persist(activity, click_payload(activity, reference, at=self.clock()))
            return reply
        if isinstance(activity, TeamsMessage | TeamsBotAdded):
            await self._persist(activity, _payload(activity, reference))
        return None

    async def _persist(self, activity: TeamsActivity, payload: dict[str, Any]) -> None:
        try:
            accepted = await self.port.accept(FACE, inbound_keys(activity), payload)
        except Exception as exc:
            if unavailable(exc):
                raise Unavailable() from exc
            raise
        if accepted.full:  # 503 + Retry-After (the route): the Bot Connector retries later
            raise InboxFull(self.port.retry_after_s)

    # -- the worker's turn ------------------------------------------------------------
    async def handle(self, item: Inbound) -> None:
        """Answer one accepted message and post the answer once, or decide one accepted click
        (``App.inbound["teams"]``)."""
        life = self.port.item(item)
        if item.payload.get("kind") == "click":
            await self.clicks.decide(item.payload)
            await life.delivered()
            return
        if item.status == "answered" and item.result:
            reply = Reply.from_dict(item.result)
        else:
            answer = await self._answer(item)
            if answer is None:
                raise TurnInProgress(item.id)
            reply = answer
            await life.answered(reply.as_dict())
        await self.poster.post(reply, item.payload["reference"])
        await life.delivered()

    async def _answer(self, item: Inbound) -> Reply | None:
        payload = item.payload
        person = await identify(self.port, self.backend, TeamsUser(**payload["sender"]))
        key = f"teams:inbound:{item.id}"
        if payload["kind"] == "welcome":
            staff = person is not None and person.staff is not None
            return Reply(key=key, text=f"{say.WELCOME}\n\n{say.WELCOME_STAFF_HINT}" if staff else say.WELCOME)
        if person is None:
            return Reply(key=key, text=say.NOT_LINKED)
        text = str(payload.get("text") or "").strip()
        if not text:
            return Reply(key=key, text=say.EMPTY_MESSAGE)
        if person.staff is not None:
            return await self._staff(item, person.staff, text)
        return await self._turn(item, person.principal, text)

    async def _staff(self, item: Inbound, staff: Staff, text: str) -> Reply | None:
        key = f"teams:inbound:{item.id}"
        words = text.split()
        conversation_id = item.payload["conversation_id"]
        if len(words) == 2 and words[0].lower() == "assist":
            return await self._assist(item, staff, words[1])
        if text.lower() == "queue":
            return Reply(key=key, text=await self._queue(staff))
        if await takeover.on_chain_message(self.port, item.payload, staff, text):
            return Reply(key=key, text="")  # relayed, noted or left in the hand-off's chain: nothing to say
        binding = await self.port.binding(thread_ref(conversation_id))
        if binding is None:
            return Reply(key=key, text=say.ASSIST_HINT)
        principal = Principal(kind=staff.role, id=staff.id, customer_id=binding.customer_id)
        return await self._turn(item, principal, text)

    async def _assist(self, item: Inbound, staff: Staff, customer_id: str) -> Reply:
        """``assist C-7``: bind this conversation to the account, never where a guest or someone
        from another tenant reads along (Slack refuses external places the same way)."""
        key = f"teams:inbound:{item.id}"
        if item.payload.get("conversation_type") != "personal" and not await self._own_people_only(item):
            return Reply(key=key, text=say.ASSIST_EXTERNAL)
        customer = await self.backend.get_customer(customer_id)
        if customer is None:
            return Reply(key=key, text=say.ASSIST_UNKNOWN.format(customer=customer_id[:64]))
        where = thread_ref(item.payload["conversation_id"])
        await self.port.bind(where, customer_id=customer.id, staff_id=staff.id)
        return Reply(key=key, text=say.ASSIST_BOUND.format(customer=customer.id, name=customer.name))

    async def _own_people_only(self, item: Inbound) -> bool:
        """Every member is a member (not a guest) of an allowed tenant; unknown counts as not."""
        try:
            members = await self.sender.members(item.payload["reference"])
        except TeamsDeliveryError:
            return False  # cannot tell who reads along: refuse
        return bool(members) and all(
            str(m.get("userRole") or "").lower() != "guest"
            and str(m.get("tenantId") or "").lower() in self.config.tenants
            for m in members
        )

    async def _queue(self, staff: Staff) -> str:
        if staff.role != "supervisor":
            return say.QUEUE_SUPERVISORS_ONLY
        waiting = await self.port.pending_approvals(limit=20)
        if not waiting:
            return say.QUEUE_EMPTY
        lines = [
            say.QUEUE_LINE.format(id=a.id, version=a.version, role=a.required_role, summary=a.summary[:200])
            for a in waiting
        ]
        return "\n".join([say.QUEUE_HEAD.format(count=len(waiting)), *lines])

    async def _turn(self, item: Inbound, principal: Principal, text: str) -> Reply | None:
        reference = item.payload["reference"]
        conversation_id = item.payload["conversation_id"]
        external = f"teams:{_digest(conversation_id, principal.key, principal.customer_id or '')}"
        result = await self.port.take_message(
            principal=principal,
            channel=CHANNEL,
            message=text,
            external_ref=external,
            deliver_later=True,
            message_key=f"inbound:{item.id}",
            meta={"teams": {"reference": reference}},
        )
        if result is None:
            return None
        await self.remember(result.conversation_id, reference)
        return reply_of(result)

    async def remember(self, conversation_id: str, reference: Mapping[str, Any]) -> None:
        """Keep the conversation's latest Teams reference (follow-ups are posted with it)."""
        await self.port.set_face_meta(conversation_id, "teams", {"reference": dict(reference)})


def _payload(activity: TeamsMessage | TeamsBotAdded, reference: dict[str, Any]) -> dict[str, Any]:
    """What the worker needs, as JSON: no raw activity (its text is kept once, mention removed)."""
    return {
        "kind": "message" if isinstance(activity, TeamsMessage) else "welcome",
        "activity_id": activity.activity_id,
        "conversation_id": activity.place.conversation_id,
        "conversation_type": activity.place.conversation_type,
        "tenant_id": activity.place.tenant_id,
        "sender": asdict(activity.sender),
        "text": activity.text if isinstance(activity, TeamsMessage) else None,
        "reference": reference,
    }


def approvals_reference(config: TeamsConfig, conversation_id: str, service_url: str) -> dict[str, Any]:
    """A conversation reference for posting into the configured approvals channel."""
    return {
        "channelId": "msteams",
        "serviceUrl": service_url,
        "bot": {"id": f"28:{config.app_id}"},
        "conversation": {"id": conversation_id, "conversationType": "channel", "tenantId": config.tenant_id},
    }
