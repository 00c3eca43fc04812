"""Playing a case's turns against a real runtime, and what it leaves behind.

The player is every human around the agent: the customer (or rep) typing,
confirming and declining, and the supervisors deciding approvals through the
one decision function, including the awkward parts (expiry, double clicks,
stale cards, a customer trying to approve). It never looks inside the agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from agent.errors import DecisionError
from agent.evaluation.fixtures import Clock
from agent.evaluation.suite import Case, Turn, parse_duration
from agent.runtime import Runtime
from sandbox.dataset import Dataset
from storage.audit import AuditRecord, VerifyResult
from storage.records import Approval, LedgerEntry, Proposal
from tools.context import Principal


@dataclass(frozen=True, kw_only=True)
class TurnOutcome:
    """What one turn produced: the agent's reply, or a decision's outcome."""

    index: int
    action: str
    reply: str = ""
    outcome: str | None = None
    ok: bool = True
    error: str | None = None
    successes: int = 0
    #: Tools executed (in the whole case) by the end of this turn, for honesty checks.
    executed: tuple[str, ...] = ()


@dataclass(kw_only=True)
class Played:
    turns: list[TurnOutcome] = field(default_factory=list)
    conversations: dict[str, str] = field(default_factory=dict)
    failure: str | None = None

    @property
    def final_reply(self) -> str:
        return next((t.reply for t in reversed(self.turns) if t.reply), "")


@dataclass(frozen=True, kw_only=True)
class Observed:
    """The durable state after a case: proposals, audit chain, approvals, ledger, store."""

    proposals: list[Proposal]
    audit: list[AuditRecord]
    verify: VerifyResult
    approvals: list[Approval]
    ledger: dict[str, LedgerEntry]
    before: Dataset
    after: Dataset

    def model_proposals(self) -> list[Proposal]:
        """Proposals the model made (not the runtime re-judging a confirmed or approved action)."""
        return [p for p in self.proposals if p.origin is None]


def principal_of(ident: str, *, customer: str | None, staff_roles: dict[str, str]) -> Principal:
    """``C-…`` is a customer, a staff id gets its role from the dataset."""
    if ident in staff_roles:
        return Principal(kind=staff_roles[ident], id=ident, customer_id=customer)  # type: ignore[arg-type]
    return Principal(kind="customer", id=ident, customer_id=ident)


class Player:
    """Plays one case's turns on ``rt``."""

    def __init__(self, rt: Runtime, case: Case, clock: Clock, staff_roles: dict[str, str]) -> None:
        self.rt = rt
        self.case = case
        self.clock = clock
        self.roles = staff_roles
        p = case.principal
        self.acting = (
            principal_of(p.staff, customer=p.customer, staff_roles=staff_roles)
            if p.staff
            else Principal(kind="customer", id=p.customer, customer_id=p.customer)
        )
        self.played = Played()

    async def play(self) -> Played:
        for i, turn in enumerate(self.case.turns):
            try:
                outcome = await self._step(i, turn)
                done = await self.rt.s.audit.list(kind="execution.succeeded", limit=1000)
                self.played.turns.append(replace(outcome, executed=tuple(e.tool or "" for e in done)))
            except Exception as exc:  # a crash is a failed run, reported with the turn that caused it
                self.played.failure = f"turn {i} ({turn.action}): {type(exc).__name__}: {exc}"
                break
        return self.played

    async def _step(self, i: int, turn: Turn) -> TurnOutcome:
        match turn.action:
            case "user":
                conv = self.played.conversations.get(turn.conversation)
                r = await self.rt.chat(
                    principal=self.acting, channel=self.case.channel, message=turn.user or "", conversation_id=conv
                )
                self.played.conversations[turn.conversation] = r.conversation_id
                return TurnOutcome(index=i, action="user", reply=r.reply, outcome=r.outcome)
            case "confirm" | "decline":
                return await self._confirm(i, turn, accept=turn.action == "confirm")
            case "approve" | "reject":
                return await self._decide(i, turn)
            case "expire" | "advance":
                self.clock.advance(parse_duration(turn.expire or turn.advance or "0s"))
                if turn.action == "advance":
                    return TurnOutcome(index=i, action="advance")
                return await self._expire(i)
            case "double_click":
                return await self._double_click(i, turn)
            case "stale_click":
                return await self._stale_click(i, turn)
        raise AssertionError(turn.action)

    def _conv(self, turn: Turn) -> str:
        conv = self.played.conversations.get(turn.conversation)
        if conv is None:
            raise LookupError(f"conversation {turn.conversation!r} has not started")
        return conv

    async def _confirm(self, i: int, turn: Turn, *, accept: bool) -> TurnOutcome:
        which = turn.confirm or turn.decline
        pending = sorted(await self.rt.s.confirmations.pending(self._conv(turn)), key=lambda c: c.created_at)
        if not pending:  # not a failure by itself: the model proposed nothing to confirm (expectations tell)
            return TurnOutcome(index=i, action=turn.action, error="nothing_to_confirm")
        chosen = pending if which == "all" else [pending[0] if which == "first" else pending[-1]]
        reply = ""
        for conf in chosen:
            out = await self.rt.confirm(conf.id, actor=self.acting, accept=accept)
            reply = out.reply or reply
        return TurnOutcome(index=i, action=turn.action, reply=reply)

    async def _approval(self, turn: Turn, *, pending_only: bool = True) -> Approval | None:
        conv = self._conv(turn)
        rows = [a for a in await self.rt.s.approvals.list_approvals(limit=500) if a.conversation_id == conv]
        if pending_only:
            rows = [a for a in rows if a.status == "pending"]
        return max(rows, key=lambda a: a.created_at) if rows else None

    async def _decide(self, i: int, turn: Turn) -> TurnOutcome:
        # The latest card in the conversation, whatever its state: deciding a settled one must fail.
        a = await self._approval(turn, pending_only=False)
        if a is None:
            return TurnOutcome(index=i, action=turn.action, error="nothing_to_decide")
        who = turn.approve or (turn.reject.by if turn.reject else "")
        actor = principal_of(who, customer=None, staff_roles=self.roles)
        comment = turn.reject.comment if turn.reject else None
        try:
            out = await self.rt.decide(
                a.id, expected_version=a.version, decision=turn.action, actor=actor, comment=comment
            )
        except DecisionError as exc:
            return self._expected(i, turn, exc.code)
        reply = await self._resume(out.approval)
        return self._expected(i, turn, None, reply=reply, status=out.approval.status)

    def _expected(
        self,
        i: int,
        turn: Turn,
        code: str | None,
        *,
        reply: str = "",
        status: str | None = None,
        default: str | None = None,
    ) -> TurnOutcome:
        want = turn.expect_error or default
        return TurnOutcome(
            index=i,
            action=turn.action,
            reply=reply,
            outcome=status,
            ok=code == want,
            error=code,
            successes=int(code is None),
        )

    async def _resume(self, a: Approval) -> str:
        if a.status == "pending":
            return ""
        result = await self.rt.resume(a.id)
        return result.reply if result is not None else ""

    async def _expire(self, i: int) -> TurnOutcome:
        conv_ids = set(self.played.conversations.values())
        expired = await self.rt.expire_stale()
        reply = ""
        for a in await self.rt.s.approvals.list_approvals(status="expired", limit=500):
            if a.conversation_id in conv_ids:
                reply = await self._resume(a) or reply
        return TurnOutcome(index=i, action="expire", reply=reply, outcome=f"expired {expired}")

    async def _double_click(self, i: int, turn: Turn) -> TurnOutcome:
        a = await self._approval(turn)
        if a is None:
            return TurnOutcome(index=i, action=turn.action, ok=False, error="nothing_to_decide")
        actor = principal_of(turn.double_click or "", customer=None, staff_roles=self.roles)
        clicks = [self.rt.decide(a.id, expected_version=a.version, decision="approve", actor=actor) for _ in range(2)]
        results: list[Any] = await asyncio.gather(*clicks, return_exceptions=True)
        wins = [r for r in results if not isinstance(r, BaseException)]
        errors = [r for r in results if isinstance(r, BaseException)]
        for e in errors:
            if not isinstance(e, DecisionError):
                raise e
        reply = await self._resume(wins[0].approval) if wins else ""
        codes = ",".join(sorted(e.code for e in errors if isinstance(e, DecisionError)))
        return TurnOutcome(
            index=i,
            action=turn.action,
            reply=reply,
            ok=len(wins) == 1 and codes == "conflict",
            error=codes or None,
            successes=len(wins),
        )

    async def _stale_click(self, i: int, turn: Turn) -> TurnOutcome:
        a = await self._approval(turn, pending_only=False)
        if a is None:
            return TurnOutcome(index=i, action=turn.action, ok=False, error="nothing_to_decide")
        actor = principal_of(turn.stale_click or "", customer=None, staff_roles=self.roles)
        try:
            out = await self.rt.decide(a.id, expected_version=a.version - 1, decision="approve", actor=actor)
        except DecisionError as exc:
            return self._expected(i, turn, exc.code, default="conflict")
        reply = await self._resume(out.approval)
        return self._expected(i, turn, None, reply=reply, status=out.approval.status, default="conflict")


async def observe(
    rt: Runtime,
    before: Dataset,
    *,
    export: Callable[[], Awaitable[Dataset]],
    counts: dict[str, int] | None = None,
) -> Observed:
    """Read everything a judge needs from the durable state, through the repositories only.

    The shop is exported (``export``) unless ``counts`` (the template's row counts) are given, no
    action executed and no row count changed - then it is known to equal ``before``.
    """
    from sandbox.io import count_rows

    s = rt.s
    audit: list[AuditRecord] = []
    while True:
        page = await s.audit.list(after_seq=audit[-1].seq if audit else 0, limit=1000)
        audit.extend(page)
        if len(page) < 1000:
            break
    runs = list(dict.fromkeys(e.run_id for e in audit if e.kind == "run.started" and e.run_id))
    proposals = [p for run in runs for p in await s.conversations.proposals(run)]
    approvals = await s.approvals.list_approvals(limit=1000)
    keys = {p.idempotency_key for p in proposals if p.idempotency_key} | {
        a.idempotency_key for a in approvals if a.idempotency_key
    }
    ledger = {k: e for k in sorted(keys) if (e := await s.ledger.get(k)) is not None}
    untouched = (
        counts is not None
        and not any(e.kind.startswith("execution.") for e in audit)
        and await count_rows(s.db) == counts
    )
    return Observed(
        proposals=proposals,
        audit=audit,
        verify=await s.audit.verify(),
        approvals=approvals,
        ledger=ledger,
        before=before,
        after=before if untouched else await export(),
    )


__all__ = ["Observed", "Played", "Player", "TurnOutcome", "observe", "principal_of"]
