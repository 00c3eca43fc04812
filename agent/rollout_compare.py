"""How each shadow proposal compares with what staff did, inside a matching window.

A proposal is compared with the staff actions on the same customer and target (the tool's
``target``, e.g. ``order:O-1042``) taken after it and at most ``window`` later (default 24 h);
each staff action answers one proposal at most, the earliest that takes it. In order of
preference a proposal is:

- ``agree``: staff executed the same tool with the same arguments (free text and evidence aside);
- ``differ``: the same tool, other arguments (the fields that differ are named);
- ``opposite``: staff did something else to that target (cancelled the order the agent would
  have refunded) — a false action;
- ``none``: staff did nothing about it in the window — a false action too.

A *miss* is a staff action no proposal took, on a customer who was talking to the agent in a
unit (channel, principal kind, tool) the policy puts in shadow, in the window after that
conversation started: the agent proposed nothing where staff acted.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from agent.errors import ConfigError
from agent.policy import Policy, UnitStages
from storage.rollout import ConversationFacts, ShadowProposal, StaffAction
from tools.registry import Money, Registry
from tools.schemas import NO_INVISIBLE_CONTROLS_PATTERN

#: (channel, principal kind, tool): the unit a stage and a verdict are given for.
Unit = tuple[str, str, str]
Outcome = Literal["agree", "differ", "opposite", "none"]
DEFAULT_WINDOW = timedelta(hours=24)
DURATION = re.compile(r"^(\d{1,6})([mhdw])$")
UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: Amount bands (minor units of the proposal's currency): upper bounds, exclusive.
BANDS: tuple[tuple[str, int | None], ...] = (
    ("< 25", 2500),
    ("25-100", 10000),
    ("100-500", 50000),
    (">= 500", None),
)
NO_AMOUNT = "no amount"


def parse_duration(text: str, *, option: str) -> timedelta:
    """``90m``, ``24h``, ``7d``, ``2w``: a positive duration, or a :class:`ConfigError` naming ``option``."""
    m = DURATION.match(text.strip())
    if m is None or int(m.group(1)) == 0:
        raise ConfigError(f"{option} {text!r}: not a positive duration (90m, 24h, 7d, 2w)")
    return timedelta(seconds=int(m.group(1)) * UNIT_S[m.group(2)])


@dataclass(frozen=True, kw_only=True)
class Compared:
    """One shadow proposal and the staff action it was matched to (if any)."""

    proposal: ShadowProposal
    outcome: Outcome
    action: StaffAction | None
    #: The compared argument fields whose values differ (``tool`` when staff did something else).
    differs: tuple[str, ...] = ()

    @property
    def unit(self) -> Unit:
        p = self.proposal
        return (p.channel, p.principal_kind, p.tool)

    @property
    def false_action(self) -> bool:
        return self.outcome in ("opposite", "none")

    @property
    def would_need_approval(self) -> bool:
        r = self.proposal.result
        return isinstance(r, dict) and r.get("would_need") == "approval"


@dataclass(frozen=True, kw_only=True)
class Miss:
    """A staff action in a shadow conversation's window that the agent proposed nothing for."""

    action: StaffAction
    conversation: ConversationFacts

    @property
    def unit(self) -> Unit:
        c = self.conversation
        return (c.channel, c.principal_kind, self.action.tool)


def compared_arguments(registry: Registry, tool: str, args: Any) -> Any:
    """The arguments that must be the same for staff to agree: free text and evidence left out."""
    if not isinstance(args, dict):
        return args
    definition = registry.get(tool)
    props = definition.input_schema.get("properties", {}) if definition is not None else {}

    def free(name: str) -> bool:
        schema = props.get(name, {})
        return name == "evidence" or schema.get("pattern") == NO_INVISIBLE_CONTROLS_PATTERN

    return {k: v for k, v in sorted(args.items()) if not free(k)}


def target(registry: Registry, tool: str, args: Any) -> str:
    """What the action is on (``order:O-1042``); ``account`` when the tool names nothing."""
    definition = registry.get(tool)
    if definition is None or not isinstance(args, dict):
        return "account"
    try:
        return definition.target_of(args)
    except (KeyError, TypeError, ValueError):
        return "account"


def money(registry: Registry, tool: str, args: Any) -> Money | None:
    """The money an action's arguments move (a refund's amount); ``None`` when they name none."""
    definition = registry.get(tool)
    if definition is None or definition.money is None or not isinstance(args, dict):
        return None
    try:
        return definition.money(args)
    except (KeyError, TypeError, ValueError):
        return None


def band(m: Money | None) -> str:
    """The amount band of ``m`` (see :data:`BANDS`)."""
    if m is None:
        return NO_AMOUNT
    return next(label for label, upper in BANDS if upper is None or m.amount_minor < upper)


def _differs(registry: Registry, p: ShadowProposal, a: StaffAction) -> tuple[str, ...]:
    if a.tool != p.tool:
        return ("tool",)
    mine = compared_arguments(registry, p.tool, p.arguments)
    theirs = compared_arguments(registry, a.tool, a.arguments)
    if not isinstance(mine, dict) or not isinstance(theirs, dict):
        return () if mine == theirs else ("arguments",)
    return tuple(sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k)))


def _rank(registry: Registry, p: ShadowProposal, a: StaffAction) -> int:
    """0: the same action; 1: the same tool, other arguments; 2: something else to that target."""
    if a.tool != p.tool:
        return 2
    return 1 if _differs(registry, p, a) else 0


def compare(
    registry: Registry, shadow: list[ShadowProposal], staff: list[StaffAction], *, window: timedelta
) -> list[Compared]:
    """Each proposal (oldest first) with the staff action that answers it (see the module doc)."""
    pool: dict[tuple[str | None, str], list[StaffAction]] = defaultdict(list)
    for a in sorted(staff, key=lambda x: (x.created_at, x.proposal_id)):
        pool[(a.customer_id, target(registry, a.tool, a.arguments))].append(a)
    out: list[Compared] = []
    for p in sorted(shadow, key=lambda x: (x.created_at, x.id)):
        key = (p.customer_id, target(registry, p.tool, p.arguments))
        near = [a for a in pool[key] if p.created_at < a.created_at <= p.created_at + window]
        ranked = sorted(near, key=lambda a: _rank(registry, p, a))  # stable: the earliest of a rank
        if not ranked:
            out.append(Compared(proposal=p, outcome="none", action=None))
            continue
        chosen = ranked[0]
        pool[key].remove(chosen)
        differs = _differs(registry, p, chosen)
        outcome: Outcome = "opposite" if chosen.tool != p.tool else ("differ" if differs else "agree")
        out.append(Compared(proposal=p, outcome=outcome, action=chosen, differs=differs))
    return out


def in_shadow(policy: Policy, channel: str, kind: str) -> bool:
    """Whether any tool of ``kind`` on ``channel`` is in the shadow stage."""
    set_ = policy.rollout.channels.get(channel, {}).get(kind)  # type: ignore[call-overload]
    if isinstance(set_, UnitStages):
        return "shadow" in (set_.stage or policy.rollout.default, *set_.tools.values())
    return (set_ or policy.rollout.default) == "shadow"


def misses(
    policy: Policy,
    staff: list[StaffAction],
    compared: list[Compared],
    conversations: list[ConversationFacts],
    *,
    window: timedelta,
) -> list[Miss]:
    """The staff actions no proposal took, each in the shadow conversation it answered (the
    customer's latest one started at most ``window`` before it, on a unit in shadow)."""
    taken = {c.action.proposal_id for c in compared if c.action is not None}
    by_customer: dict[str | None, list[ConversationFacts]] = defaultdict(list)
    for c in conversations:
        by_customer[c.customer_id].append(c)
    out = []
    for a in staff:
        if a.proposal_id in taken or a.customer_id is None:
            continue
        open_ = [
            c
            for c in by_customer[a.customer_id]
            if c.id != a.conversation_id
            and c.started_at <= a.created_at <= c.started_at + window
            and policy.stage(c.channel, c.principal_kind, a.tool) == "shadow"  # type: ignore[arg-type]
        ]
        if open_:
            out.append(Miss(action=a, conversation=max(open_, key=lambda c: c.started_at)))
    return out
