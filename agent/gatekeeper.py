"""The gatekeeper (C5): every proposal is judged by code, never by the model.

Order: known & loaded tool → schema → repeat interception → scope → rollout
stage → business rules (ownership included: someone else's order is
``not_found``) → who acts on whose account (no staff action on an account with
their own email; a customer's actions per day across conversations) → rate and
budget limits (aggregate refunds per run and per day, per customer and per staff
member, so splitting does not dodge approval) → evidence (C11) → confirmation gate (C6)
→ approval routing (C7) → idempotency key. Execution itself is the executor's.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from jsonschema import Draft202012Validator, validators

from agent.decisions import (
    Decision,
    Execute,
    Intercept,
    NeedsApproval,
    NeedsConfirmation,
    Record,
    Reject,
    Routing,
    RoutingReason,
)
from agent.policy import Policy
from agent.tracing import traced_judgement
from storage.approvals import ApprovalRepo
from storage.audit import canonical_json, sha256_hex
from storage.gates import ConfirmationRepo
from storage.identities import People
from storage.limits import UsageCounts
from storage.records import Approval
from tools.context import Principal, ToolContext, ToolFailure
from tools.registry import Money, Registry, ToolDef

log = logging.getLogger(__name__)

DEDUP_WINDOW_STEPS = 5
DAY = timedelta(hours=24)

# JSON Schema counts 2000.0 as an integer; money and counts here are ints, one canonical form each
# (the arguments hash, the idempotency key and the amount written downstream all depend on it).
_StrictValidator = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)


def args_hash(tool: str, args: Any) -> str:
    return sha256_hex(tool + "\x00" + canonical_json(args))


@dataclass(frozen=True, kw_only=True)
class RecentCall:
    step: int
    tool: str
    hash: str
    result: Any


@dataclass(kw_only=True)
class RunFacts:
    """What the gate knows about the run in progress (kept by the runtime)."""

    principal: Principal
    channel: str
    conversation_id: str
    run_id: str
    loaded_groups: set[str]
    knowledge_ids: set[str] = field(default_factory=set)
    recent: deque[RecentCall] = field(default_factory=lambda: deque(maxlen=64))
    action_counts: Counter[str] = field(default_factory=Counter)
    tool_counts: Counter[str] = field(default_factory=Counter)
    step: int = 0

    def remember(self, tool: str, h: str, result: Any) -> None:
        self.recent.append(RecentCall(step=self.step, tool=tool, hash=h, result=result))


@dataclass(frozen=True, kw_only=True)
class Proposed:
    tool: str
    args: Any
    hash: str


class Gatekeeper:
    """Judges proposals; returns a :class:`Decision`. Has no side effects."""

    def __init__(
        self,
        *,
        registry: Registry,
        policy: Policy,
        confirmations: ConfirmationRepo,
        approvals: ApprovalRepo,
        usage: UsageCounts,
        people: People,
    ) -> None:
        self.registry = registry
        #: Who a staff principal is (their own email), from signoff's own directory.
        self.people = people
        self.policy = policy
        self.confirmations = confirmations
        self.approvals = approvals
        self.usage = usage
        #: What "an action" is for the per-customer daily count; refunds for the per-staff money.
        self._actions = frozenset(
            n for n, t in registry.tools.items() if t.meta.kind == "action" and not t.meta.runtime
        )
        self._refund_tools = {
            n: t for n, t in registry.tools.items() if t.money is not None and t.money_kind == "refund"
        }
        self._validators = {name: _StrictValidator(t.input_schema) for name, t in registry.tools.items()}

    @traced_judgement
    async def judge(
        self,
        p: Proposed,
        facts: RunFacts,
        ctx: ToolContext,
        *,
        approval: Approval | None = None,
        dedup: bool = True,
        key: str | None = None,
        policy: Policy | None = None,
    ) -> Decision:
        """The decision on ``p``. ``key``: the idempotency key fixed when this action was first
        judged (a confirmation's or an approval's); without one it is derived now. ``policy``: the
        run's pinned version (else the one in force now). Either way it is read ONCE: the stage,
        limits, caps and approval routing of one decision all come from that one snapshot, however
        many awaits the decision spans while a new version is swapped in."""
        pol = policy or self.policy
        tool = self.registry.get(p.tool)
        if tool is None:
            return Reject(reason="unknown_tool", message=f"There is no tool named {p.tool[:64]!r}.")
        if tool.meta.group != "always" and tool.meta.group not in facts.loaded_groups:
            return Reject(reason="tool_not_loaded", message=f"Call load_tools with group {tool.meta.group!r} first.")
        if not isinstance(p.args, dict):
            return Reject(reason="invalid_arguments", message="Arguments must be a JSON object.")
        errors = sorted(self._validators[p.tool].iter_errors(p.args), key=lambda e: list(e.path))
        if errors:
            return Reject(reason="invalid_arguments", details={"problems": [_describe(e) for e in errors[:5]]})
        if dedup:
            prev = self._recent(p, facts)
            if prev is not None:
                return Intercept(previous=prev.result, step=prev.step)
        missing = tool.meta.scopes - pol.scopes_for(facts.principal.kind)
        if missing:
            return Reject(reason="not_permitted", message="This action is not available to you here.")
        stage = pol.stage(facts.channel, facts.principal.kind, tool.name)
        if tool.meta.kind == "action" and not tool.meta.runtime:
            refusal = _stage_refusal(pol, tool, stage)
            if refusal is not None:
                return refusal
        refusal = await _check(tool, p, ctx)
        if refusal is not None:
            return refusal
        if tool.meta.kind == "read" or tool.meta.runtime:
            return Execute(key=None)
        return await self._judge_action(pol, tool, p, facts, ctx, stage, approval, key)

    async def _judge_action(
        self,
        pol: Policy,
        tool: ToolDef,
        p: Proposed,
        facts: RunFacts,
        ctx: ToolContext,
        stage: str,
        approval: Approval | None,
        pinned_key: str | None,
    ) -> Decision:
        refusal = await self._principal_refusal(pol, facts, ctx, approval)
        if refusal is not None:
            return refusal
        refusal = _limits_and_evidence(pol, tool, p, facts, approval)
        if refusal is not None:
            return refusal
        verdict = await self._approval_verdict(pol, tool, p, facts, ctx)
        if isinstance(verdict, Reject):
            return verdict
        summary = tool.describe(p.args)
        key = (
            pinned_key
            or (approval.idempotency_key if approval is not None else None)
            or (tool.key(p.args, ctx) if tool.key else None)
        )
        if stage == "shadow":
            return Record(summary=summary, would_need="approval" if verdict else "execute")
        if tool.meta.needs_confirmation and approval is None:
            confirmed = await self.confirmations.find_confirmed(
                facts.conversation_id, facts.principal.key, tool.name, p.hash
            )
            if confirmed is None:
                return NeedsConfirmation(summary=summary, target=tool.target_of(p.args), key=key)
            key = pinned_key or confirmed.idempotency_key or key
        if verdict is not None:
            if approval is not None and approval.status == "approved" and _covers(approval, verdict.approvers):
                return Execute(key=key)
            return NeedsApproval(
                summary=summary,
                required_role=pol.approvers.required_role,
                approvals_required=verdict.approvers,
                reason=verdict.reason,
                key=key,
                routing=verdict.routing,
            )
        return Execute(key=key)

    async def _principal_refusal(
        self, pol: Policy, facts: RunFacts, ctx: ToolContext, approval: Approval | None
    ) -> Reject | None:
        """Who acts on whose account, across conversations: a rep never acts on an account
        linked to their own email; a customer's actions per day are bounded (an approved
        action was counted when it was requested and is not refused now)."""
        who = facts.principal
        customer = who.customer_id
        if who.is_staff and customer:
            staff = await self.people.staff(who.id)
            if staff is not None and staff.email:
                account = await ctx.backend.get_customer(customer)
                if account is not None and account.email.casefold() == staff.email.casefold():
                    return Reject(
                        reason="own_account",
                        message="Staff cannot act on an account linked to their own email; a colleague must handle it.",
                    )
        if who.kind == "customer" and customer and approval is None:
            limit = pol.customer.max_actions_per_day
            if await self.usage.customer_actions(customer, DAY, self._actions) >= limit:
                return Reject(
                    reason="daily_action_limit_reached",
                    details={"limit": "actions_per_day"},
                    message="No more actions can be carried out on this account today; offer to escalate to a person.",
                )
        return None

    async def _staff_verdict(self, pol: Policy, money: Money, p: Proposed, facts: RunFacts) -> _Verdict | None:
        """A staff member's refunds across all customers in the last 24 h (as a rep and as a
        supervisor: one person, one budget), plus their refund
        requests still pending and this one: above the policy's per-staff cap a supervisor
        decides (routed to approval, not refused)."""
        who = facts.principal
        if not who.is_staff:
            return None
        moved = 0
        for done in await self.usage.executed_by(who.person_keys, DAY, self._refund_tools):
            tool = self._refund_tools[done.tool]
            m = tool.money(done.arguments) if tool.money and isinstance(done.arguments, dict) else None
            if m is not None and m.currency == money.currency:
                moved += m.amount_minor
        pending = sum(
            amount
            for h, amount, currency in await self.usage.pending_requested_by(who.person_keys, self._refund_tools)
            if currency == money.currency and h != p.hash
        )
        aggregate = money.amount_minor + moved + pending
        cap = pol.staff_daily_refund_cap(money.currency)
        if aggregate <= cap:
            return None
        return _Verdict(
            reason="staff_daily_over_cap",
            approvers=1,
            routing=Routing(
                amount_minor=money.amount_minor,
                currency=money.currency,
                ceiling_minor=cap,
                aggregate_minor=aggregate,
            ),
        )

    async def _approval_verdict(
        self, pol: Policy, tool: ToolDef, p: Proposed, facts: RunFacts, ctx: ToolContext
    ) -> _Verdict | Reject | None:
        """Whether policy routes this action to a supervisor (``None``: it does not), why, and
        how many must approve; a :class:`Reject` when no approval could allow it today."""
        money = tool.money(p.args) if tool.money else None
        if money is None and tool.money_at_stake is not None:
            money = await tool.money_at_stake(p.args, ctx)
        if tool.meta.risk_tier >= pol.always_approve_tier:
            routing = (
                None
                if money is None
                else Routing(
                    amount_minor=money.amount_minor,
                    currency=money.currency,
                    ceiling_minor=0,
                    aggregate_minor=money.amount_minor,
                )
            )
            return _Verdict(reason="risk_tier", approvers=1, routing=routing)
        if money is None:
            return None
        if tool.money_kind == "cancellation":
            return await self._cancellation_verdict(pol, money, p, facts, ctx)
        aggregate = money.amount_minor + await self._money_today(money.currency, p, facts, ctx, kinds=("refund",))
        if aggregate > pol.daily_refund_cap(money.currency):
            return Reject(
                reason="daily_amount_limit_reached",
                message="This exceeds what can be refunded today; escalate to a person.",
            )
        ceiling = pol.ceiling(facts.principal.kind, money.currency)
        if aggregate <= ceiling:
            return await self._staff_verdict(pol, money, p, facts)
        dual = pol.dual_threshold(money.currency)
        approvers = 2 if aggregate > dual else 1
        reason: RoutingReason = "over_ceiling" if money.amount_minor > ceiling else "aggregate_over_ceiling"
        return _Verdict(
            reason=reason,
            approvers=approvers,
            routing=Routing(
                amount_minor=money.amount_minor,
                currency=money.currency,
                ceiling_minor=ceiling,
                aggregate_minor=aggregate,
            ),
        )

    async def _cancellation_verdict(
        self, pol: Policy, money: Money, p: Proposed, facts: RunFacts, ctx: ToolContext
    ) -> _Verdict | None:
        """A cancellation needs a supervisor only where the retailer set a threshold; it is
        measured against the day's cancelled money, never against the refund ceilings."""
        threshold = pol.cancellation_threshold(money.currency)
        if threshold is None:
            return None
        aggregate = money.amount_minor + await self._money_today(money.currency, p, facts, ctx, kinds=("cancellation",))
        if aggregate <= threshold:
            return None
        approvers = 2 if aggregate > pol.dual_threshold(money.currency) else 1
        return _Verdict(
            reason="cancellation_over_threshold",
            approvers=approvers,
            routing=Routing(
                amount_minor=money.amount_minor,
                currency=money.currency,
                ceiling_minor=threshold,
                aggregate_minor=aggregate,
            ),
        )

    async def _money_today(
        self, currency: str, p: Proposed, facts: RunFacts, ctx: ToolContext, *, kinds: tuple[str, ...]
    ) -> int:
        """The customer's money of ``kinds`` moved in the last 24 h, plus every approval still
        pending for them (any kind: if approved, that money moves too) — so splitting an
        amount, or racing one request against another, does not avoid the limit (S5)."""
        customer = facts.principal.customer_id
        if not customer:
            return 0
        since = ctx.now - timedelta(hours=24)
        moved = sum(
            r.amount_minor
            for r in await ctx.backend.refunds_since(customer, since)
            if r.currency == currency and r.kind in kinds
        )
        pending = sum(
            a.amount_minor or 0
            for a in await self.approvals.pending_for_customer(customer)
            if a.currency == currency and a.args_hash != p.hash
        )
        return moved + pending

    def _recent(self, p: Proposed, facts: RunFacts) -> RecentCall | None:
        for call in reversed(facts.recent):
            if facts.step - call.step > DEDUP_WINDOW_STEPS:
                break
            if call.tool == p.tool and call.hash == p.hash:
                return call
        return None


@dataclass(frozen=True, kw_only=True)
class _Verdict:
    """Policy routes the action to approval: why, by how many, on what figures."""

    reason: RoutingReason
    approvers: int
    routing: Routing | None


def _limits_and_evidence(
    pol: Policy, tool: ToolDef, p: Proposed, facts: RunFacts, approval: Approval | None
) -> Reject | None:
    """The run's action and per-tool caps, and the evidence an action must cite (retrieved in this run)."""
    lim = pol.limits
    if approval is None and facts.action_counts.total() >= lim.max_actions_per_run:
        return Reject(
            reason="run_action_limit_reached",
            message="Too many actions in this conversation; escalate to a person.",
        )
    if facts.tool_counts[tool.name] >= lim.max_calls_per_tool_per_run:
        return Reject(reason="tool_call_limit_reached", message="Escalate to a person.")
    if not tool.meta.requires_evidence:
        return None
    cited = p.args.get("evidence") or []
    if not cited:
        return Reject(
            reason="evidence_required",
            message="Cite the evidence ids search_knowledge returned in this conversation.",
        )
    unknown = [e for e in cited if e not in facts.knowledge_ids]
    if unknown:
        return Reject(
            reason="evidence_not_retrieved",
            details={"unknown_evidence": unknown},
            message="Only evidence ids returned by search_knowledge in this run count.",
        )
    return None


def _stage_refusal(pol: Policy, tool: ToolDef, stage: str) -> Reject | None:
    if stage == "reads":
        return Reject(
            reason="action_not_enabled", message="Actions are not enabled on this channel yet; offer to escalate."
        )
    if stage == "actions" and tool.name not in pol.rollout.enabled_actions:
        return Reject(reason="action_not_enabled", message="This action is not enabled yet; offer to escalate.")
    return None


async def _check(tool: ToolDef, p: Proposed, ctx: ToolContext) -> Reject | None:
    """The tool's business rules; a failure the model can act on, never an exception."""
    if tool.check is None:
        return None
    try:
        await tool.check(p.args, ctx)
    except ToolFailure as f:
        return Reject(reason=f.code, message=f.message, details=f.details)
    except TimeoutError:
        log.warning("check of %s timed out", tool.name)
        return Reject(
            reason="temporarily_unavailable",
            message="The shop's systems did not answer; try once more or escalate to a person.",
        )
    except Exception:
        log.exception("check of %s failed", tool.name)
        return Reject(
            reason="temporarily_unavailable",
            message="The shop's systems could not check this right now; try once more or escalate to a person.",
        )
    return None


def _covers(approval: Approval, approvers_now: int) -> bool:
    return approval.approvals_required >= approvers_now


def _describe(err: Any) -> str:
    where = "/".join(str(x) for x in err.path) or "(arguments)"
    return f"{where}: {err.message}"[:300]
