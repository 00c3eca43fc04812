"""``signoff rollout report``: how the shadow stage's proposals compare with what staff did,
per intent, per unit (channel, principal kind, tool: what a stage can be set for) and per amount
band, and whether each unit meets the policy's ``rollout.advance`` thresholds to move to the
next stage (C16). How a proposal is matched is :mod:`agent.rollout_compare`.

Agreement = agreeing / proposed: a proposal staff never acted on counts against the agent;
so do false actions (staff did something else, or nothing, within the window) and misses
(staff acted where the agent proposed nothing).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from agent.errors import ConfigError
from agent.policy import Policy, next_stage
from agent.rollout_compare import (
    DEFAULT_WINDOW,
    DURATION,
    UNIT_S,
    Compared,
    Miss,
    Unit,
    band,
    compare,
    compared_arguments,
    in_shadow,
    misses,
    money,
)
from storage.rollout import RolloutFacts, ShadowProposal
from tools.context import PrincipalKind
from tools.intent import classify
from tools.registry import Registry

#: The window when ``--since`` is not given.
DEFAULT_SINCE = "30d"


def parse_since(text: str, now: datetime) -> datetime:
    """``--since``: a duration before ``now`` (``90m``, ``24h``, ``7d``, ``2w``) or an ISO date or
    date-time (a naive one is UTC). A clear :class:`ConfigError` otherwise."""
    raw = text.strip()
    m = DURATION.match(raw)
    if m:
        amount = int(m.group(1))
        if amount == 0:
            raise ConfigError(f"--since {text!r}: a duration must be more than zero")
        return now - timedelta(seconds=amount * UNIT_S[m.group(2)])
    try:
        at = datetime.fromisoformat(raw)
    except ValueError:
        raise ConfigError(
            f"--since {text!r}: not a duration (90m, 24h, 7d, 2w) or an ISO date/time (2026-01-31, 2026-01-31T09:00Z)"
        ) from None
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    if at > now:
        raise ConfigError(f"--since {text!r}: is in the future")
    return at


@dataclass(kw_only=True)
class Figures:
    """Counts for one group of shadow proposals (and the staff actions they answer)."""

    proposed: int = 0
    #: Staff executed the same tool on the same target afterwards, inside the window.
    staff_did: int = 0
    #: ... with the same arguments.
    same_args: int = 0
    #: Staff did something else to that target, or nothing, inside the window.
    false_actions: int = 0
    #: Staff acted in a shadow conversation where the agent proposed nothing.
    misses: int = 0
    #: Proposals the gate would have sent to a supervisor had they not been shadow.
    needs_approval: int = 0
    #: Money (minor units, per currency) the agent would have moved, and what staff moved.
    agent_money: Counter[str] = field(default_factory=Counter)
    staff_money: Counter[str] = field(default_factory=Counter)

    @property
    def agreement(self) -> float | None:
        return self.same_args / self.proposed if self.proposed else None

    def count(self, c: Compared, registry: Registry) -> None:
        """Add one compared proposal."""
        self.proposed += 1
        self.staff_did += c.outcome in ("agree", "differ")
        self.same_args += c.outcome == "agree"
        self.false_actions += c.false_action
        self.needs_approval += c.would_need_approval
        mine = money(registry, c.proposal.tool, c.proposal.arguments)
        if mine is not None:
            self.agent_money[mine.currency] += mine.amount_minor
        if c.action is not None:
            self.add_staff_money(registry, c.action.tool, c.action.arguments)

    def add_staff_money(self, registry: Registry, tool: str, args: Any) -> None:
        theirs = money(registry, tool, args)
        if theirs is not None:
            self.staff_money[theirs.currency] += theirs.amount_minor

    def as_json(self) -> dict[str, Any]:
        return {
            "proposed": self.proposed,
            "staff_did_same": self.staff_did,
            "same_arguments": self.same_args,
            "agreement": round(self.agreement, 4) if self.agreement is not None else None,
            "false_actions": self.false_actions,
            "misses": self.misses,
            "would_need_approval": self.needs_approval,
            "agent_would_have_moved_minor": dict(sorted(self.agent_money.items())),
            "staff_moved_minor": dict(sorted(self.staff_money.items())),
        }


@dataclass(kw_only=True)
class ToolRow:
    """One unit (tool on one channel and principal kind): its figures, stage and verdict."""

    channel: str
    kind: str
    tool: str
    stage: str
    next: str | None
    figures: Figures
    verdict: str = ""

    @property
    def unit(self) -> str:
        """How ``signoff rollout advance --unit`` names it."""
        return f"{self.channel}/{self.kind}/{self.tool}"


@dataclass(kw_only=True)
class Escalations:
    """Conversations of a channel and principal kind in shadow, and how many escalated."""

    conversations: int = 0
    escalated: int = 0

    @property
    def rate(self) -> float | None:
        return self.escalated / self.conversations if self.conversations else None


@dataclass(kw_only=True)
class Report:
    since: datetime
    until: datetime
    policy_version: str
    min_samples: int
    min_agreement: float
    window: timedelta = DEFAULT_WINDOW
    intents: dict[str, Figures] = field(default_factory=dict)
    tools: list[ToolRow] = field(default_factory=list)
    #: By amount band of the proposal (``tools.registry`` money; ``no amount`` for the rest).
    bands: dict[str, Figures] = field(default_factory=dict)
    #: By ``channel/kind`` in shadow.
    escalations: dict[str, Escalations] = field(default_factory=dict)
    #: Every proposal as compared, and every miss (``--details``).
    compared: list[Compared] = field(default_factory=list)
    missed: list[Miss] = field(default_factory=list)
    #: Staff actions made outside signoff (refunds, cancellations, returns in the shop's admin), by tool.
    outside: dict[str, int] = field(default_factory=dict)


def intent_of(blocks: list[dict[str, Any]]) -> str:
    """The opening message's intent: the tool groups :func:`tools.intent.classify` names, or ``unclassified``."""
    text = " ".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text")
    groups = classify(text)
    return "+".join(sorted(groups)) if groups else "unclassified"


def distinct(registry: Registry, shadow: list[ShadowProposal]) -> list[ShadowProposal]:
    """One sample per conversation, tool and compared arguments: the agent proposing the same
    recorded action again in a later turn of the same conversation is not a second sample."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for p in shadow:
        key = (p.conversation_id, p.tool, repr(compared_arguments(registry, p.tool, p.arguments)))
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def verdict(row: ToolRow, policy: Policy) -> str:
    """``ready`` or why not yet, against ``rollout.advance``."""
    adv = policy.rollout.advance
    f = row.figures
    if row.next is None:
        return "at the last stage"
    if f.proposed < adv.min_samples:
        return f"not yet: {f.proposed}/{adv.min_samples} samples"
    rate = f.agreement or 0.0
    if rate < adv.min_agreement:
        return f"not yet: agreement {pct(rate)} < {pct(adv.min_agreement)}"
    return f"ready for {row.next}"


def pct(x: float) -> str:
    return f"{x * 100:.1f}".rstrip("0").rstrip(".") + "%"


async def build_report(
    facts: RolloutFacts,
    *,
    registry: Registry,
    policy: Policy,
    since: datetime,
    until: datetime,
    window: timedelta = DEFAULT_WINDOW,
) -> Report:
    """The report over ``[since, until]`` under the active ``policy``; a staff action answers a
    proposal at most ``window`` after it."""
    shadow = distinct(registry, await facts.shadow_proposals(since=since, until=until))
    actions = {n for n, t in registry.tools.items() if t.meta.kind == "action" and not t.meta.runtime}
    staff = await facts.staff_actions(actions | {p.tool for p in shadow}, since=since, until=until + window)
    conversations = await facts.conversations(since=since, until=until)
    openings = await facts.opening_messages([p.conversation_id for p in shadow])
    adv = policy.rollout.advance
    report = Report(
        since=since,
        until=until,
        policy_version=policy.version,
        min_samples=adv.min_samples,
        min_agreement=adv.min_agreement,
        window=window,
    )
    report.compared = compare(registry, shadow, staff, window=window)
    report.missed = misses(policy, staff, report.compared, conversations, window=window)
    rows: dict[Unit, Figures] = defaultdict(Figures)
    for c in report.compared:
        p = c.proposal
        intent = report.intents.setdefault(intent_of(openings.get(p.conversation_id, [])), Figures())
        amount = report.bands.setdefault(band(money(registry, p.tool, p.arguments)), Figures())
        for figures in (intent, rows[c.unit], amount):
            figures.count(c, registry)
    for m in report.missed:
        rows[m.unit].misses += 1
        rows[m.unit].add_staff_money(registry, m.action.tool, m.action.arguments)
    _rows(report, rows, policy)
    for conv in conversations:
        if in_shadow(policy, conv.channel, conv.principal_kind):
            esc = report.escalations.setdefault(f"{conv.channel}/{conv.principal_kind}", Escalations())
            esc.conversations += 1
            esc.escalated += conv.escalated
    report.intents = dict(sorted(report.intents.items()))
    report.outside = dict(sorted((await facts.outside_counts(since=since, until=until)).items()))
    return report


def _rows(report: Report, rows: dict[Unit, Figures], policy: Policy) -> None:
    """One row per unit with figures, plus each shadow channel/kind with nothing recorded."""
    for surface, kinds in policy.rollout.channels.items():
        for staged in kinds:
            if in_shadow(policy, surface, staged) and not any(k[:2] == (surface, staged) for k in rows):
                rows[(surface, staged, "-")] = Figures()
    for (channel, kind, tool), figures in sorted(rows.items()):
        stage = policy.stage(channel, cast(PrincipalKind, kind), None if tool == "-" else tool)
        row = ToolRow(channel=channel, kind=kind, tool=tool, stage=stage, next=next_stage(stage), figures=figures)
        row.verdict = verdict(row, policy)
        report.tools.append(row)
