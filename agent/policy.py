"""The versioned policy: ceilings, tiers, limits, approvers, expiries, rollout.

YAML, validated strictly (unknown keys, wrong types and duplicate keys are refused), then
only consulted as data. The model never sees these numbers. The active policy is the
newest version applied to the database (``signoff policy apply``, :mod:`storage.policies`),
else ``SIGNOFF_POLICY_FILE``, else the bundled default (:func:`active_policy`).
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent.errors import ConfigError
from tools.context import PrincipalKind, Rules, StaffRole

Stage = Literal["shadow", "assist", "reads", "actions", "full"]
StagedKind = Literal["customer", "rep", "supervisor"]
#: Amounts, counts and seconds in per-currency/per-tool tables: a negative one is a typo.
NonNegative = Annotated[int, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Scopes(_Strict):
    customer: frozenset[str]
    rep: frozenset[str]
    supervisor: frozenset[str]
    system: frozenset[str]


class Ceilings(_Strict):
    customer: dict[str, NonNegative]
    rep: dict[str, NonNegative]
    supervisor: dict[str, NonNegative]
    default: int = Field(ge=0)


class Approvers(_Strict):
    required_role: StaffRole
    roles_that_may_approve: frozenset[StaffRole]


class Limits(_Strict):
    refund_window_days: int = Field(ge=0)
    return_window_days: int = Field(ge=0)
    max_refunds_per_customer_per_day: int = Field(ge=0)
    max_actions_per_run: int = Field(ge=1)
    max_calls_per_tool_per_run: int = Field(ge=1)
    max_refund_minor_per_customer_per_day: dict[str, NonNegative]
    max_refund_minor_per_customer_per_day_default: int = Field(ge=0)
    untrusted_text_limit: int = Field(ge=50, le=10000)
    #: Refund money one staff member (by staff id) may move per day across all customers;
    #: above it the refund is routed to a supervisor (approval), never refused outright.
    max_refund_minor_per_staff_per_day: dict[str, NonNegative]
    max_refund_minor_per_staff_per_day_default: int = Field(ge=0)


class PrincipalLimits(_Strict):
    """Per-customer limits across all of the customer's conversations (rolling windows,
    counted from the database so they hold across processes and restarts)."""

    max_new_conversations_per_hour: int = Field(ge=1)
    max_model_tokens_per_day: int = Field(ge=1000)
    max_actions_per_day: int = Field(ge=1)


class Strangers(_Strict):
    """Budgets shared by the principals bound to no account (a Slack user nobody linked, an
    email sender the provider did not vouch for). Each such principal has the ``customer``
    limits under its own key; together, all of one Slack team or one sender domain share these
    (so new identities cannot multiply the budget)."""

    max_new_conversations_per_hour_per_group: int = Field(default=60, ge=1, strict=True)
    max_model_tokens_per_day_per_group: int = Field(default=1_000_000, ge=1000, strict=True)


class InboundLimits(_Strict):
    """The accept-first faces' queue: above ``max_queued_jobs`` inbound messages waiting for the
    worker, a new one is turned away (HTTP faces: 503 with ``Retry-After``)."""

    max_queued_jobs: int = Field(default=1000, ge=1, strict=True)
    retry_after_s: int = Field(default=30, ge=1, le=3600, strict=True)


class RunLimits(_Strict):
    max_steps_per_turn: int = Field(ge=1, le=100)
    max_tokens_per_conversation: int = Field(ge=1000)
    max_seconds_per_turn: float = Field(gt=0)


class Cancellations(_Strict):
    """Cancelling an order that has not shipped: its own money rule, not a refund's.

    By default a principal cancels their own PENDING/PAID order on confirmation alone.
    A retailer that wants a supervisor above some amount sets ``approval_above`` per
    currency (the day's cancellations for the customer, this one included, are compared).
    """

    approval_above: dict[str, NonNegative] = Field(default_factory=dict)


class Advance(_Strict):
    """When ``signoff rollout report`` calls a tool ready for the next stage: at least
    ``min_samples`` shadow proposals in the window, and at least ``min_agreement`` of them
    matched by what staff actually did (the same tool, target and arguments)."""

    min_samples: int = Field(default=50, ge=1, strict=True)
    min_agreement: float = Field(default=0.95, ge=0, le=1, strict=True)


class UnitStages(_Strict):
    """One channel and principal kind staged tool by tool: ``stage`` for every tool not listed
    (``None``: ``rollout.default``), ``tools`` for those that moved on their own
    (``rollout.channels.api.customer.tools.issue_refund: assist``)."""

    stage: Stage | None = None
    tools: dict[str, Stage] = Field(default_factory=dict)

    def __str__(self) -> str:
        own = ", ".join(f"{tool}={stage}" for tool, stage in sorted(self.tools.items()))
        return f"{self.stage or '(default)'}" + (f" ({own})" if own else "")


class Rollout(_Strict):
    default: Stage
    #: Per channel and principal kind: a stage, or :class:`UnitStages` (a stage per tool).
    channels: dict[str, dict[StagedKind, Stage | UnitStages]]
    enabled_actions: frozenset[str]
    advance: Advance = Field(default_factory=Advance)


Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class SupportHours(_Strict):
    """When people answer hand-offs (``SIGNOFF_HANDOFF_SLA`` counts only then): the customer is
    told honestly when a person will reply. Times are ``HH:MM`` in ``timezone`` (IANA name)."""

    timezone: str = "UTC"
    days: frozenset[Weekday] = frozenset(WEEKDAYS[:5])
    opens: time = time(9, 0)
    closes: time = time(17, 0)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}") from None
        return value

    def is_open(self, at: datetime) -> bool:
        """Whether people are on at ``at`` (an aware time)."""
        local = at.astimezone(ZoneInfo(self.timezone))
        return WEEKDAYS[local.weekday()] in self.days and self.opens <= local.time() < self.closes

    def next_opening(self, at: datetime) -> datetime:
        """``at`` itself while open, else when people are next on (an aware local time)."""
        local = at.astimezone(ZoneInfo(self.timezone))
        if self.is_open(local):
            return local
        for ahead in range(8):
            day = (local + timedelta(days=ahead)).date()
            start = datetime.combine(day, self.opens, tzinfo=local.tzinfo)
            if WEEKDAYS[day.weekday()] in self.days and start > local:
                return start
        return local  # no day listed: nobody is ever scheduled; say "as soon as possible"


class Policy(_Strict):
    version: str = Field(min_length=1, max_length=32)
    scopes: Scopes
    ceilings: Ceilings
    dual_approval_above: dict[str, NonNegative]
    dual_approval_default: int = Field(ge=0)
    always_approve_tier: int = Field(ge=1, le=9)
    approvers: Approvers
    approval_expiry_s: dict[str, NonNegative]
    limits: Limits
    run: RunLimits
    customer: PrincipalLimits
    rollout: Rollout
    cancellations: Cancellations = Field(default_factory=Cancellations)
    strangers: Strangers = Field(default_factory=Strangers)
    inbound: InboundLimits = Field(default_factory=InboundLimits)
    support_hours: SupportHours = Field(default_factory=SupportHours)

    # -- lookups -----------------------------------------------------------------
    def scopes_for(self, kind: PrincipalKind) -> frozenset[str]:
        return getattr(self.scopes, kind)

    def ceiling(self, kind: PrincipalKind, currency: str) -> int:
        if kind == "system":
            return 0
        table: dict[str, int] = getattr(self.ceilings, kind)
        return table.get(currency, self.ceilings.default)

    def dual_threshold(self, currency: str) -> int:
        return self.dual_approval_above.get(currency, self.dual_approval_default)

    def cancellation_threshold(self, currency: str) -> int | None:
        """Above this day's cancellation money a supervisor approves; ``None``: never."""
        return self.cancellations.approval_above.get(currency)

    def daily_refund_cap(self, currency: str) -> int:
        lim = self.limits
        return lim.max_refund_minor_per_customer_per_day.get(
            currency, lim.max_refund_minor_per_customer_per_day_default
        )

    def staff_daily_refund_cap(self, currency: str) -> int:
        lim = self.limits
        return lim.max_refund_minor_per_staff_per_day.get(currency, lim.max_refund_minor_per_staff_per_day_default)

    def expiry_s(self, tool: str) -> int:
        return self.approval_expiry_s.get(tool, self.approval_expiry_s.get("default", 86400))

    def stage(self, channel: str, kind: PrincipalKind, tool: str | None = None) -> Stage:
        """How far the agent may go for ``kind`` on ``channel`` (with ``tool``: that tool's own
        stage where the policy sets one, else the channel and kind's)."""
        if kind == "system":
            return "full"
        set_ = self.rollout.channels.get(channel, {}).get(kind)
        if isinstance(set_, UnitStages):
            own = set_.tools.get(tool) if tool is not None else None
            return own or set_.stage or self.rollout.default
        return set_ or self.rollout.default

    def rules(self) -> Rules:
        lim = self.limits
        return Rules(
            refund_window_days=lim.refund_window_days,
            max_refunds_per_customer_per_day=lim.max_refunds_per_customer_per_day,
            return_window_days=lim.return_window_days,
            untrusted_text_limit=lim.untrusted_text_limit,
        )


#: The stages in the order a rollout moves through them (C16).
STAGES: tuple[Stage, ...] = ("shadow", "assist", "reads", "actions", "full")


def next_stage(stage: Stage) -> Stage | None:
    """The stage after ``stage``; ``None`` at the last one."""
    i = STAGES.index(stage)
    return STAGES[i + 1] if i + 1 < len(STAGES) else None


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping naming one key twice (the second would win silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_policy(text: str, *, source: str = "policy", setting: str = "SIGNOFF_POLICY_FILE") -> Policy:
    """Parse and validate policy YAML; errors name the file (after ``setting``, when given) and the field."""
    lead = f"{setting}: {source}" if setting else source
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise ConfigError(f"{lead}: not valid YAML{at}: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{lead}: must be a mapping")
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        # An unknown key first: a misspelt section also shows up as the real one missing.
        err = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"{lead}: {where}: {err['msg']}") from None


def read_policy_text(path: Path | None = None) -> tuple[str, str]:
    """The YAML text at ``path`` (or the bundled default's) and how to name where it came from."""
    if path is None:
        return resources.files("agent").joinpath("data/policy.yaml").read_text(encoding="utf-8"), "bundled default"
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except OSError as exc:
        raise ConfigError(f"SIGNOFF_POLICY_FILE: cannot read {path}: {exc.strerror}") from None


def load_policy(path: Path | None = None) -> Policy:
    """The policy at ``path``, or the bundled default."""
    text, source = read_policy_text(path)
    return parse_policy(text, source=source)
