"""``signoff rollout report`` as text for a terminal (with ``--details``: every proposal and
miss, by conversation) and as JSON (``--json``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from agent.rollout import Figures, Report, pct
from agent.rollout_compare import Compared, Miss
from storage.rollout import StaffAction
from tools.results import format_money

_COLUMNS = (
    ("proposed", 9),
    ("staff did", 10),
    ("same args", 10),
    ("agreement", 10),
    ("false", 6),
    ("misses", 7),
    ("approval", 9),
)


def _hours(report: Report) -> str:
    s = int(report.window.total_seconds())
    return f"{s // 3600} h" if s % 3600 == 0 else f"{s // 60} min"


def _money(m: Counter[str]) -> str:
    return ", ".join(format_money(v, cur) for cur, v in sorted(m.items())) or "-"


def _action(a: StaffAction) -> dict[str, Any]:
    return {
        "id": a.proposal_id,
        "tool": a.tool,
        "arguments": a.arguments,
        "at": a.created_at.isoformat(),
        "by": a.principal,
        "source": a.source,
        "conversation_id": a.conversation_id,
    }


def _compared_json(c: Compared) -> dict[str, Any]:
    p = c.proposal
    return {
        "conversation_id": p.conversation_id,
        "proposal_id": p.id,
        "unit": "/".join(c.unit),
        "at": p.created_at.isoformat(),
        "arguments": p.arguments,
        "outcome": c.outcome,
        "would_need_approval": c.would_need_approval,
        "staff_action": _action(c.action) if c.action is not None else None,
        "differs": list(c.differs),
    }


def as_json(report: Report) -> dict[str, Any]:
    """The report as plain JSON values (``--json``; details included)."""
    return {
        "since": report.since.isoformat(),
        "until": report.until.isoformat(),
        "policy_version": report.policy_version,
        "window_s": int(report.window.total_seconds()),
        "advance": {"min_samples": report.min_samples, "min_agreement": report.min_agreement},
        "intents": {k: v.as_json() for k, v in report.intents.items()},
        "tools": [
            {
                "channel": r.channel,
                "principal_kind": r.kind,
                "tool": r.tool,
                "unit": r.unit,
                "stage": r.stage,
                "next_stage": r.next,
                **r.figures.as_json(),
                "verdict": r.verdict,
            }
            for r in report.tools
        ],
        "bands": {k: v.as_json() for k, v in report.bands.items()},
        "escalations": {
            k: {"conversations": e.conversations, "escalated": e.escalated, "rate": e.rate}
            for k, e in report.escalations.items()
        },
        "details": [_compared_json(c) for c in report.compared],
        "misses": [
            {"conversation_id": m.conversation.id, "unit": "/".join(m.unit), "staff_action": _action(m.action)}
            for m in report.missed
        ],
        "outside_staff_actions": dict(report.outside),
    }


def _head(title: str, width: int) -> str:
    return f"{title:<{width + 2}}" + "".join(f"{name:>{w}}" for name, w in _COLUMNS)


def _line(label: str, f: Figures, width: int) -> str:
    rate = pct(f.agreement) if f.agreement is not None else "-"
    cells = (f.proposed, f.staff_did, f.same_args, rate, f.false_actions, f.misses, f.needs_approval)
    return f"  {label:<{width}}" + "".join(f"{c:>{w}}" for c, (_, w) in zip(cells, _COLUMNS, strict=True))


def render(report: Report, *, details: bool = False) -> str:
    """The report as text for a terminal (``details``: each proposal and miss too)."""
    window = f"{report.since:%Y-%m-%d %H:%M}Z .. {report.until:%Y-%m-%d %H:%M}Z"
    out = [
        f"rollout report {window}, policy {report.policy_version}, matching window {_hours(report)}",
        f"advance when: at least {report.min_samples} samples and agreement >= {pct(report.min_agreement)} "
        "(staff executed the same tool on the same target with the same arguments, afterwards)",
        "",
        _head("by intent", 26),
        *(_line(name, f, 26) for name, f in report.intents.items()),
    ]
    if not report.intents:
        out.append("  (no shadow proposals in the window)")
    out += ["", _head("by unit (channel/kind/tool)", 40) + f"  {'stage':<9} verdict"]
    out += [f"{_line(r.unit, r.figures, 40)}  {r.stage:<9} {r.verdict}" for r in report.tools]
    if not report.tools:
        out.append("  (no channel or principal kind is in the shadow stage and nothing was recorded)")
    out += ["", "money (agent would have moved / staff moved)"]
    out += [
        f"  {r.unit}: {_money(r.figures.agent_money)} / {_money(r.figures.staff_money)}"
        for r in report.tools
        if r.figures.agent_money or r.figures.staff_money
    ] or ["  (none)"]
    out += ["", _head("by amount band", 26), *(_line(b, f, 26) for b, f in report.bands.items())]
    out += ["", "escalation rate (conversations in shadow)"]
    out += [
        f"  {k}: {e.escalated}/{e.conversations}" + (f" = {pct(e.rate)}" if e.rate is not None else "")
        for k, e in sorted(report.escalations.items())
    ] or ["  (no conversations in shadow)"]
    outside = ", ".join(f"{tool} {n}" for tool, n in report.outside.items()) or "none"
    out += ["", f"staff actions outside signoff (the shop's admin): {outside}"]
    if details:
        out += ["", "details", *(_detail(c) for c in report.compared), *(_miss(m) for m in report.missed)]
    return "\n".join(out) + "\n"


def _staff(a: StaffAction) -> str:
    return f"{a.tool} {_args(a.arguments)} by {a.principal} via {a.source} at {a.created_at:%Y-%m-%d %H:%M}Z"


def _args(args: Any) -> str:
    if not isinstance(args, dict):
        return str(args)
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(args.items()) if k != "evidence") + "}"


def _detail(c: Compared) -> str:
    p = c.proposal
    head = f"  {p.conversation_id} {'/'.join(c.unit)} {_args(p.arguments)}"
    need = " (would have needed approval)" if c.would_need_approval else ""
    if c.action is None:
        return f"{head}{need}: {c.outcome}: no staff action within the window"
    differs = f"; differs: {', '.join(c.differs)}" if c.differs else ""
    return f"{head}{need}: {c.outcome}: {_staff(c.action)}{differs}"


def _miss(m: Miss) -> str:
    return f"  {m.conversation.id} {'/'.join(m.unit)}: miss: the agent proposed nothing; {_staff(m.action)}"
