"""``signoff rollout advance --unit U``: the policy text that moves one unit (channel/kind, or
channel/kind/tool) one stage on, with the next version, for a supervisor to apply.

The active text is edited in place where it can be (the channel's one-line mapping and the
``version`` line, comments kept); otherwise the whole policy is written out again. Either way
the result is parsed and checked to change exactly the unit's stage and the version.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from datetime import date
from typing import Any, cast

import yaml

from agent.errors import ConfigError
from agent.policy import STAGES, Policy, Stage, next_stage, parse_policy
from agent.policy_diff import Change, changes
from agent.policy_versions import next_version
from tools.context import PrincipalKind

_KINDS = ("customer", "rep", "supervisor")


@dataclass(frozen=True, kw_only=True)
class Advance:
    """The moved unit, its stages, and the new policy text with what it changes."""

    unit: str
    old: Stage
    new: Stage
    text: str
    policy: Policy
    changes: list[Change]


def parse_unit(text: str) -> tuple[str, str, str | None]:
    """``channel/kind`` or ``channel/kind/tool``; a :class:`ConfigError` naming ``--unit`` otherwise."""
    parts = text.strip().split("/")
    if len(parts) not in (2, 3) or not all(parts) or parts[1] not in _KINDS:
        raise ConfigError(
            f"--unit {text!r}: expected CHANNEL/KIND or CHANNEL/KIND/TOOL (KIND: customer, rep, supervisor), "
            "e.g. api/customer/issue_refund"
        )
    return parts[0], parts[1], parts[2] if len(parts) == 3 else None


def _moved(value: Any, tool: str | None, new: Stage, default: Stage) -> Any:
    """The channel/kind entry ``value`` with the unit at ``new``."""
    if tool is None:
        if isinstance(value, dict):
            return {**value, "stage": new}
        return new
    if isinstance(value, dict):
        return {**value, "tools": {**value.get("tools", {}), tool: new}}
    return {"stage": value or default, "tools": {tool: new}}


def advance(policy: Policy, text: str, unit: str, today: date) -> Advance:
    """Move ``unit`` one stage on in the active ``policy`` (its YAML ``text``)."""
    channel, kind, tool = parse_unit(unit)
    old = policy.stage(channel, cast(PrincipalKind, kind), tool)
    new = next_stage(old)
    if new is None:
        raise ConfigError(f"--unit {unit}: already at the last stage ({STAGES[-1]})")
    data = yaml.safe_load(text)
    channels = data.setdefault("rollout", {}).setdefault("channels", {})
    entry = dict(channels.get(channel) or {})
    entry[kind] = _moved(entry.get(kind), tool, new, policy.rollout.default)
    version = next_version(policy.version, today)
    new_text = _edited(text, channel, entry, version)
    if new_text is None or not _only(policy, new_text, unit):
        whole = copy.deepcopy(data)
        whole["rollout"]["channels"][channel] = entry
        whole["version"] = version
        new_text = yaml.safe_dump(whole, sort_keys=False, width=100)
    moved = parse_policy(new_text, source=f"--unit {unit}", setting="")
    return Advance(unit=unit, old=old, new=new, text=new_text, policy=moved, changes=changes(policy, moved))


def _edited(text: str, channel: str, entry: dict[str, Any], version: str) -> str | None:
    """``text`` with its ``version`` line and the channel's one-line mapping replaced; ``None``
    when either is not written that way."""
    flow = yaml.safe_dump(entry, default_flow_style=True, sort_keys=False, width=10**6).strip()
    line = re.compile(rf"^(\s+){re.escape(channel)}:\s*\{{.*\}}\s*$", re.M)
    ver = re.compile(r"^version:.*$", re.M)
    if len(line.findall(text)) != 1 or len(ver.findall(text)) != 1:
        return None
    text = line.sub(lambda m: f"{m.group(1)}{channel}: {flow}", text)
    return ver.sub(lambda _m: f'version: "{version}"', text)


def _only(policy: Policy, new_text: str, unit: str) -> bool:
    """Whether ``new_text`` parses and changes nothing but the version and ``unit``'s channel."""
    try:
        moved = parse_policy(new_text, source=unit, setting="")
    except ConfigError:
        return False
    channel = unit.split("/")[0]
    return all(c.path == "version" or c.path.startswith(f"rollout.channels.{channel}.") for c in changes(policy, moved))
