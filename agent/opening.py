"""A user message's turn, opened in one write (see :mod:`storage.opening`).

The conversation is resolved first (a read; a new one is only drafted), then the lease is
taken with the opening as its first write: the limits checked, the conversation created, the
run started, the message stored and what the turn reads loaded, in one transaction.
"""

from __future__ import annotations

import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from typing import Any

from agent.errors import DecisionError
from agent.history import new_id, sanitize_user_text
from agent.host import Host, groups_of, run_event
from agent.policy import Policy
from agent.prompt import PROMPT_VERSION
from agent.turn import Turn
from storage.handoffs import Handoff
from storage.limits import OverLimit
from storage.opening import ConversationTaken, Opened, Opening, new_run, open_turn
from storage.records import Confirmation, Conversation
from storage.steps import ConcurrentTurn, StepWrite
from tools.context import Principal

#: Openings tried before a lost race is the caller's (each attempt wrote nothing).
_ATTEMPTS = 3


@dataclass(frozen=True, kw_only=True)
class MessageTurn:
    """A message's turn once opened: ``turn`` with the message stored, unless a person owns
    the conversation (``handoff``) or the message was stored before (``owed``); either way
    the conversation's lease is held until the caller's exit stack closes."""

    conversation: Conversation
    acting: Principal
    turn: Turn | None = None
    handoff: Handoff | None = None
    owed: bool = False
    #: The conversation's pending confirmations, read with the opening.
    waiting: tuple[Confirmation, ...] = ()


async def open_message_turn(
    host: Host,
    stack: AsyncExitStack,
    *,
    principal: Principal,
    channel: str,
    message: str,
    conversation_id: str | None,
    external_ref: str | None,
    meta: dict[str, Any] | None,
    message_key: str | None,
) -> MessageTurn:
    """Open ``message``'s turn with the conversation's lease held on ``stack`` (see
    :meth:`agent.runtime.Runtime.take_message` for what a message may meet)."""
    conv = await host.find_conversation(principal, conversation_id=conversation_id, external_ref=external_ref)
    create = conv is None
    if conv is None:
        conv = host.s.conversations.draft(**host.new_conversation(principal, channel, external_ref, meta))
    for attempt in range(1, _ATTEMPTS + 1):
        if principal.is_staff and conv.principal_kind == "customer":
            # Staff read customers' conversations but never speak inside them as the customer.
            raise DecisionError("forbidden", "Staff work in their own assist conversation on this account.")
        acting = host.acting_principal(conv, principal)
        policy = host.s.policy  # read once: the version a run started now pins
        opening = _opening(host, conv, create, principal, acting, policy, message, message_key)
        try:
            opened = await stack.enter_async_context(host.lock(conv.id, first=partial(open_turn, o=opening)))
        except OverLimit as over:
            raise host.refusal(principal, over) from None
        except ConversationTaken:
            # Another process stored this external_ref's conversation first: the turn is in it.
            found = await host.find_conversation(principal, conversation_id=None, external_ref=external_ref)
            if found is None:
                raise
            conv, create = found, False
            continue
        except ConcurrentTurn:
            if attempt == _ATTEMPTS:
                raise
            continue
        assert opened is not None
        return await _turn(host, opening, opened, acting, policy, message)
    raise AssertionError("unreachable")


def _opening(
    host: Host,
    conv: Conversation,
    create: bool,
    principal: Principal,
    acting: Principal,
    policy: Policy,
    message: str,
    message_key: str | None,
) -> Opening:
    s = host.s
    allowance = host.allowance(principal, conversations=create)
    counted = host.allowance(acting, tokens=False)
    same = (counted.kind, counted.ident, counted.customer_id, counted.group) == (
        allowance.kind,
        allowance.ident,
        allowance.customer_id,
        allowance.group,
    )
    run_id = new_id("run")
    return Opening(
        conversation=conv,
        create=create,
        allowance=allowance,
        acting=None if same else counted,
        new_run=new_run(
            id=run_id,
            conversation_id=conv.id,
            model=s.model.model_name,
            prompt_version=PROMPT_VERSION,
            policy_version=policy.version,
            trace_id=uuid.uuid4().hex,
        ),
        run_audit=[run_event(run_id, acting, policy.version, s.model.model_name, s.clock())],
        message=StepWrite(
            conversation_id=conv.id,
            messages=[("user", [{"type": "text", "text": sanitize_user_text(message)}])],
            run_status="running",
            loaded_groups=sorted(groups_of(conv, message)),
            event_key=message_key,
        ),
        now=s.conversations.stamp(),
    )


async def _turn(
    host: Host, opening: Opening, opened: Opened, acting: Principal, policy: Policy, message: str
) -> MessageTurn:
    conv = opening.conversation
    if opened.handoff is not None or opened.owed:
        return MessageTurn(conversation=conv, acting=acting, handoff=opened.handoff, owed=opened.owed)
    run, state = opened.run, opened.state
    assert run is not None and state is not None
    if run.id != opening.new_run.id:
        policy = await host.s.pinned_policy(run.policy_version)
    turn = host.turn_of(conv, acting, run, policy, state, opened.tokens_today, first_message=message)
    turn.written(opening.message, opened.next_seq)
    return MessageTurn(conversation=conv, acting=acting, turn=turn, waiting=tuple(opened.waiting or ()))


__all__ = ["MessageTurn", "open_message_turn"]
