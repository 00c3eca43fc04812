"""What each of the loop's steps does to a turn: answer, run tools, give up, repair.

Running tools is: persist the proposals, judge each (the gatekeeper, or the ledger
for a proposal a crash interrupted), act on the decision (open a confirmation or an
approval, execute behind the ledger, refuse), persist the results. Nothing a tool or
a check does escapes as an exception: an unexpected failure is an ``is_error`` result.
"""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from agent import gates, shadow
from agent.decisions import Decision, Execute, Intercept, NeedsApproval, NeedsConfirmation, Record, Reject
from agent.executor import ExecOutcome
from agent.gatekeeper import Proposed, args_hash
from agent.history import blocks_of, new_id, tool_result
from agent.llm.base import Block, ModelResponse, ToolUseBlock, is_tool_use
from agent.notify import best_effort
from agent.outcomes import Pending, TurnResult
from agent.run_control import TurnControl, TurnDesk
from agent.turn import Turn
from agent.wording import GIVE_UP_REPLY, REFUSAL_REPLY
from storage.audit import AuditEvent
from storage.locks import LockBusy
from storage.records import Approval, Proposal
from storage.steps import ConcurrentTurn, LostRace, NewProposal, ProposalOutcome
from tools.context import ToolContext

log = logging.getLogger(__name__)

#: (result, is_error, idempotency key) of one proposal.
Acted = tuple[Any, bool, str | None]


@dataclass(frozen=True)
class Finished:
    """The model called ``finish`` and the runtime verified it: the turn is over."""


@dataclass(frozen=True)
class Ran:
    """The tools ran; the model speaks next."""


# -- answering ---------------------------------------------------------------------------


async def answer(turn: Turn, response: ModelResponse) -> TurnResult:
    """The model answered in text: store it, the turn ends."""
    content = response.content or [{"type": "text", "text": "…"}]
    usage = turn.count(response)
    await turn.commit(
        turn.step(
            messages=[("assistant", content)],
            usage=usage,
            run_status=turn.status_after(),
            run_steps_delta=turn.flush_steps(1),
            audit=[turn.ended("answered")],
        )
    )
    turn.replies.append(response.text)
    return turn.result("answered")


async def partial(turn: Turn, response: ModelResponse) -> None:
    """``pause_turn``: store what the provider sent; it goes back as it is."""
    usage = turn.count(response)
    await turn.commit(
        turn.step(messages=[("assistant", response.content)], usage=usage, run_steps_delta=turn.flush_steps(1))
    )


async def refused(turn: Turn, response: ModelResponse) -> TurnResult:
    """The model refused: store its words, hand the case to a person."""
    content = response.content or [{"type": "text", "text": REFUSAL_REPLY}]
    usage = turn.count(response)
    await turn.commit(
        turn.step(
            messages=[("assistant", content)],
            usage=usage,
            run_steps_delta=turn.flush_steps(1),
            audit=[turn.ended("refused")],
            run_status="escalated",
        )
    )
    await gates.escalate(turn, "model_refusal", "The model declined to continue this conversation.")
    turn.replies.append(response.text or REFUSAL_REPLY)
    return turn.result("refused")


async def give_up(turn: Turn, *, reason: str, detail: str) -> TurnResult:
    """An honest reply, the user's message kept, and the case handed to a person."""
    step = turn.step(
        run_status="escalated",
        audit=[turn.event("run.gave_up", data={"reason": reason, "detail": detail[:200]}), turn.ended("gave_up")],
    )
    if turn.history and turn.history[-1].role == "user":
        step.messages.append(("assistant", [{"type": "text", "text": GIVE_UP_REPLY}]))
    await turn.commit(step)
    await gates.escalate(turn, reason, f"The agent stopped: {detail[:200]}")
    turn.replies.append(GIVE_UP_REPLY)
    return turn.result("gave_up")


def finished(turn: Turn) -> TurnResult:
    """The turn's result after a verified ``finish``."""
    turn.replies.append(turn.rationale or (turn.finished or {}).get("resolution", ""))
    return turn.result("finished")


# -- running tools ------------------------------------------------------------------------


async def run_tools(turn: Turn, response: ModelResponse | None, uses: list[ToolUseBlock]) -> Finished | Ran:
    """Persist the proposals, judge and act on each, persist the results. ``response``
    is ``None`` when repairing a history whose tool calls were never answered."""
    known = await _known(turn, response, uses)
    turn.facts.step += 1
    new = [
        NewProposal(
            id=new_id("prop"),
            tool_use_id=str(u["id"]),
            tool=str(u.get("name", ""))[:64],
            arguments=u.get("input"),
            args_hash=args_hash(str(u.get("name")), u.get("input")),
            principal=turn.principal.key,
            step=turn.facts.step,
            policy_version=turn.policy.version,
        )
        for u in uses
        if u["id"] not in known
    ]
    step = turn.step(
        new_proposals=new,
        audit=[turn.event("proposal", proposal_id=p.id, tool=p.tool, args_hash=p.args_hash) for p in new],
    )
    if response is not None:
        step.messages.append(("assistant", response.content))
        step.usage = turn.count(response)
        turn.rationale = response.text
    # Reads only: the proposals commit with their results, in the step's one write.
    proposed = step if response is not None and _reads_only(turn, uses) else None
    if proposed is None:
        await turn.commit(step)
    ids = {p.tool_use_id: p.id for p in new} | {k: v.id for k, v in known.items()}
    results: list[Block] = []
    outcomes: list[ProposalOutcome] = []
    audit: list[AuditEvent] = []
    for use in uses:
        prior = known.get(use["id"])
        if prior is not None and prior.decision is not None:
            result, is_error = prior.result, prior.is_error
        else:
            result, is_error, outcome, event = await handle(turn, use, ids[use["id"]], repairing=response is None)
            outcomes.append(outcome)
            audit.append(event)
        results.append(tool_result(use["id"], result, is_error))
    done = turn.finished is not None
    step = turn.step(
        messages=[("user", results)],
        outcomes=outcomes,
        audit=audit + ([turn.ended("finished")] if done else []),
        run_status="completed" if done else ("escalated" if turn.escalated else None),
    )
    if proposed is not None:
        step.messages[:0] = proposed.messages
        step.new_proposals, step.usage, step.audit = proposed.new_proposals, proposed.usage, proposed.audit + step.audit
    turn.step_done(step, final=done or turn.escalated)
    await turn.commit(step)
    return Finished() if done else Ran()


def _reads_only(turn: Turn, uses: list[ToolUseBlock]) -> bool:
    """Every call is to a read (no effect the step's own write does not record): a crash before
    that one write is a crash during the model call — nothing was done, the model is asked again."""
    tools = turn.services.registry.tools
    return all((t := tools.get(str(u.get("name")))) is not None and t.meta.kind == "read" for u in uses)


async def _known(turn: Turn, response: ModelResponse | None, uses: list[ToolUseBlock]) -> dict[str, Proposal]:
    """Only a repair (no fresh response) can meet proposals that already exist."""
    if response is not None:
        return {}
    return await turn.services.conversations.proposals_by_tool_use(turn.conversation.id, [u["id"] for u in uses])


async def handle(
    turn: Turn, use: ToolUseBlock, proposal_id: str, *, repairing: bool = False
) -> tuple[Any, bool, ProposalOutcome, AuditEvent]:
    """Judge one proposal and act on the decision; its outcome and its gate audit event."""
    name, args = str(use.get("name", "")), use.get("input")
    proposed = Proposed(tool=name, args=args, hash=args_hash(name, args))
    ctx = tool_context(turn, proposal_id)
    try:
        decision = await decide(turn, proposed, proposal_id, ctx, resumed=repairing)
        # Only an execution moves money: it is judged again, and carried out, under the
        # customer's money lock. Any other verdict moves nothing now, and the action it leads
        # to (confirmed, approved) is judged again under the lock when it is carried out.
        locked = isinstance(decision, Execute) and moves_money(turn, name)
        async with money_lock(turn, name) if locked else nullcontext():
            if locked:
                decision = await decide(turn, proposed, proposal_id, ctx, resumed=repairing)
            result, is_error, key = await act(turn, decision, proposed, proposal_id, ctx)
    except (ConcurrentTurn, LostRace):
        raise
    except LockBusy:
        decision = Reject(
            reason="busy",
            message="Another action on this account is being carried out right now; try once more in a moment.",
        )
        result, is_error, key = decision.as_result(), True, None
    except Exception:
        log.exception("proposal %s (%s) failed", proposal_id, proposed.tool)
        decision = Reject(
            reason="internal_error",
            message="Something failed on our side while handling this; tell the person honestly and escalate.",
        )
        result, is_error, key = decision.as_result(), True, None
    await announce(turn)  # the card of an approval it opened, the money lock released
    if not isinstance(decision, NeedsConfirmation | NeedsApproval | Intercept):
        turn.facts.remember(name, proposed.hash, result)
    reason = decision.reason if isinstance(decision, Reject) else None
    outcome = ProposalOutcome(
        id=proposal_id, decision=decision.tag, reason=reason, result=result, is_error=is_error, idempotency_key=key
    )
    event = turn.event(
        f"gate.{decision.tag}",
        proposal_id=proposal_id,
        tool=name,
        args_hash=proposed.hash,
        idempotency_key=key,
        data={"is_error": is_error, **({"reason": reason} if reason else {})},
    )
    return result, is_error, outcome, event


async def decide(
    turn: Turn,
    p: Proposed,
    proposal_id: str,
    ctx: ToolContext,
    *,
    resumed: bool,
    approval: Approval | None = None,
    dedup: bool = True,
    key: str | None = None,
) -> Decision:
    """The gate's decision on a proposal. A ``resumed`` proposal (one a crash interrupted)
    that already claimed its ledger key was judged Execute then: it is never judged again
    (a re-check could fail *because* it ran), its key is the one it claimed."""
    if resumed:
        held = await turn.services.ledger.by_proposal(proposal_id)
        if held is not None:
            return Execute(key=held.key)
    return await turn.services.gatekeeper.judge(
        p, turn.facts, ctx, approval=approval, dedup=dedup, key=key, policy=turn.policy
    )


def money_lock(turn: Turn, tool: str) -> AbstractAsyncContextManager[None]:
    """One customer's money actions are judged and carried out one at a time, so the day's
    aggregate a verdict rests on still holds when the money moves (S5: no split in a race).
    Approval cards are not posted while it is held: the caller announces them after (:func:`announce`)."""
    if not moves_money(turn, tool):
        return nullcontext()
    return turn.services.locks.exclusive(f"money:{turn.principal.customer_id}")


def moves_money(turn: Turn, tool: str) -> bool:
    """Whether ``tool`` is a money action of an identified customer (it takes the money lock)."""
    t = turn.services.registry.get(tool)
    money = t is not None and (t.money is not None or t.money_at_stake is not None)
    return money and bool(turn.principal.customer_id)


async def announce(turn: Turn) -> None:
    """The approval cards of the approvals this turn opened (best effort: each is committed)."""
    while turn.unannounced:
        approval = turn.unannounced.pop(0)
        await best_effort(turn.services.notifier.approval_requested(approval))


async def act(
    turn: Turn, decision: Decision, p: Proposed, proposal_id: str, ctx: ToolContext, approval: Approval | None = None
) -> Acted:
    """Carry out the gate's decision: the result the model reads."""
    match decision:
        case Reject():
            return decision.as_result(), True, None
        case Intercept(previous=prev, step=at):
            return (
                {
                    "intercepted": True,
                    "message": f"You made this exact call {turn.facts.step - at} "
                    "step(s) ago. Its result is below; do not repeat it.",
                    "previous_result": prev,
                },
                False,
                None,
            )
        case NeedsConfirmation():
            return await _ask_confirmation(turn, decision, p, proposal_id)
        case NeedsApproval():
            appr = await gates.request_approval(turn, p, proposal_id, decision)
            turn.pending.append(Pending(kind="approval", id=appr.id, summary=decision.summary))
            return (
                {
                    "status": "PENDING_APPROVAL",
                    "approval_id": appr.id,
                    "action": decision.summary,
                    "message": "A supervisor must approve this before it happens. Tell the truth: it is "
                    "pending, not done.",
                },
                False,
                decision.key,
            )
        case Record(summary=summary, would_need=need):
            told = await shadow.recorded(turn, decision, p, proposal_id)
            return (
                {"status": "RECORDED_NOT_EXECUTED", "action": summary, "would_need": need, "message": told},
                False,
                None,
            )
        case Execute(key=key):
            outcome = await execute(turn, p, proposal_id, ctx, key)
            return outcome.result, outcome.is_error, key
    raise AssertionError(decision)


async def _ask_confirmation(turn: Turn, decision: NeedsConfirmation, p: Proposed, proposal_id: str) -> Acted:
    created = await gates.request_confirmation(turn, p, proposal_id, decision)
    conf = created.confirmation
    # Confirmations of other actions stay pending beside it; only its own earlier
    # version (same tool, same target) was superseded.
    gone = {*created.superseded, conf.id}
    turn.pending = [x for x in turn.pending if x.id not in gone]
    turn.pending.append(Pending(kind="confirmation", id=conf.id, summary=conf.summary, code=conf.code))
    who = "customer" if turn.principal.kind == "customer" else "rep"
    return (
        {
            "status": "CONFIRMATION_REQUIRED",
            "confirmation_id": conf.id,
            "action": conf.summary,
            "message": f"Nothing has been done yet. The system itself shows the {who} exactly this "
            "action and asks them to confirm it; say briefly that it needs their confirmation.",
        },
        False,
        decision.key,
    )


async def execute(turn: Turn, p: Proposed, proposal_id: str, ctx: ToolContext, key: str | None) -> ExecOutcome:
    """Execute behind the ledger, and keep the run's tally (``finish`` checks against it)."""
    tool = turn.services.registry.tools[p.tool]
    money = tool.money(p.args) if tool.money else None
    base = turn.event(
        "execution",
        proposal_id=proposal_id,
        tool=p.tool,
        args_hash=p.hash,
        data={"amount_minor": money.amount_minor, "currency": money.currency} if money else {},
    )
    outcome = await turn.services.executor.run(
        tool, p.args, ctx, key=key, proposal_id=proposal_id, run_id=turn.run.id, audit=base
    )
    if tool.meta.kind == "action" and not tool.meta.runtime:
        turn.facts.action_counts[p.tool] += 1
        if not outcome.is_error:
            turn.facts.recent.clear()  # the world changed: earlier reads are not to be replayed
        if not outcome.is_error and tool.meta.needs_confirmation:
            await gates.consume_confirmation(turn, p)
            done = {"tool": p.tool, "action_id": tool.action_id(outcome.result), "proposal_id": proposal_id}
            turn.executed.append({**done, "replayed": True} if outcome.replayed else done)
    turn.facts.tool_counts[p.tool] += 1
    if outcome.needs_human:
        await gates.escalate(turn, "needs_human", f"{p.tool} may or may not have gone through; check it.")
    return outcome


async def repair(turn: Turn) -> None:
    """A crash between a tool call and its result leaves unanswered tool_use blocks:
    answer them now (the ledger guarantees no second side effect)."""
    history = turn.history
    last = next((i for i in range(len(history) - 1, -1, -1) if history[i].role == "assistant"), None)
    if last is None:
        return
    # The user may have written again before anyone repaired the turn.
    answered = {b.get("tool_use_id") for m in history[last + 1 :] for b in m.content if b.get("type") == "tool_result"}
    uses = [b for b in blocks_of(history[last]) if is_tool_use(b) and b.get("id") not in answered]
    if uses:
        await run_tools(turn, None, uses)


def tool_context(turn: Turn, proposal_id: str | None = None) -> ToolContext:
    """What a tool handler gets: the session's principal, the backend, the case and run desks."""
    return ToolContext(
        principal=turn.principal,
        backend=turn.services.backend,
        knowledge=turn.services.knowledge,
        case=TurnDesk(turn),
        run=TurnControl(turn),
        rules=turn.policy.rules(),
        now=turn.now,
        proposal_id=proposal_id,
    )
