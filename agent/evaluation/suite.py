"""The evaluation suite format (YAML), validated strictly with Pydantic.

A suite is a list of cases. Each case sets the store's state (the bundled demo
dataset plus overrides and a clock relative to the dataset's ``as_of``), plays
turns (user messages; confirm/decline; the approver's part) and states what
must hold afterwards. Unknown keys are errors, reported with their path::

    support.yaml: cases[3].turns[1].aprove: unknown field

See ``agent/evaluation/suites/support.yaml`` for the annotated format.
"""

from __future__ import annotations

import re
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

ModelKind = Literal["scripted", "demo", "compromised", "anthropic", "openai"]
Gate = Literal["execute", "reject", "confirmation", "approval", "intercept", "record"]
_DURATION = re.compile(r"^([+-]?)(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
SUITES_DIR = "suites"


class SuiteError(ValueError):
    """A suite file was refused; ``errors`` lists every problem as ``file: path: message``."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("\n".join(errors[:30]))

    def __reduce__(self) -> tuple[type[SuiteError], tuple[list[str]]]:
        return (SuiteError, (self.errors,))  # crosses the worker-process boundary intact


def parse_duration(text: str) -> timedelta:
    """``"25h"``, ``"-3d"``, ``"+90m"``, ``"30s"`` → a timedelta."""
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"not a duration like 25h, -3d, 90m: {text!r}")
    value = timedelta(**{_UNITS[m.group(3)]: int(m.group(2))})
    return -value if m.group(1) == "-" else value


def _duration(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError("a duration is a string like 25h or -3d")
    parse_duration(v)
    return v


Duration = Annotated[str, Field(pattern=_DURATION.pattern)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ScriptedReply(_Strict):
    """One scripted model response: optional text and tool calls (``name: args``, in order).

    A string argument ``"$key"`` is replaced by the newest ``key`` value in the
    tool results or runtime events the model was sent (e.g. ``$refund_id``);
    ``{$key}`` inside ``say`` text likewise (times shown as their date).
    """

    say: str | None = None
    call: dict[str, dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _something(self) -> ScriptedReply:
        if not self.say and not self.call:
            raise ValueError("a scripted reply needs say, call or both")
        return self


Reply = str | ScriptedReply


class ReplyExpect(_Strict):
    """Facts a reply must state (substrings, case-insensitive; ``re:`` for a regex) and must not claim."""

    states: list[str] = Field(default_factory=list)
    not_claims: list[str] = Field(default_factory=list)


class RejectSpec(_Strict):
    by: str = Field(alias="as")
    comment: str


class Turn(_Strict):
    """One step of a case: exactly one action, in the named conversation."""

    user: str | None = None
    confirm: Literal["latest", "first", "all"] | None = None
    decline: Literal["latest", "first", "all"] | None = None
    approve: str | None = Field(default=None, description="staff or customer id deciding the latest approval")
    reject: RejectSpec | None = None
    expire: Duration | None = Field(default=None, description="advance the clock, run the expiry sweep")
    advance: Duration | None = Field(default=None, description="advance the clock only")
    double_click: str | None = Field(default=None, description="two approves at the same version")
    stale_click: str | None = Field(default=None, description="an approve with an out-of-date version")
    conversation: str = "main"
    expect_error: str | None = Field(default=None, description="the DecisionError code this decision must raise")
    model: list[Reply] = Field(default_factory=list)
    reply: ReplyExpect | None = None

    @model_validator(mode="after")
    def _one_action(self) -> Turn:
        actions = [
            k
            for k in (
                "user",
                "confirm",
                "decline",
                "approve",
                "reject",
                "expire",
                "advance",
                "double_click",
                "stale_click",
            )
            if getattr(self, k) is not None
        ]
        if len(actions) != 1:
            raise ValueError(
                f"a turn has exactly one of user, confirm, decline, approve, reject, expire, advance, "
                f"double_click, stale_click (got {actions or 'none'})"
            )
        return self

    @property
    def action(self) -> str:
        return next(
            k
            for k in (
                "user",
                "confirm",
                "decline",
                "approve",
                "reject",
                "expire",
                "advance",
                "double_click",
                "stale_click",
            )
            if getattr(self, k) is not None
        )


class ToolExpect(_Strict):
    """A tool the model must propose; ``args`` are matched (see ``matchers``)."""

    tool: str
    args: dict[str, Any] | None = None
    match: Literal["subset", "exact"] = "subset"
    gate: Gate | None = None
    reason: str | None = Field(default=None, description="the gate's rejection reason")
    error: str | None = Field(default=None, description="the error code of the tool result")


class OutboxExpect(_Strict):
    to: str | None = None
    template: str | None = None
    channel: Literal["email", "sms"] | None = None


class ApprovalExpect(_Strict):
    status: Literal["pending", "approved", "rejected", "expired", "superseded"]
    tool: str | None = None
    reason: str | None = None
    approvals_required: int | None = None


class Expect(_Strict):
    """What must hold after the case. Unset fields are not checked."""

    tools: list[ToolExpect] = Field(default_factory=list)
    attempts: list[ToolExpect] = Field(default_factory=list, description="checked only with the compromised model")
    not_called: list[str] = Field(default_factory=list)
    not_executed: list[str] = Field(default_factory=list)
    refunded: dict[str, int] | None = Field(default=None, description="new refunds per order, every other order 0")
    orders: dict[str, str] | None = None
    returns: dict[str, int] | None = None
    outbox: list[OutboxExpect] | None = None
    approvals: list[ApprovalExpect] | None = None
    escalated: bool | None = None
    reply: ReplyExpect | None = None


class Principal(_Strict):
    """Who talks: a customer, or staff in assist mode bound to a customer."""

    customer: str
    staff: str | None = None


class StoreSpec(_Strict):
    """The demo dataset plus overrides; record times may be relative to ``as_of`` (``-3d``)."""

    clock: Duration = "0h"
    customers: list[dict[str, Any]] = Field(default_factory=list)
    orders: list[dict[str, Any]] = Field(default_factory=list)
    payments: list[dict[str, Any]] = Field(default_factory=list)
    refunds: list[dict[str, Any]] = Field(default_factory=list)
    returns: list[dict[str, Any]] = Field(default_factory=list)
    knowledge: list[dict[str, Any]] = Field(default_factory=list)
    staff: list[dict[str, Any]] = Field(default_factory=list)
    notes: dict[str, str] = Field(default_factory=dict, description="order id -> replacement notes")
    names: dict[str, str] = Field(default_factory=dict, description="customer id -> replacement name")

    def overrides_key(self) -> str:
        """Identity of the overrides (not the clock): cases with equal keys share a template store."""
        import json

        return json.dumps(self.model_dump(exclude={"clock"}), sort_keys=True, default=str)


class Case(_Strict):
    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{1,80}$")]
    description: str = ""
    tags: list[str] = Field(default_factory=list)
    principal: Principal
    channel: Literal["api", "slack", "email"] = "api"
    model: ModelKind | None = None
    store: StoreSpec = Field(default_factory=StoreSpec)
    turns: Annotated[list[Turn], Field(min_length=1)]
    expect: Expect = Field(default_factory=Expect)


class Suite(_Strict):
    suite: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,40}$")]
    description: str = ""
    model: ModelKind = Field(default="scripted", description="the offline model this suite runs with by default")
    cases: Annotated[list[Case], Field(min_length=1)]
    source: str = Field(default="", exclude=True)

    @model_validator(mode="after")
    def _unique_ids(self) -> Suite:
        seen: set[str] = set()
        for c in self.cases:
            if c.id in seen:
                raise ValueError(f"duplicate case id {c.id!r}")
            seen.add(c.id)
        return self


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "ScriptedReply") or "[" in str(part):
            continue  # union-branch labels pydantic adds to the location
        else:
            out += f".{part}" if out else str(part)
    return out or "$"


def parse_suite(data: Any, *, source: str = "suite") -> Suite:
    """Validate parsed YAML as a suite; :class:`SuiteError` names file and path of every problem."""
    if not isinstance(data, dict):
        raise SuiteError([f"{source}: a suite is a mapping with suite, cases, ..."])
    try:
        return Suite.model_validate({**data, "source": source})
    except ValidationError as exc:
        errors = []
        for e in exc.errors():
            msg = "unknown field" if e["type"] == "extra_forbidden" else e["msg"].removeprefix("Value error, ")
            errors.append(f"{source}: {_path(e['loc'])}: {msg}")
        raise SuiteError(sorted(set(errors), key=errors.index)) from None


def load_suite(path: str | Path) -> Suite:
    """Read and validate one suite file."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SuiteError([f"{p}: cannot read: {exc.strerror}"]) from None
    except yaml.YAMLError as exc:
        raise SuiteError([f"{p}: not valid YAML: {exc}"]) from None
    return parse_suite(data, source=str(p))


def bundled_suites() -> dict[str, Path]:
    """The suites shipped with signoff, by name (``support``, ``adversarial``)."""
    root = Path(str(resources.files("agent.evaluation").joinpath(SUITES_DIR)))
    return {p.stem: p for p in sorted(root.glob("*.yaml"))}


def resolve_suites(names: list[str]) -> list[Path]:
    """Suite names or file paths → files; no names → every bundled suite."""
    bundled = bundled_suites()
    if not names:
        return list(bundled.values())
    out = []
    for name in names:
        if name in bundled:
            out.append(bundled[name])
        elif Path(name).is_file():
            out.append(Path(name))
        else:
            raise SuiteError([f"{name}: no such suite (bundled: {', '.join(bundled)}) and no such file"])
    return out
