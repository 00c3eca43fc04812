"""Opening human gates from inside a turn: confirmations, approvals, escalation.

Deciding them (confirm, approve, reject, expire) is ``agent.approvals``.
"""

from __future__ import annotations

import json
import secrets
from datetime import timedelta
from typing import Any

from agent import handoff
from agent.decisions import NeedsApproval, NeedsConfirmation
from agent.gatekeeper import Proposed
from agent.history import new_id
from agent.notify import EscalationNotice, best_effort
from agent.turn import Turn
from storage.gates import ConfirmationCreated, drafted, supersedes
from storage.records import Approval, NewApproval, NewConfirmation, StoredMessage

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def confirmation_code() -> str:
    """A short code a customer can type back by email (no ambiguous characters)."""
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(6))


async def request_confirmation(
    turn: Turn, p: Proposed, proposal_id: str, decision: NeedsConfirmation
) -> ConfirmationCreated:
    """A pending confirmation of exactly these arguments (the same one again if it is already
    pending); an older one for the same tool on the same target is superseded. A new one is
    written with the turn's next step (``Turn.confirm_later``), with what it supersedes."""
    s = turn.services
    waiting = await s.confirmations.pending(turn.conversation.id) + turn.unsaved_confirmations()
    for existing in waiting:
        if existing.tool == p.tool and existing.args_hash == p.hash and existing.principal == turn.principal.key:
            return ConfirmationCreated(confirmation=existing, superseded=())
    new = NewConfirmation(
        id=new_id("cnf"),
        conversation_id=turn.conversation.id,
        run_id=turn.run.id,
        proposal_id=proposal_id,
        tool=p.tool,
        arguments=p.args,
        args_hash=p.hash,
        principal=turn.principal.key,
        code=confirmation_code(),
        summary=decision.summary,
        target=decision.target,
        idempotency_key=decision.key,
        created_at=s.clock(),
    )
    event = turn.event(
        "confirmation.requested",
        proposal_id=proposal_id,
        tool=p.tool,
        args_hash=p.hash,
        data={"confirmation_id": new.id},
    )
    turn.confirm_later(new, event)
    # What storage.gates.create_confirmation will supersede in that write (the turn holds the
    # conversation's lease: nothing else opens or answers its confirmations meanwhile).
    superseded = tuple(c.id for c in waiting if supersedes(new, c))
    return ConfirmationCreated(confirmation=drafted(new), superseded=superseded)


async def consume_confirmation(turn: Turn, p: Proposed) -> None:
    s = turn.services
    conf = await s.confirmations.find_confirmed(turn.conversation.id, turn.principal.key, p.tool, p.hash)
    if conf is not None:
        await s.confirmations.transition(
            conf.id,
            expected_version=conf.version,
            from_status="confirmed",
            to_status="consumed",
            at=s.clock(),
            audit=[
                turn.event("confirmation.consumed", tool=p.tool, args_hash=p.hash, data={"confirmation_id": conf.id})
            ],
        )


async def request_approval(
    turn: Turn, p: Proposed, proposal_id: str, decision: NeedsApproval, *, supersedes: Approval | None = None
) -> Approval:
    s = turn.services
    now = s.clock()
    cited = p.args.get("evidence") or [] if isinstance(p.args, dict) else []
    new = NewApproval(
        id=new_id("apr"),
        proposal_id=proposal_id,
        run_id=turn.run.id,
        conversation_id=turn.conversation.id,
        tool=p.tool,
        arguments=p.args,
        args_hash=p.hash,
        customer_id=turn.principal.customer_id,
        summary=decision.summary,
        required_role=decision.required_role,
        approvals_required=decision.approvals_required,
        requester=turn.principal.key,
        rationale=(turn.rationale or "")[:2000] or None,
        evidence=tuple({"id": e, **turn.facts_notes().get(e, {})} for e in cited),
        provenance=provenance(turn.history, p.args),
        idempotency_key=decision.key,
        policy_version=turn.policy.version,
        expires_at=now + timedelta(seconds=turn.policy.expiry_s(p.tool)),
        created_at=now,
        **_money(decision),
    )
    event = turn.event(
        "approval.requested",
        proposal_id=proposal_id,
        tool=p.tool,
        args_hash=p.hash,
        idempotency_key=decision.key,
        data={
            "approval_id": new.id,
            "reason": decision.reason,
            "approvals_required": decision.approvals_required,
            **({"supersedes": supersedes.id} if supersedes else {}),
        },
    )
    approval = await s.approvals.create(new, audit=[event])
    # Its card goes out once the customer's money lock is released (``steps.announce``): a
    # post can wait seconds for Slack's pace in the approvals channel, and the customer's other
    # actions must not wait with it.
    turn.unannounced.append(approval)
    return approval


def _money(decision: NeedsApproval) -> dict[str, Any]:
    """The approval's money and routing figures (pending money counts in every later aggregate)."""
    r = decision.routing
    if r is None:
        return {"amount_minor": None, "currency": None, "routing": {"reason": decision.reason}}
    return {
        "amount_minor": r.amount_minor,
        "currency": r.currency,
        "routing": {
            "reason": decision.reason,
            "ceiling_minor": r.ceiling_minor,
            "aggregate_minor": r.aggregate_minor,
            "approvals_required": decision.approvals_required,
        },
    }


async def escalate(turn: Turn, reason: str, summary: str, *, run: bool = True) -> dict[str, Any]:
    """Hand the conversation to a person: a case note, the trace of every tool call, the notifier.
    ``run``: the run counts as escalated (not when the rollout stage, not the agent, asked for it)."""
    turn.escalated = turn.escalated or run
    s = turn.services
    trace = tuple(
        {
            "tool": pr.tool,
            "decision": pr.decision,
            "reason": pr.reason,
            "is_error": pr.is_error,
            "result": _excerpt(pr.result),
        }
        for pr in await s.conversations.proposals(turn.run.id)
    )
    await s.conversations.add_case_note(
        turn.conversation.id,
        author=f"agent:{turn.run.id}",
        kind="escalation",
        text=f"{reason}: {summary}"[:2000],
        status="escalated",
        audit=[turn.event("escalation", data={"reason": reason[:64]})],
    )
    told = "A person has the case and the full trace."
    opened = None
    if turn.conversation.principal_kind == "customer":  # a rep's assist thread has its person already
        opened, _new = await handoff.open_handoff(s, turn.conversation, reason=reason, opened_by=f"agent:{turn.run.id}")
        told += " Tell the customer honestly: " + handoff.expectation(s, s.clock())
    notice = EscalationNotice(
        conversation=turn.conversation,
        reason=reason[:200],
        summary=summary[:2000],
        trace=trace,
        handoff_id=opened.id if opened is not None else None,
    )
    await best_effort(s.notifier.escalated(notice))
    return {"status": "escalated", "message": told}


def provenance(history: list[StoredMessage], args: Any) -> dict[str, str]:
    """Where each argument's value came from, for the approver.

    ``system_of_record``: returned by one of our own read tools in this conversation
    (outside any untrusted wrapper). ``untrusted_text``: appears only in what
    outsiders wrote (the customer's messages, order notes, documents).
    ``model``: neither — the model produced it.
    """
    trusted: set[str] = set()
    untrusted: list[str] = []
    for m in history:
        for block in m.content:
            if block.get("type") == "text" and m.role == "user":
                untrusted.append(str(block.get("text", "")))
            elif block.get("type") == "tool_result" and not block.get("is_error"):
                _collect(_loads(block.get("content")), trusted, untrusted)
    out: dict[str, str] = {}
    if not isinstance(args, dict):
        return out
    for name, value in args.items():
        if name == "evidence":
            out[name] = "search_knowledge"
            continue
        text = json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else str(value)
        if text in trusted:
            out[name] = "system_of_record"
        elif any(text in u for u in untrusted):
            out[name] = "untrusted_text"
        else:
            out[name] = "model"
    return out


def _loads(content: Any) -> Any:
    if isinstance(content, str):
        try:
            return json.loads(content)
        except ValueError:
            return content
    return content


def _collect(obj: Any, trusted: set[str], untrusted: list[str]) -> None:
    if isinstance(obj, dict):
        if "untrusted_data" in obj:
            untrusted.append(json.dumps(obj["untrusted_data"], ensure_ascii=False))
        for k, v in obj.items():
            if k != "untrusted_data":
                _collect(v, trusted, untrusted)
    elif isinstance(obj, list):
        for v in obj:
            _collect(v, trusted, untrusted)
    elif obj is not None:
        trusted.add(str(obj))


def _excerpt(result: Any) -> Any:
    text = json.dumps(result, ensure_ascii=False, default=str) if not isinstance(result, str) else result
    return text[:300]
