"""The runtime as a face sees it: the one object a face receives.

A face (Slack, Teams, email, the HTTP API, the Shopify webhooks, a test face) accepts what
its outside world sends, runs the accepted item in the worker, posts each outbound message
once, binds threads to accounts, asks who a user is, answers confirmations and approvals and
audits what only it saw. :class:`FacePort` is that vocabulary and nothing more: a face never
holds the runtime's repositories (``Runtime.s``), so what a face may do is what is listed
here, and a new face learns it from one file.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from agent import queries
from agent.approvals import DecideResult
from agent.audit_budget import AuditBudget
from agent.confirmations import ConfirmResult, Via
from agent.errors import DecisionCode
from agent.handoff_port import HandoffDesk
from agent.outcomes import TurnResult
from agent.runtime import Runtime
from storage.audit import AuditEvent
from storage.db import Database
from storage.identities import Identity, IdentityLinks, Staff
from storage.inbox import Accepted, DeliveryState, Inbound, InboundStatus
from storage.mailbox import SentMail
from storage.opening import TurnState
from storage.privacy import CustomerData
from storage.records import Approval, Confirmation, Conversation
from storage.rollout import OutsideActions, StaffAction
from storage.thread_bindings import ThreadBinding
from tools.context import Principal
from tools.registry import ToolDef

log = logging.getLogger(__name__)

#: ``send()`` of :meth:`FacePort.once`: posts the message, returns where it went (stored with the key).
Send = Callable[[], Awaitable[dict[str, Any]]]

#: What a click on a card asks, whatever the face (its button's verb without ``signoff.``).
ClickAction = Literal["confirm", "decline", "approve", "reject", "takeover", "handback", "close", "send"]
#: Why a click changed nothing: the runtime's refusal code (:data:`~agent.errors.DecisionCode`),
#: a hand-off's (``taken``, ``not_yours``, … of ``HandoffDesk``), or ``bad_value`` (a button
#: value we cannot read).
ClickRefusal = DecisionCode | str


@dataclass(frozen=True, kw_only=True)
class ClickSeen:
    """A click on one of our cards, as every face audits it (:meth:`FacePort.click_event`)."""

    face: str
    action: ClickAction
    #: The confirmation's or approval's id (``None``: the button could not be read).
    target: str | None
    #: The clicker as the face knows them: its user id and its workspace or tenant.
    user: str
    team: str | None

    @property
    def who(self) -> str:
        """The clicker across the faces (``slack:T…:U…``, ``teams:tenant:aad``): the budget's person."""
        return f"{self.face}:{self.team or '-'}:{self.user}"


@dataclass(frozen=True, kw_only=True)
class Once:
    """What :meth:`FacePort.once` did: ``state`` ``"go"`` (this call sent it), ``"sent"`` (it
    went out before: ``ref`` says where) or ``"busy"`` (a live process is sending it now)."""

    state: DeliveryState
    ref: dict[str, Any] | None = None

    @property
    def sent_now(self) -> bool:
        return self.state == "go"


class InboundItem:
    """One accepted item's lifecycle in the worker: answered (the result kept, so a retry
    delivers instead of asking again), delivered, or finished another way."""

    def __init__(self, port: FacePort, item: Inbound) -> None:
        self._port, self.item = port, item

    @property
    def id(self) -> str:
        return self.item.id

    @property
    def payload(self) -> dict[str, Any]:
        return self.item.payload

    async def answered(self, result: dict[str, Any]) -> None:
        await self._port._runtime.s.inbox.answered(self.item.id, result)

    async def delivered(self) -> None:
        await self.finished("delivered")

    async def finished(self, status: InboundStatus) -> None:
        await self._port._runtime.s.inbox.finish(self.item.id, status)


class FacePort:
    """The runtime's face-facing API (see the module docstring)."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        s = runtime.s
        #: The link-code flow's records (a Slack user proving an address on file).
        self.links: IdentityLinks = s.links
        #: The database, for a face's own tables (the widget's sessions and event streams);
        #: never a way to the runtime's repositories.
        self.database: Database = s.db
        #: Hand-offs to a person: the staff thread's clicks, notes and replies.
        self.handoffs = HandoffDesk(runtime)
        #: The one clock of every timestamp.
        self.clock: Callable[[], datetime] = s.clock

    # -- inbound -----------------------------------------------------------------------
    async def accept(self, face: str, keys: Sequence[str], payload: dict[str, Any], *, capped: bool = True) -> Accepted:
        """Persist an inbound item with its dedup keys and its job, before the face answers its
        caller. ``capped``: under the policy's queue cap (``full``: nothing stored, retry later)."""
        if capped:
            return await self._runtime.accept_inbound(face, keys, payload)
        return await self._runtime.s.inbox.accept(face, keys, payload)

    @property
    def retry_after_s(self) -> int:
        """How long a caller turned away by a full queue is told to wait."""
        return int(self._runtime.s.policy.inbound.retry_after_s)

    def item(self, item: Inbound) -> InboundItem:
        return InboundItem(self, item)

    async def inbound(self, inbound_id: str) -> Inbound | None:
        return await self._runtime.s.inbox.get(inbound_id)

    async def take_message(self, **kwargs: Any) -> TurnResult | None:
        """:meth:`Runtime.take_message` (a user's message, stored once under ``message_key``)."""
        return await self._runtime.take_message(**kwargs)

    async def chat(self, **kwargs: Any) -> TurnResult:
        return await self._runtime.chat(**kwargs)

    async def delivered(self, result: TurnResult) -> None:
        """The reply reached its person: its confirmations count as shown."""
        await self._runtime.delivered(result)

    async def mark_shown(self, confirmation_ids: Sequence[str]) -> None:
        await self._runtime.mark_shown(confirmation_ids)

    # -- outbound, once --------------------------------------------------------------------
    async def once(self, key: str, send: Send, *, release: Callable[[Exception], bool] | None = None) -> Once:
        """``send()`` unless ``key`` went out before (or is being sent by a live process). A
        failed ``send`` gives the key back for a retry, unless ``release(exc)`` says part of
        it went out (then the key stays claimed and the rest is not sent twice)."""
        deliveries = self._runtime.s.deliveries
        state = await deliveries.begin(key)
        if state == "sent":
            return Once(state=state, ref=await deliveries.ref(key))
        if state == "busy":
            return Once(state=state)
        try:
            ref = await send()
        except Exception as exc:
            if release is None or release(exc):
                await deliveries.release(key)
            raise
        await deliveries.sent(key, ref)
        return Once(state="go", ref=ref)

    # -- threads bound to an account (a rep's assist thread) ---------------------------------
    async def bind(self, ref: str, *, customer_id: str, staff_id: str) -> ThreadBinding:
        return await self._runtime.s.bindings.bind(ref, customer_id=customer_id, staff_id=staff_id)

    async def binding(self, ref: str) -> ThreadBinding | None:
        return await self._runtime.s.bindings.get(ref)

    async def bindings_of(self, staff_id: str) -> list[ThreadBinding]:
        return await self._runtime.s.bindings.of_staff(staff_id)

    # -- people ------------------------------------------------------------------------------
    async def identify(self, provider: str, external_id: str) -> Identity | None:
        """Who ``external_id`` is on ``provider`` (signoff's own directory)."""
        return await self._runtime.s.people.identify(provider, external_id)

    async def staff(self, staff_id: str) -> Staff | None:
        return await self._runtime.s.people.staff(staff_id)

    # -- the human gates ---------------------------------------------------------------------
    async def confirm(
        self, confirmation_id: str, *, actor: Principal, accept: bool, via: Via, deliver_later: bool = False
    ) -> ConfirmResult:
        return await self._runtime.confirm(
            confirmation_id, actor=actor, accept=accept, via=via, deliver_later=deliver_later
        )

    async def decide(
        self,
        approval_id: str,
        *,
        expected_version: int,
        decision: str,
        actor: Principal,
        via: dict[str, str],
        comment: str | None = None,
    ) -> DecideResult:
        return await self._runtime.decide(
            approval_id, expected_version=expected_version, decision=decision, actor=actor, comment=comment, via=via
        )

    async def confirmation(self, confirmation_id: str) -> Confirmation | None:
        return await self._runtime.s.confirmations.get(confirmation_id)

    async def approval(self, approval_id: str) -> Approval | None:
        return await self._runtime.s.approvals.get(approval_id)

    async def pending_approvals(self, *, limit: int = 20) -> list[Approval]:
        return await self._runtime.s.approvals.list_approvals(status="pending", limit=limit)

    async def approvals(self, *, status: str | None, limit: int) -> list[Approval]:
        """Approvals, newest first, of one ``status`` or all (the HTTP API's list)."""
        return await queries.list_approvals(self._runtime, status=status, limit=limit)

    async def conversation_view(self, viewer: Principal, conversation_id: str) -> queries.ConversationView | None:
        """The conversation rendered for people, if ``viewer`` may see it."""
        return await queries.conversation_view(self._runtime, viewer, conversation_id)

    async def show_confirmation(self, confirmation_id: str, face: str, ref: dict[str, Any]) -> None:
        """Where ``face`` shows the confirmation's card (redrawn there when it moves on)."""
        await self._runtime.s.confirmations.set_surface(confirmation_id, face, ref)

    async def show_approval(self, approval_id: str, face: str, ref: dict[str, Any]) -> None:
        """Where ``face`` shows the approval's card (redrawn there when it moves on)."""
        await self._runtime.s.approvals.set_surface(approval_id, face, ref)

    # -- conversations -------------------------------------------------------------------------
    def may_see(self, principal: Principal, conv: Conversation) -> bool:
        return self._runtime.may_see(principal, conv)

    async def conversation(self, conversation_id: str) -> Conversation | None:
        return await self._runtime.s.conversations.get(conversation_id)

    async def visible_conversation(self, viewer: Principal, conversation_id: str) -> Conversation | None:
        """The conversation when ``viewer`` may see it, else ``None`` (as if it did not exist)."""
        return await queries.visible_conversation(self._runtime, viewer, conversation_id)

    async def open_conversation(self, **kwargs: Any) -> Conversation:
        """:meth:`Host.open_conversation` (a face that threads conversations itself: email)."""
        return await self._runtime.open_conversation(**kwargs)

    async def pending_confirmations(self, conversation_id: str, principal_key: str) -> list[Confirmation]:
        return await queries.pending_confirmations(self._runtime, conversation_id, principal_key)

    async def set_face_meta(self, conversation_id: str, face: str, value: dict[str, Any]) -> None:
        """Keep ``value`` as the conversation's ``meta[face]`` (where follow-ups go); unchanged → no write."""
        conv = await self._runtime.s.conversations.get(conversation_id)
        if conv is not None and conv.meta.get(face) != value:
            await self._runtime.s.conversations.set_meta(conversation_id, {**conv.meta, face: value})

    async def turn_state(self, conversation_id: str, run_id: str) -> TurnState:
        return await self._runtime.s.conversations.turn_state(conversation_id, run_id)

    def tool(self, name: str) -> ToolDef | None:
        return self._runtime.s.registry.get(name)

    # -- what faces audit -------------------------------------------------------------------------
    async def face_event(
        self,
        kind: str,
        data: dict[str, Any],
        *,
        principal: str | None = None,
        budget: AuditBudget | None = None,
        person: str | None = None,
        channel: str = "",
    ) -> bool:
        """One audit event a face saw (a click, a binding, a link, a compliance request).
        With ``budget``: within ``person``'s share of it (a click that changes nothing), past it
        only counted. True when appended."""
        event = AuditEvent(kind=kind, principal=principal, data=data, ts=self.clock())
        if budget is not None:
            s = self._runtime.s
            return await budget.append(s.db, s.audit, event, person=person or "", channel=channel)
        await self._runtime.s.audit.append(event)
        return True

    async def click_event(
        self,
        click: ClickSeen,
        *,
        refused: ClickRefusal | None = None,
        by: str | None = None,
        budget: AuditBudget | None = None,
    ) -> bool:
        """A click, audited in one shape by every face: ``click.decided`` (the decision went
        through, by principal ``by``) or ``click.refused`` (``refused`` says why; it changed
        nothing, so it is audited within the clicker's share of ``budget``). Data: ``face``,
        ``action``, ``target``, ``user``, ``team`` (and ``reason``). True when appended."""
        data: dict[str, Any] = {
            "face": click.face,
            "action": click.action,
            "target": click.target,
            "user": click.user,
            "team": click.team,
        }
        if refused is None:
            return await self.face_event("click.decided", data, principal=by or click.who)
        return await self.face_event(
            "click.refused",
            {**data, "reason": refused},
            principal=click.who,
            budget=budget,
            person=click.who,
            channel=click.face,
        )

    def mailbox(self) -> SentMail:
        """The Message-IDs the email face sent (a reply finds its conversation by them)."""
        return SentMail(self._runtime.s.db)

    # -- the shop's own records (the Shopify webhooks face) -----------------------------------------
    def customer_data(self) -> CustomerData:
        """What signoff holds on customers (export, redaction)."""
        return CustomerData(self._runtime.s.db)

    async def record_outside_action(self, action: StaffAction, *, source: str) -> bool:
        """A staff action made outside signoff (the shop's admin), counted towards the limits."""
        return await OutsideActions(self._runtime.s.db).record(action, source=source)


__all__ = ["ClickAction", "ClickRefusal", "ClickSeen", "FacePort", "InboundItem", "Once", "Send"]
