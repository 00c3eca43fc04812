"""``signoff rollout report``: how the shadow stage's proposals compare with what staff did,
per intent and per tool, and whether each tool meets the policy's ``rollout.advance``
thresholds to move to the next stage (C16).

A shadow proposal is *matched* by a staff action when a rep or supervisor executed the same
tool on the same target (the tool's ``target``, e.g. ``order:O-1042``) for the same customer,
after the proposal and inside the window; each staff action matches one proposal at most.
It *agrees* when the arguments are also the same, free text (notes, messages) and evidence
aside: the amount, currency, order, reason. Agreement = agreeing / proposed: a proposal
staff never acted on counts against the agent.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from agent.errors import ConfigError
from agent.policy import Policy, next_stage
from storage.rollout import RolloutFacts, ShadowProposal, StaffAction
from tools.context import PrincipalKind
from tools.intent import classify
from tools.registry import Registry
from tools.schemas import NO_INVISIBLE_CONTROLS_PATTERN

_DURATION = re.compile(r"^(\d{1,6})([mhdw])$")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: The window when ``--since`` is not given.
DEFAULT_SINCE = "30d"


def parse_since(text: str, now: datetime) -> datetime:
    """``--since``: a duration before ``now`` (``90m``, ``24h``, ``7d``, ``2w``) or an ISO date or
    date-time (a naive one is UTC). A clear :class:`ConfigError` otherwise."""
    raw = text.strip()
    m = _DURATION.match(raw)
    if m:
        amount = int(m.group(1))
        if amount == 0:
            raise ConfigError(f"--since {text!r}: a duration must be more than zero")
        return now - timedelta(seconds=amount * _UNIT_S[m.group(2)])
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
    """Counts for one group of shadow proposals."""

    proposed: int = 0
    #: Staff executed the same tool on the same target afterwards.
    staff_did: int = 0
    #: ... with the same arguments.
    same_args: int = 0

    @property
    def agreement(self) -> float | None:
        return self.same_args / self.proposed if self.proposed else None

    def as_json(self) -> dict[str, Any]:
        return {
            "proposed": self.proposed,
            "staff_did_same": self.staff_did,
            "same_arguments": self.same_args,
            "agreement": round(self.agreement, 4) if self.agreement is not None else None,
        }


@dataclass(kw_only=True)
class ToolRow:
    """One tool on one channel and principal kind: its figures, stage and verdict."""

    channel: str
    kind: str
    tool: str
    stage: str
    next: str | None
    figures: Figures
    verdict: str = ""


@dataclass(kw_only=True)
class Report:
    since: datetime
    until: datetime
    policy_version: str
    min_samples: int
    min_agreement: float
    intents: dict[str, Figures] = field(default_factory=dict)
    tools: list[ToolRow] = field(default_factory=list)
    #: Staff actions made outside signoff (refunds, cancellations, returns in the shop's admin), by tool.
    outside: dict[str, int] = field(default_factory=dict)


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


def _target(registry: Registry, tool: str, args: Any) -> str:
    definition = registry.get(tool)
    if definition is None or not isinstance(args, dict):
        return "account"
    try:
        return definition.target_of(args)
    except (KeyError, TypeError, ValueError):
        return "account"


def intent_of(blocks: list[dict[str, Any]]) -> str:
    """The opening message's intent: the tool groups :func:`tools.intent.classify` names, or ``unclassified``."""
    text = " ".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text")
    groups = classify(text)
    return "+".join(sorted(groups)) if groups else "unclassified"


def match(registry: Registry, shadow: list[ShadowProposal], staff: list[StaffAction]) -> dict[str, tuple[bool, bool]]:
    """For each shadow proposal id: (staff did the same action, with the same arguments).

    Proposals are taken oldest first; each takes the earliest later staff action on the same
    tool, customer and target that no earlier proposal took, preferring one with the same arguments."""
    pool: dict[tuple[str, str | None, str], list[StaffAction]] = defaultdict(list)
    for a in staff:
        pool[(a.tool, a.customer_id, _target(registry, a.tool, a.arguments))].append(a)
    out: dict[str, tuple[bool, bool]] = {}
    for p in sorted(shadow, key=lambda x: (x.created_at, x.id)):
        candidates = [
            a
            for a in pool[(p.tool, p.customer_id, _target(registry, p.tool, p.arguments))]
            if a.created_at > p.created_at
        ]
        want = compared_arguments(registry, p.tool, p.arguments)
        same = [a for a in candidates if compared_arguments(registry, a.tool, a.arguments) == want]
        if not candidates:
            out[p.id] = (False, False)
            continue
        chosen = (same or candidates)[0]
        pool[(p.tool, p.customer_id, _target(registry, p.tool, p.arguments))].remove(chosen)
        out[p.id] = (True, bool(same))
    return out


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
        return f"not yet: agreement {_pct(rate)} < {_pct(adv.min_agreement)}"
    return f"ready for {row.next}"


def _pct(x: float) -> str:
    return f"{x * 100:.1f}".rstrip("0").rstrip(".") + "%"


async def build_report(
    facts: RolloutFacts, *, registry: Registry, policy: Policy, since: datetime, until: datetime
) -> Report:
    """The report over ``[since, until]`` under the active ``policy``."""
    shadow = distinct(registry, await facts.shadow_proposals(since=since, until=until))
    staff = await facts.staff_actions({p.tool for p in shadow}, since=since, until=until)
    openings = await facts.opening_messages([p.conversation_id for p in shadow])
    matched = match(registry, shadow, staff)
    adv = policy.rollout.advance
    report = Report(
        since=since,
        until=until,
        policy_version=policy.version,
        min_samples=adv.min_samples,
        min_agreement=adv.min_agreement,
    )
    rows: dict[tuple[str, str, str], Figures] = defaultdict(Figures)
    for p in shadow:
        did, same = matched[p.id]
        for figures in (
            report.intents.setdefault(intent_of(openings.get(p.conversation_id, [])), Figures()),
            rows[(p.channel, p.principal_kind, p.tool)],
        ):
            figures.proposed += 1
            figures.staff_did += did
            figures.same_args += same
    for surface, kinds in policy.rollout.channels.items():  # shadow-stage surfaces with nothing recorded yet
        for staged, at in kinds.items():
            if at == "shadow" and not any(k[:2] == (surface, staged) for k in rows):
                rows[(surface, staged, "-")] = Figures()
    for (channel, kind, tool), figures in sorted(rows.items()):
        stage = policy.stage(channel, cast(PrincipalKind, kind))
        row = ToolRow(channel=channel, kind=kind, tool=tool, stage=stage, next=next_stage(stage), figures=figures)
        row.verdict = verdict(row, policy)
        report.tools.append(row)
    report.intents = dict(sorted(report.intents.items()))
    report.outside = dict(sorted((await facts.outside_counts(since=since, until=until)).items()))
    return report


def as_json(report: Report) -> dict[str, Any]:
    """The report as plain JSON values (``--json``)."""
    return {
        "since": report.since.isoformat(),
        "until": report.until.isoformat(),
        "policy_version": report.policy_version,
        "advance": {"min_samples": report.min_samples, "min_agreement": report.min_agreement},
        "intents": {k: v.as_json() for k, v in report.intents.items()},
        "tools": [
            {
                "channel": r.channel,
                "principal_kind": r.kind,
                "tool": r.tool,
                "stage": r.stage,
                "next_stage": r.next,
                **r.figures.as_json(),
                "verdict": r.verdict,
            }
            for r in report.tools
        ],
        "outside_staff_actions": dict(report.outside),
    }


_COLUMNS = (("proposed", 8), ("staff did", 10), ("same args", 10), ("agreement", 10))


def _head(title: str, width: int) -> str:
    return f"{title:<{width + 2}}" + "".join(f"{name:>{w}}" for name, w in _COLUMNS)


def _line(label: str, f: Figures, width: int) -> str:
    rate = _pct(f.agreement) if f.agreement is not None else "-"
    cells = (f.proposed, f.staff_did, f.same_args, rate)
    return f"  {label:<{width}}" + "".join(f"{c:>{w}}" for c, (_, w) in zip(cells, _COLUMNS, strict=True))


def render(report: Report) -> str:
    """The report as text for a terminal."""
    window = f"{report.since:%Y-%m-%d %H:%M}Z .. {report.until:%Y-%m-%d %H:%M}Z"
    out = [
        f"rollout report {window}, policy {report.policy_version}",
        f"advance when: at least {report.min_samples} samples and agreement >= {_pct(report.min_agreement)} "
        "(staff executed the same tool on the same target with the same arguments, afterwards)",
        "",
        _head("by intent", 26),
    ]
    if not report.intents:
        out.append("  (no shadow proposals in the window)")
    for name, f in report.intents.items():
        out.append(_line(name, f, 26))
    out += [
        "",
        _head("by tool (channel/kind tool)", 40) + f"  {'stage':<9} verdict",
    ]
    for r in report.tools:
        label = f"{r.channel}/{r.kind} {r.tool}"
        out.append(f"{_line(label, r.figures, 40)}  {r.stage:<9} {r.verdict}")
    if not report.tools:
        out.append("  (no channel or principal kind is in the shadow stage and nothing was recorded)")
    outside = ", ".join(f"{tool} {n}" for tool, n in report.outside.items()) or "none"
    out += ["", f"staff actions outside signoff (the shop's admin): {outside}"]
    return "\n".join(out) + "\n"
