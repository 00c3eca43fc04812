"""The one runtime every face calls: chat, confirm, decide, resume.

Slack, Teams, the HTTP API, email, the CLI and the worker are thin layers over these
methods; none of them decides anything itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any

from agent import approvals as approval_flow
from agent import confirmations, continuation, handoff
from agent.boundary import translated
from agent.confirmations import Answer, AskWhich, ConfirmResult, Via
from agent.errors import DecisionError
from agent.history import event_block
from agent.host import Host
from agent.loop import run_loop
from agent.opening import open_message_turn
from agent.outcomes import Pending, TurnResult
from agent.settled import ApplyResult
from agent.turn import Turn
from agent.wording import ASKED_WHICH_EVENT, confirmation_notice, which_one
from storage.records import Confirmation, Conversation
from storage.steps import StepWrite
from tools.context import Principal


class Runtime(Host):
    """The faces' verbs over the durable state (see :class:`~agent.host.Host`)."""

    async def chat(
        self,
        *,
        principal: Principal,
        channel: str,
        message: str,
        conversation_id: str | None = None,
        external_ref: str | None = None,
        deliver_later: bool = False,
    ) -> TurnResult:
        """One user message (see :meth:`take_message`), answered now."""
        result = await self.take_message(
            principal=principal,
            channel=channel,
            message=message,
            conversation_id=conversation_id,
            external_ref=external_ref,
            deliver_later=deliver_later,
        )
        assert result is not None  # without a message key every message is new
        return result

    @translated
    async def take_message(
        self,
        *,
        principal: Principal,
        channel: str,
        message: str,
        conversation_id: str | None = None,
        external_ref: str | None = None,
        deliver_later: bool = False,
        message_key: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> TurnResult | None:
        """One user message: stored first, then a typed answer to a waiting confirmation is
        settled by the runtime, anything else goes to the agent.

        The result's confirmations count as shown to the principal when this returns (the
        face delivers the reply synchronously); a face that delivers later passes
        ``deliver_later`` and calls :meth:`delivered` once the reply went out.

        ``message_key`` names the message once and for all (a face's inbound id): when the
        conversation already holds it, the message is not stored again and the answer owed to
        it is returned instead — finished now if the process that was answering died, rebuilt
        from the history if it was answered, ``None`` if a live process is still on it.

        A customer over a per-customer limit of the policy (new conversations per hour, model
        tokens per day) is refused with :class:`~agent.errors.LimitExceeded` before anything
        is stored."""
        async with AsyncExitStack() as stack:
            # One write: limits, conversation, lease, run, the user's words durable before
            # anything acts on them (agent.opening).
            opened = await open_message_turn(
                self,
                stack,
                principal=principal,
                channel=channel,
                message=message,
                conversation_id=conversation_id,
                external_ref=external_ref,
                meta=meta,
                message_key=message_key,
            )
            conv, acting = opened.conversation, opened.acting
            if opened.handoff is not None:
                # A person owns the conversation: the message goes to them, the agent says nothing.
                return await handoff.hold_message(self.s, conv, opened.handoff, message, message_key=message_key)
            if opened.owed:
                assert message_key is not None  # only a keyed message can have been stored before
                return await self._answer_owed(conv, acting, message_key)
            assert opened.turn is not None
            result = await self._respond(conv, acting, opened.turn, message, opened.waiting)
        if not deliver_later:
            await self.delivered(result)
        return result

    async def _respond(
        self, conv: Conversation, acting: Principal, turn: Turn, message: str, pending: Sequence[Confirmation]
    ) -> TurnResult:
        """The stored message's answer: a typed answer to a waiting confirmation is settled by the
        runtime (or, ambiguous, the runtime asks which); anything else goes to the agent."""
        waiting = [c for c in pending if c.principal == acting.key]
        codes_only = conv.channel in confirmations.CODE_ONLY_CHANNELS
        match confirmations.read_reply(message, waiting, codes_only=codes_only):
            case Answer(confirmation=conf, accept=accept, via=via):
                settled = await confirmations.answer(self, conv, acting, conf, accept, via=via)
                return settled.turn or await run_loop(await self.turn(conv, acting))
            case AskWhich(waiting=several):
                return await self._ask_which(turn, message, list(several))
            case None:
                return await run_loop(turn)

    async def _answer_owed(self, conv: Conversation, acting: Principal, message_key: str) -> TurnResult | None:
        """The answer to a message the conversation already holds (see :meth:`chat`)."""
        s = self.s
        found = await s.conversations.event_at(conv.id, message_key)
        if found is None:
            return None
        seq, run_id = found
        run = await s.conversations.get_run(run_id) if run_id else None
        if run is None:
            return None
        if run.status == "running":
            if not s.conversations.abandoned(run) or not await s.conversations.take_over_run(run):
                return None  # a live process is answering it
            fresh = await s.conversations.get_run(run.id) or run
            return await run_loop(await self.turn(conv, acting, run=fresh))
        history = await s.conversations.history(conv.id)
        said = [m for m in history if m.seq > seq and m.role == "assistant" and m.run_id == run.id]
        if not said:
            return None
        answer = "\n\n".join(b.get("text", "") for b in said[-1].content if b.get("type") == "text").strip()
        waiting = [
            c for c in await s.confirmations.pending(conv.id) if c.run_id == run.id and c.principal == acting.key
        ]
        notice = (
            confirmation_notice([(c.summary, c.code) for c in waiting], principal_kind=acting.kind) if waiting else ""
        )
        return TurnResult(
            conversation_id=conv.id,
            run_id=run.id,
            reply="\n\n".join(x for x in (answer, notice) if x),
            answer=answer,
            notice=notice,
            iterations=0,
            input_tokens=0,
            output_tokens=0,
            pending=tuple(Pending(kind="confirmation", id=c.id, summary=c.summary, code=c.code) for c in waiting),
            outcome="answered",
            seq=history[-1].seq,
        )

    async def _ask_which(self, turn: Turn, message: str, waiting: list[Confirmation]) -> TurnResult:
        """A bare yes/no the runtime cannot bind to one shown confirmation: the runtime itself
        lists them with their codes (no model call), and the agent learns it asked."""
        who = "customer" if turn.principal.kind == "customer" else "rep"
        items = [(c.summary, c.code) for c in waiting]
        event = ASKED_WHICH_EVENT.format(
            who=who, text=message.strip()[:40], actions="; ".join(c.summary for c in waiting)
        )
        await turn.commit(
            StepWrite(
                conversation_id=turn.conversation.id,
                run_id=turn.run.id,
                messages=[("user", [event_block(event)])],
                run_status="waiting",
            )
        )
        text = which_one(message, items)
        return TurnResult(
            conversation_id=turn.conversation.id,
            run_id=turn.run.id,
            reply=text,
            notice=text,
            iterations=0,
            input_tokens=0,
            output_tokens=0,
            outcome="asked",
            pending=tuple(Pending(kind="confirmation", id=c.id, summary=c.summary, code=c.code) for c in waiting),
            seq=turn.history[-1].seq if turn.history else None,
        )

    # -- confirmations ----------------------------------------------------------------
    @translated
    async def confirm(
        self, confirmation_id: str, *, actor: Principal, accept: bool, via: Via = "api", deliver_later: bool = False
    ) -> ConfirmResult:
        """Answer a confirmation by id (an API call, a button). Answering again the same way
        returns the stored outcome; only the principal it was proposed to may answer.
        (``deliver_later``: as for :meth:`chat`.)"""
        conf = await self.s.confirmations.get(confirmation_id)
        if conf is None:
            raise DecisionError("not_found", "No such confirmation.")
        conv = await self.s.conversations.get(conf.conversation_id)
        assert conv is not None
        if not self.may_see(actor, conv):  # acting_principal() adopts the conversation's identity: check first
            raise DecisionError("not_found", "No such confirmation.")
        acting = self.acting_principal(conv, actor)
        if conf.principal != acting.key:
            raise DecisionError("forbidden", "Only the person this action was proposed to can confirm it.")
        async with self.lock(conv.id):
            fresh = await self.s.confirmations.get(confirmation_id)
            assert fresh is not None
            settled = await confirmations.answer(self, conv, acting, fresh, accept, via=via)
        if settled.turn is not None and not deliver_later:
            await self.delivered(settled.turn)
        return settled

    @translated
    async def carry_out_confirmation(self, confirmation_id: str, *, deliver: bool = False) -> TurnResult | None:
        """Finish an answered confirmation a crash interrupted (the worker's job); idempotent.
        With ``deliver``, the agent's answer goes to the conversation's face."""
        conf = await self.s.confirmations.get(confirmation_id)
        if conf is None:
            return None
        async with self.lock(conf.conversation_id):
            reply = await confirmations.carry_out(self, confirmation_id)
        conv = await self.s.conversations.get(conf.conversation_id)
        if deliver and conv is not None:
            await continuation.deliver(self, conv, reply)
        return reply

    # -- approvals (the one decision function lives in agent.approvals) -----------------
    @translated
    async def decide(
        self,
        approval_id: str,
        *,
        expected_version: int,
        decision: str,
        actor: Principal,
        comment: str | None = None,
        edited_arguments: dict[str, Any] | None = None,
        via: dict[str, str] | None = None,
    ) -> approval_flow.DecideResult:
        return await approval_flow.decide(
            self,
            approval_id,
            expected_version=expected_version,
            decision=decision,
            actor=actor,
            comment=comment,
            edited_arguments=edited_arguments,
            via=via,
        )

    @translated
    async def resume(self, approval_id: str) -> TurnResult | None:
        return await approval_flow.resume(self, approval_id)

    async def expire_stale(self) -> int:
        return await approval_flow.expire_stale(self)


__all__ = ["ApplyResult", "ConfirmResult", "Runtime"]
