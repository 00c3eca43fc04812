"""The tool registry: JSON Schema the model sees, metadata it never sees.

A :class:`ToolDef` is data. The gatekeeper reads ``meta`` to decide; the
handler only runs once the gatekeeper says ``Execute``. Per-tool hooks:

* ``check(args, ctx)`` – business rules (refundable amount, window, state);
  run at judgement time and again immediately before execution.
* ``key(args, ctx)`` – the idempotency key from the operation's identity.
* ``money(args)`` – the amount at stake, for ceilings and aggregate limits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from tools.context import LOADABLE_GROUPS, ToolContext, ToolGroup

Handler = Callable[[dict[str, Any], ToolContext], Awaitable[dict[str, Any]]]
Check = Callable[[dict[str, Any], ToolContext], Awaitable[None]]
KeyFn = Callable[[dict[str, Any], ToolContext], str]
MoneyFn = Callable[[dict[str, Any]], "Money | None"]
#: Money whose amount only the system of record knows (a paid order's cancellation refunds it).
MoneyLookup = Callable[[dict[str, Any], ToolContext], Awaitable["Money | None"]]


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """What the model sees of a tool: name, description, JSON Schema. Nothing else."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Money:
    """An amount in minor units of a currency."""

    amount_minor: int
    currency: str


@dataclass(frozen=True, kw_only=True)
class ToolMeta:
    """What the runtime knows about a tool and the model never sees."""

    group: ToolGroup
    kind: Literal["read", "action"]
    #: 0 read · 1 reversible action · 2 moves money or cancels · 3 account takeover risk.
    risk_tier: int
    scopes: frozenset[str]
    idempotent: bool = True
    #: False: a crash mid-call is never retried; the ledger routes it to a human.
    retryable: bool = True
    timeout_s: float = 10.0
    approval_expiry_s: int = 24 * 3600
    requires_evidence: bool = False
    #: Actions that need the acting principal's confirmation of exact arguments (C6).
    needs_confirmation: bool = False
    #: Runtime tools (finish, load_tools, case tools, search_knowledge over signoff's own
    #: knowledge) never reach the backend: every backend offers them.
    runtime: bool = False


@dataclass(frozen=True, kw_only=True)
class ToolDef:
    """One tool: what the model sees, what the runtime knows, its handler and hooks."""

    name: str
    description: str
    input_schema: dict[str, Any]
    meta: ToolMeta
    handler: Handler
    check: Check | None = None
    key: KeyFn | None = None
    money: MoneyFn | None = None
    money_at_stake: MoneyLookup | None = None
    #: Which money rule applies: a refund's ceilings and daily caps, or a cancellation's own.
    money_kind: Literal["refund", "cancellation"] = "refund"
    #: What the action acts on (``order:O-1042``); a new confirmation supersedes a pending one
    #: of the same tool only on the same target. ``None``: the account as a whole.
    target: Callable[[dict[str, Any]], str] | None = None
    #: One line for the "other groups" listing and for approval cards.
    summary: Callable[[dict[str, Any]], str] | None = None
    #: The status an approver is shown once the action ran (``REFUNDED``).
    done_status: str = "DONE"
    #: The result field naming what the action created or changed (``refund_id``): the id
    #: ``finish`` may cite and the audit's ``action_id``. ``None``: the result names nothing.
    id_field: str | None = None
    #: A regex over the lower-cased reply matching a first-person, past-tense claim that this
    #: action happened (``finish`` refuses unbacked claims; the evaluation judges with it).
    claim: str | None = None
    #: How the demo planner says it did this (``{amount}``, ``{order}``, ``{id}`` filled in).
    done_phrase: str | None = None

    def spec(self) -> ToolSpec:
        """What the model sees of this tool."""
        return ToolSpec(name=self.name, description=self.description, input_schema=self.input_schema)

    def target_of(self, args: dict[str, Any]) -> str:
        """The confirmation target of a call with ``args`` (see :attr:`target`)."""
        return self.target(args) if self.target is not None else "account"

    def action_id(self, result: Any) -> str | None:
        """The id this action's ``result`` names (see :attr:`id_field`), if it names one."""
        if self.id_field is not None and isinstance(result, dict):
            value = result.get(self.id_field)
            if isinstance(value, str):
                return value
        return None

    def describe(self, args: dict[str, Any]) -> str:
        """One line describing a call with ``args`` (approval cards, confirmations)."""
        if self.summary is not None:
            return self.summary(args)
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in sorted(args.items()))})"


@dataclass(frozen=True, kw_only=True)
class Registry:
    """Every tool by name, in the stable order the prompt cache relies on."""

    tools: Mapping[str, ToolDef]
    group_blurbs: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, tools: Iterable[ToolDef], group_blurbs: Mapping[str, str] | None = None) -> Registry:
        """A registry of ``tools``; a name given twice is an error."""
        table: dict[str, ToolDef] = {}
        for tool in tools:
            if tool.name in table:
                raise ValueError(f"duplicate tool {tool.name}")
            table[tool.name] = tool
        return cls(tools=table, group_blurbs=dict(group_blurbs or {}))

    def get(self, name: str) -> ToolDef | None:
        """The tool ``name``, if known."""
        return self.tools.get(name)

    def names_for(self, groups: Iterable[str]) -> list[str]:
        """The names of the tools offered with these groups loaded (``always`` included)."""
        wanted = {"always", *groups}
        return [t.name for t in self.tools.values() if t.meta.group in wanted]

    def specs_for(self, groups: Iterable[str]) -> list[ToolSpec]:
        """Tool list in a stable order (registry order) so the cached prefix holds."""
        wanted = frozenset({"always", *groups})
        specs = self._specs.get(wanted)
        if specs is None:
            specs = self._specs[wanted] = tuple(t.spec() for t in self.tools.values() if t.meta.group in wanted)
        return list(specs)

    @cached_property
    def _specs(self) -> dict[frozenset[str], tuple[ToolSpec, ...]]:
        # The registry never changes once built: its specs per set of groups are made once.
        return {}

    def unloaded_listing(self, groups: Iterable[str]) -> str:
        """One line per loadable group not loaded yet, for the model."""
        loaded = set(groups)
        lines = [f"- {g}: {self.group_blurbs.get(g, '')}".rstrip() for g in LOADABLE_GROUPS if g not in loaded]
        return "\n".join(lines)
