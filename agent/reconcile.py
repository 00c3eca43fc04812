"""Reconciling stuck ledger claims while everything runs, and finishing what they held up.

A keyed action runs under its conversation's lease: claim the key, call the backend, settle.
A fault between the call and the settle (the database restarting or read-only, a terminated
connection, the process dying, a backend's ambiguous 5xx whose lookup failed too) can leave the
claim ``executing`` with nobody finishing it. The worker's periodic pass (:func:`reconcile_stuck`)
takes each claim older than the bound (or whose holder is known dead) and, only when it can
take the conversation's lease (so no live turn is still on it — a stopped replica keeps its
lease and is left alone), resolves it with the backend's own record of the key
(``CommerceBackend.lookup_write``, the same check for every backend): settled as done when the
shop shows the effect, released for one retry when it does not, routed to a person when a
non-retryable call left no record. Then the conversation gets the true outcome: an action a
person settled is carried out (or found done) through its confirmation or approval; a model
turn is taken over and finished; a turn that had already answered is told through
:mod:`agent.continuation`. Each result is announced for the metrics.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from agent import continuation, gates, steps
from agent.executor import ExecOutcome
from agent.host import Host
from agent.loop import run_loop
from agent.outcomes import TurnResult
from agent.runtime import Runtime
from agent.services import Services
from agent.wording import RECONCILED_EVENT
from storage.audit import AuditEvent
from storage.locks import LockBusy
from storage.records import Conversation, LedgerEntry, Proposal, Run
from tools.context import Principal

log = logging.getLogger(__name__)

#: How a stuck claim ended: ``done`` (the shop shows it), ``released`` (it never happened: one
#: retry), ``needs_human``, ``held`` (a live holder keeps the lease), ``settled`` (its holder
#: finished it meanwhile), ``orphan`` (no proposal or tool to judge it by), ``failed`` (an error,
#: logged: the next pass tries again).
Result = Literal["done", "released", "needs_human", "held", "settled", "orphan", "failed"]

#: How long the pass waits for a conversation's lease before leaving the claim to its holder.
LEASE_WAIT_S = 0.25


@dataclass(frozen=True, kw_only=True)
class Reconciled:
    """One stuck claim and what the pass made of it."""

    key: str
    result: Result


async def reconcile_stuck(rt: Runtime, *, older_than_s: float, lease_wait_s: float = LEASE_WAIT_S) -> list[Reconciled]:
    """Resolve every claim ``executing`` longer than ``older_than_s`` (or whose holder died) that no
    live turn holds, and tell each conversation its true outcome (see the module docstring)."""
    s = rt.s
    stuck = await stuck_claims(s, older_than_s=older_than_s)
    s.db.announce([AuditEvent(kind="ledger.stuck", data={"count": len(stuck)})])
    done: list[Reconciled] = []
    for entry in stuck:
        try:
            result = await reconcile_entry(rt, entry, lease_wait_s=lease_wait_s)
        except Exception as exc:
            if s.db.fault(exc) is not None:
                raise  # the database is gone again: the whole pass waits for the next period
            log.exception("reconciling ledger %s failed", entry.key)
            result = "failed"
        if result != "held":
            log.info("reconciled ledger %s (%s): %s", entry.key, entry.tool, result)
        s.db.announce([AuditEvent(kind="ledger.reconciled", idempotency_key=entry.key, data={"result": result})])
        done.append(Reconciled(key=entry.key, result=result))
    return done


async def stuck_claims(s: Services, *, older_than_s: float) -> list[LedgerEntry]:
    """The claims ``executing`` longer than ``older_than_s`` (or whose holder died): one read of the
    ledger's in-flight rows (a handful), cheap enough for every ``/metrics`` scrape."""
    cutoff = s.clock() - timedelta(seconds=older_than_s)
    return [e for e in await s.ledger.in_flight() if s.ledger.abandoned(e, older_than=cutoff)]


async def reconcile_entry(rt: Runtime, entry: LedgerEntry, *, lease_wait_s: float = LEASE_WAIT_S) -> Result:
    """Resolve one ``executing`` claim under its conversation's lease, then tell the conversation."""
    s = rt.s
    tool = s.registry.get(entry.tool)
    prop = await s.conversations.get_proposal(entry.proposal_id) if entry.proposal_id else None
    conv = await s.conversations.get(prop.conversation_id) if prop else None
    run = await s.conversations.get_run(prop.run_id) if prop else None
    if tool is None or prop is None or conv is None or run is None:
        return "orphan"
    reply: TurnResult | None = None
    try:
        async with rt.lock(conv.id, wait_s=lease_wait_s):
            fresh = await s.ledger.get(entry.key)
            if fresh is None or fresh.status != "executing":
                return "settled"
            turn = await rt.turn(conv, Principal.from_key(prop.principal, conv.customer_id), run=run)
            base = turn.event("execution", proposal_id=prop.id, tool=prop.tool, args_hash=prop.args_hash)
            outcome = await s.executor.reconcile(fresh, tool, steps.tool_context(turn, prop.id), audit=base)
            if outcome.needs_human:
                await gates.escalate(turn, "needs_human", f"{entry.tool} with key {entry.key} may have run; check it.")
            if prop.decision is not None:
                reply = await _tell(rt, conv, prop, outcome)
    except LockBusy:
        return "held"
    if reply is not None:
        await continuation.deliver(rt, conv, reply)
    elif prop.decision is None:
        await finish(rt, prop)
    return "done" if not outcome.is_error else ("released" if outcome.released else "needs_human")


async def _tell(rt: Host, conv: Conversation, prop: Proposal, outcome: ExecOutcome) -> TurnResult | None:
    """The turn recorded an outcome before the claim was settled (its settle went to the
    background): tell the agent what the shop shows, once, when it differs from what it was told."""
    if outcome.is_error == prop.is_error and not outcome.released:
        return None
    if outcome.released:
        text = RECONCILED_EVENT.format(tool=prop.tool, outcome="it did not go through; nothing was done")
    else:
        text = RECONCILED_EVENT.format(tool=prop.tool, outcome=f"it went through: {outcome.result}"[:1500])
    turn = await rt.turn(conv, _principal(conv))
    return await continuation.with_event(turn, text, key=f"reconciled:{prop.id}")


async def finish(rt: Runtime, prop: Proposal) -> None:
    """A proposal whose decision a fault or a crash interrupted: finish it the way a live request
    would (the whole gate, the ledger's key, the outcome told once)."""
    kind, _, origin_id = (prop.origin or "").partition(":")
    if kind == "confirmation":
        await rt.carry_out_confirmation(origin_id, deliver=True)
    elif kind == "approval":
        await rt.resume(origin_id)
    elif kind == "edit":
        conv = await rt.s.conversations.get(prop.conversation_id)
        run = await rt.s.conversations.get_run(prop.run_id)
        if conv is None or run is None:
            return
        async with rt.lock(conv.id):
            turn = await rt.turn(conv, Principal.from_key(prop.principal, conv.customer_id), run=run)
            await rt.apply(turn, tool=prop.tool, args=prop.arguments, origin=prop.origin or "", proposal_id=prop.id)
    else:
        run = await rt.s.conversations.get_run(prop.run_id)
        conv = await rt.s.conversations.get(prop.conversation_id)
        if run is not None and conv is not None and run.status == "running":
            reply = await finish_run(rt, conv, run)
            await continuation.deliver(rt, conv, reply)


async def finish_run(rt: Host, conv: Conversation, run: Run) -> TurnResult | None:
    """Take over a run a crash or a fault left ``running`` and let the agent complete its reply."""
    s = rt.s
    async with rt.lock(conv.id):
        if not await s.conversations.take_over_run(run):
            return None  # finished meanwhile, or another process took it over
        fresh = await s.conversations.get_run(run.id) or run
        turn = await rt.turn(conv, _principal(conv), run=fresh)
        return await run_loop(turn)


def _principal(conv: Conversation) -> Principal:
    return Principal(kind=conv.principal_kind, id=conv.principal_id, customer_id=conv.customer_id)  # type: ignore[arg-type]


__all__ = [
    "LEASE_WAIT_S",
    "Reconciled",
    "Result",
    "finish",
    "finish_run",
    "reconcile_entry",
    "reconcile_stuck",
    "stuck_claims",
]
