"""What a tool handler receives besides its arguments, and how it fails.

Handlers never see the model, the loop or the database; they get a
:class:`ToolContext` built by the runtime from the *authenticated* session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from tools.backend import CommerceBackend, KnowledgeBase, KnowledgeHit

PrincipalKind = Literal["customer", "rep", "supervisor", "system"]
#: The staff roles that may act for a customer or decide an approval.
StaffRole = Literal["rep", "supervisor"]
ToolGroup = Literal["always", "account", "orders", "returns", "billing"]
LOADABLE_GROUPS: tuple[ToolGroup, ...] = ("account", "orders", "returns", "billing")


@dataclass(frozen=True, kw_only=True)
class Principal:
    """Who is acting, and the one account the session is bound to."""

    kind: PrincipalKind
    id: str
    customer_id: str | None = None
    #: Who shares a budget with a principal bound to no account: ``slack-team:T…`` for a Slack
    #: user nobody linked, ``email-domain:example.com`` for a sender the provider did not vouch
    #: for (``None``: none, or bound to an account and counted by it).
    group: str | None = None

    @property
    def key(self) -> str:
        """``kind:id``: how the principal is named in records and audit events."""
        return f"{self.kind}:{self.id}"

    @classmethod
    def from_key(cls, key: str, customer_id: str | None) -> Principal:
        """The principal a stored ``kind:id`` key (a proposal's, an approval's requester) names."""
        kind, _, ident = key.partition(":")
        return cls(kind=kind, id=ident, customer_id=customer_id)  # type: ignore[arg-type]

    @property
    def is_staff(self) -> bool:
        """Whether the principal is a rep or a supervisor."""
        return self.kind in ("rep", "supervisor")

    @property
    def person_keys(self) -> tuple[str, ...]:
        """Every key this person acts under: a staff member is one person whether they act as
        a rep or as a supervisor (per-person caps count both), anyone else has one key."""
        if self.is_staff:
            return tuple(f"{role}:{self.id}" for role in ("rep", "supervisor"))
        return (self.key,)


def error_result(code: str, message: str, details: dict[str, Any]) -> dict[str, Any]:
    """The structured observation every refusal gives the model: ``{"error", "message"?, **details}``."""
    out: dict[str, Any] = {"error": code}
    if message:
        out["message"] = message
    out.update(details)
    return out


class ToolFailure(Exception):
    """A recoverable outcome the model can act on: becomes an ``is_error`` tool result.

    ``code`` is stable snake_case (``not_found``, ``amount_exceeds_refundable``);
    ``details`` are structured facts safe to show the model.
    """

    def __init__(self, code: str, message: str = "", **details: Any) -> None:
        super().__init__(message or code)
        self.code = code
        self.message = message
        self.details = details

    def as_result(self) -> dict[str, Any]:
        """The failure as the ``is_error`` tool result the model reads."""
        return error_result(self.code, self.message, self.details)


@dataclass(frozen=True, kw_only=True)
class CaseView:
    """The case as ``get_case`` shows it."""

    conversation_id: str
    status: str
    customer_id: str | None
    channel: str
    notes: tuple[str, ...]


class CaseDesk(Protocol):
    """Case management for the current conversation (implemented by the runtime)."""

    async def get_case(self) -> CaseView:
        """The case of this conversation."""

    async def add_note(self, note: str) -> int:
        """Add a note to the case; its id."""

    async def escalate(self, reason: str, summary: str) -> dict[str, Any]:
        """Hand the conversation to a person."""


class RunControl(Protocol):
    """The run's own state that the ``always`` tools act on (implemented by the runtime)."""

    def load_group(self, group: ToolGroup) -> list[str]:
        """Add a group to the conversation's tools; returns the names now loaded."""
        ...

    def record_knowledge(self, hits: list[KnowledgeHit]) -> None:
        """Remember evidence ids ``search_knowledge`` returned in this run (C11)."""
        ...

    def finish(self, resolution: str, action_ids: list[str], sources: list[str]) -> dict[str, Any]:
        """Verify the claims against the run's tool log; raise ToolFailure if any is false."""
        ...


@dataclass(frozen=True, kw_only=True)
class Rules:
    """The business-rule numbers from the policy that handlers' checks need."""

    refund_window_days: int = 30
    max_refunds_per_customer_per_day: int = 3
    return_window_days: int = 30
    untrusted_text_limit: int = 600


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """What a tool handler gets besides its arguments: the bound customer, backend, clock, run controls."""

    principal: Principal
    backend: CommerceBackend
    #: Signoff's own knowledge (not the shop's): what ``search_knowledge`` reads.
    knowledge: KnowledgeBase
    case: CaseDesk
    run: RunControl
    rules: Rules
    now: datetime
    #: Set by the gatekeeper for actions; derived from the operation's identity.
    idempotency_key: str | None = None
    #: The proposal being judged: the identity of a "set it to X" operation (an address change).
    proposal_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def customer_id(self) -> str:
        """The bound account. Tools that need one fail cleanly when there is none."""
        if not self.principal.customer_id:
            raise ToolFailure("no_account_bound", "This conversation is not bound to a customer account.")
        return self.principal.customer_id
