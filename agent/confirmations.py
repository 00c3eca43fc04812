"""Answering a confirmation (C6) so that no answer is lost and nothing runs twice.

Recording the answer is one transaction: the confirmation's compare-and-set, the
runtime's proposal to carry it out, its audit events and a job that finishes the
work if this process dies. Carrying it out (:func:`carry_out`) is idempotent and
shared by every path — the HTTP confirm call, a Slack button, a typed "yes", the
worker's job after a crash: execute once (the gate re-run, the ledger keyed by
what the confirmation fixed), store the outcome on the confirmation, tell the
agent once (a keyed runtime event), let it answer. A repeated answer returns
the stored outcome.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from agent import continuation, gates
from agent.errors import DecisionError
from agent.gatekeeper import Proposed
from agent.history import new_id
from agent.host import Host
from agent.outcomes import Pending, TurnResult
from agent.turn import Turn
from agent.wording import CONFIRMED_EVENT, DECLINED_EVENT
from storage.records import Approval, Confirmation, Conversation
from storage.steps import ConfirmationMove, LostRace, NewJob, NewProposal, StepWrite
from tools.context import Principal

#: The job that finishes an answered confirmation if the answering process dies first.
CONFIRM_JOB = "confirmation"
#: The answering request normally finishes the work; the job is the safety net after a crash.
CONFIRM_JOB_DELAY_S = 10.0
Via = Literal["api", "button", "reply", "code", "cli"]

AFFIRMATIVE = frozenset(
    {
        "yes",
        "y",
        "yes please",
        "yeah",
        "yep",
        "yup",
        "go ahead",
        "go ahead please",
        "please go ahead",
        "confirm",
        "confirmed",
        "i confirm",
        "yes confirm",
        "please do",
        "do it",
        "ok",
        "okay",
        "sure",
        "yes go ahead",
        "that's right",
        "correct",
        "yes do it",
        "sounds good",
    }
)
NEGATIVE = frozenset(
    {"no", "n", "nope", "no thanks", "don't", "do not", "stop", "no don't", "decline", "cancel that", "cancel"}
)
_CODE = re.compile(r"\b[A-Z2-9]{6}\b")


@dataclass(frozen=True, kw_only=True)
class ConfirmResult:
    """A confirmation after its answer: what it led to, and the agent's answer if this call produced one."""

    confirmation: Confirmation
    result: Any | None
    approval: Approval | None
    reply: str | None
    turn: TurnResult | None = None


@dataclass(frozen=True, kw_only=True)
class Answer:
    """A typed reply that answers one confirmation."""

    confirmation: Confirmation
    accept: bool
    via: Via


@dataclass(frozen=True, kw_only=True)
class AskWhich:
    """A bare yes/no the runtime cannot bind to one shown confirmation: it asks instead."""

    waiting: tuple[Confirmation, ...]


def normalise_reply(text: str) -> str:
    """Lower case, letters and apostrophes only, single spaces."""
    return " ".join(re.sub(r"[^a-z' ]+", " ", text.lower()).split())


#: Channels where anyone can put words in the principal's mouth more easily than a code
#: (email: a forged or quoted "yes"): only the code from our own message answers there.
CODE_ONLY_CHANNELS = frozenset({"email"})


def read_reply(text: str, waiting: list[Confirmation], *, codes_only: bool = False) -> Answer | AskWhich | None:
    """What a typed message means for the principal's pending confirmations.

    A code the runtime showed answers its confirmation ("no CODE" declines). A bare yes/no
    answers only when exactly one confirmation waits and the runtime's own text of it
    reached this person (and never where ``codes_only``); otherwise the runtime asks which.
    Anything else is for the model.
    """
    if not waiting:
        return None
    by_code = {c.code: c for c in waiting}
    codes = {m for m in _CODE.findall(text.upper()) if m in by_code}
    words = normalise_reply(" ".join(w for w in text.split() if w.strip(".,!;:()\"'").upper() not in codes))
    negative = words in NEGATIVE or words.split(" ", 1)[0] in ("no", "decline", "cancel", "don't")
    if len(codes) == 1:
        if not (negative or words in AFFIRMATIVE or not words):
            return None  # a code inside a longer message is not an answer: let the model ask
        return Answer(confirmation=by_code[codes.pop()], accept=not negative, via="code")
    if codes or (words not in AFFIRMATIVE and words not in NEGATIVE):
        return None if not codes else AskWhich(waiting=tuple(waiting))
    if len(waiting) == 1 and waiting[0].shown_at is not None and not codes_only:
        return Answer(confirmation=waiting[0], accept=words in AFFIRMATIVE, via="reply")
    return AskWhich(waiting=tuple(waiting))


async def record(
    rt: Host, conv: Conversation, acting: Principal, conf: Confirmation, accept: bool, *, via: Via
) -> None:
    """The principal's answer, the proposal that carries it out and the job that finishes it:
    one transaction. A lost race is a conflict and writes nothing."""
    turn = await rt.turn(conv, acting)
    now = rt.s.clock()
    kind = "confirmation.confirmed" if accept else "confirmation.declined"
    step = StepWrite(
        conversation_id=conv.id,
        run_id=turn.run.id,
        confirmation_move=ConfirmationMove(
            id=conf.id,
            expected_version=conf.version,
            from_status="pending",
            to_status="confirmed" if accept else "declined",
            at=now,
        ),
        jobs=[
            NewJob(
                kind=CONFIRM_JOB,
                payload={"confirmation_id": conf.id},
                dedup_key=f"confirm:{conf.id}",
                run_after=now + timedelta(seconds=CONFIRM_JOB_DELAY_S),
            )
        ],
        audit=[
            turn.event(
                kind,
                tool=conf.tool,
                args_hash=conf.args_hash,
                idempotency_key=conf.idempotency_key,
                data={"confirmation_id": conf.id, "via": via},
            )
        ],
    )
    if accept:
        prop = NewProposal(
            id=new_id("prop"),
            tool_use_id=f"runtime:{conf.id}",
            origin=f"confirmation:{conf.id}",
            tool=conf.tool,
            arguments=conf.arguments,
            args_hash=conf.args_hash,
            principal=acting.key,
            step=turn.facts.step,
            policy_version=turn.policy.version,
        )
        step.new_proposals.append(prop)
        step.audit.append(
            turn.event(
                "proposal", proposal_id=prop.id, tool=conf.tool, args_hash=conf.args_hash, data={"origin": prop.origin}
            )
        )
    try:
        await turn.commit(step)
    except LostRace:
        raise DecisionError("conflict", "This confirmation was already answered.") from None


async def answer(
    rt: Host, conv: Conversation, acting: Principal, conf: Confirmation, accept: bool, *, via: Via
) -> ConfirmResult:
    """Answer ``conf`` (the caller holds the conversation's lock). Answering again the same way
    returns the stored outcome; the opposite answer, or a superseded confirmation, is a conflict."""
    if conf.status == "pending":
        await record(rt, conv, acting, conf, accept, via=via)
    elif not _same_answer(conf, accept):
        raise DecisionError("conflict", f"This confirmation is already {conf.status}.")
    reply = await carry_out(rt, conf.id)
    return await result_of(rt, conf.id, reply)


async def carry_out(rt: Host, confirmation_id: str) -> TurnResult | None:
    """Finish an answered confirmation: execute it once, tell the agent once, let it answer.

    Idempotent: ``None`` when the agent was told before (by this or another caller)."""
    s = rt.s
    conf = await s.confirmations.get(confirmation_id)
    conv = await s.conversations.get(conf.conversation_id) if conf else None
    if conf is None or conv is None or conf.status in ("pending", "superseded"):
        return None
    principal = Principal.from_key(conf.principal, conv.customer_id)
    turn = await rt.turn(conv, principal)
    who = "customer" if principal.kind == "customer" else "rep"
    if conf.status == "declined":
        text = DECLINED_EVENT.format(who=who, summary=conf.summary)
        return await continuation.with_event(turn, text, key=_event_key(conf))
    outcome = conf.outcome or await _execute(rt, turn, conf)
    pending = (
        [Pending(kind="approval", id=outcome["approval_id"], summary=conf.summary)]
        if outcome.get("approval_id") and outcome.get("decision") == "approval"
        else []
    )
    text = CONFIRMED_EVENT.format(who=who, summary=conf.summary, outcome=outcome_text(outcome))
    return await continuation.with_event(turn, text, key=_event_key(conf), pending=pending)


async def _execute(rt: Host, turn: Turn, conf: Confirmation) -> dict[str, Any]:
    """Run the confirmed action through the whole gate under the proposal made when it was
    confirmed (so a retry shares its ledger entry), and store what came of it."""
    s = rt.s
    prop = await s.conversations.proposal_for_origin(f"confirmation:{conf.id}")
    if prop is not None and prop.decision is not None:
        return {
            "decision": prop.decision,
            "result": prop.result,
            "is_error": prop.is_error,
            "approval_id": (prop.result or {}).get("approval_id") if isinstance(prop.result, dict) else None,
        }
    turn.rationale = await _rationale(rt, turn, conf)
    applied = await rt.apply(
        turn,
        tool=conf.tool,
        args=conf.arguments,
        origin=f"confirmation:{conf.id}",
        proposal_id=prop.id if prop else None,
        key=conf.idempotency_key,
        confirmation_id=conf.id,
    )
    if applied.decision != "approval":  # one confirmation, one attempt: done or refused, it is spent
        await gates.consume_confirmation(turn, Proposed(tool=conf.tool, args=conf.arguments, hash=conf.args_hash))
    return applied.outcome()


async def result_of(rt: Host, confirmation_id: str, reply: TurnResult | None) -> ConfirmResult:
    """The confirmation as it stands, with its stored outcome (and the approval's current state)."""
    conf = await rt.s.confirmations.get(confirmation_id)
    assert conf is not None
    outcome = conf.outcome or {}
    approval = await rt.s.approvals.get(outcome["approval_id"]) if outcome.get("approval_id") else None
    result = outcome.get("result") if outcome.get("decision") == "execute" else None
    return ConfirmResult(
        confirmation=conf,
        result=result,
        approval=approval,
        reply=reply.reply if reply and reply.reply else None,
        turn=reply,
    )


def outcome_text(outcome: dict[str, Any]) -> str:
    """The outcome as the model reads it in the runtime event."""
    body = json.dumps(outcome.get("result"), ensure_ascii=False, default=str)[:1500]
    if outcome.get("decision") == "execute" and not outcome.get("is_error"):
        if isinstance(outcome.get("result"), dict) and outcome["result"].get("replayed"):
            return f"nothing new happened — this had already been done earlier: {body}"
        return f"executed: {body}"
    if outcome.get("decision") == "approval":
        return f"PENDING_APPROVAL: {body}"
    return f"not executed: {body}"


def _same_answer(conf: Confirmation, accept: bool) -> bool:
    return conf.status in ("confirmed", "consumed") if accept else conf.status == "declined"


def _event_key(conf: Confirmation) -> str:
    return f"confirmation:{conf.id}"


async def _rationale(rt: Host, turn: Turn, conf: Confirmation) -> str:
    """The model's own words when it proposed this action (shown to approvers as untrusted)."""
    original = await rt.s.conversations.get_proposal(conf.proposal_id)
    if original is None:
        return ""
    for m in reversed(turn.history):
        if m.role == "assistant" and any(b.get("id") == original.tool_use_id for b in m.content):
            return " ".join(str(b.get("text", "")) for b in m.content if b.get("type") == "text").strip()
    return ""
