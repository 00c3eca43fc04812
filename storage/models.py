"""ORM classes of the runtime tables. They never leave ``storage/``.

Times are timezone-aware UTC. Ids are short prefixed strings made by the
runtime (``conv_…``, ``run_…``) so they read well in Slack and logs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from storage import notify, search
from storage.db import Base, JSONType

TS = DateTime(timezone=True)
#: The states of an active hand-off, as the partial unique index ``uq_handoffs_active`` says it.
ACTIVE_HANDOFF_SQL = "state IN ('waiting', 'taken')"


class ConversationRow(Base):
    """A conversation: its channel, principal, bound customer and loaded tool groups."""

    __tablename__ = "conversations"
    __table_args__ = (
        Index("ix_conversations_principal", "principal_kind", "principal_id"),
        # The group's new conversations in the last hour, read from the group's recent ones only.
        Index("ix_conversations_group_opened", "principal_group", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    channel: Mapped[str] = mapped_column(String(16))  # slack | api | email | demo | eval
    external_ref: Mapped[str | None] = mapped_column(String(255), unique=True)
    principal_kind: Mapped[str] = mapped_column(String(16))  # customer | rep | supervisor
    principal_id: Mapped[str] = mapped_column(String(64))
    customer_id: Mapped[str | None] = mapped_column(String(64), index=True)
    #: The budget an unbound principal shares (a Slack team, a sender domain): ``Principal.group``.
    principal_group: Mapped[str | None] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16), default="open")  # open|escalated|resolved
    loaded_groups: Mapped[list[str]] = mapped_column(JSONType, default=list)
    model: Mapped[str] = mapped_column(String(128))
    prompt_version: Mapped[str] = mapped_column(String(32))
    next_seq: Mapped[int] = mapped_column(Integer, default=0)
    meta: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(TS)
    updated_at: Mapped[datetime] = mapped_column(TS)


class MessageRow(Base):
    """One message of a conversation's history (content blocks as JSON)."""

    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("conversation_id", "seq", name="uq_messages_conv_seq"),
        UniqueConstraint("conversation_id", "event_key", name="uq_messages_conv_event_key"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id"))
    seq: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16))
    # Plain JSON, not JSONB, on PostgreSQL too: the history must come back byte for byte
    # (JSONB reorders keys, which would change what the model is sent and break the prompt cache).
    content: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    run_id: Mapped[str | None] = mapped_column(String(64))
    #: A runtime event's identity (``confirmation:cnf_…``, ``approval:apr_…:approved``): appended once.
    event_key: Mapped[str | None] = mapped_column(String(160))
    created_at: Mapped[datetime] = mapped_column(TS)


class RunRow(Base):
    """One run of the agent in a conversation."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id"), index=True)
    status: Mapped[str] = mapped_column(String(16))  # running|waiting|completed|escalated|failed
    steps: Mapped[int] = mapped_column(Integer, default=0)
    model: Mapped[str] = mapped_column(String(128))
    prompt_version: Mapped[str] = mapped_column(String(32))
    policy_version: Mapped[str] = mapped_column(String(32))
    trace_id: Mapped[str] = mapped_column(String(64))
    pending_ids: Mapped[list[str]] = mapped_column(JSONType, default=list)
    state: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    #: The process running it (``host:pid:nonce``) while ``running``: a dead one's turn is taken over.
    holder: Mapped[str | None] = mapped_column(String(96))
    created_at: Mapped[datetime] = mapped_column(TS)
    updated_at: Mapped[datetime] = mapped_column(TS)


class ProposalRow(Base):
    """One tool call the model (or the runtime) proposed, and the gate's decision on it."""

    __tablename__ = "proposals"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    conversation_id: Mapped[str] = mapped_column(String(64), index=True)
    tool_use_id: Mapped[str] = mapped_column(String(128))
    #: Who proposed it: ``None`` the model; ``confirmation:ID``, ``approval:ID``, ``edit:ID`` the runtime.
    origin: Mapped[str | None] = mapped_column(String(96), index=True)
    tool: Mapped[str] = mapped_column(String(64))
    arguments: Mapped[Any] = mapped_column(JSONType)
    args_hash: Mapped[str] = mapped_column(String(64))
    principal: Mapped[str] = mapped_column(String(96))
    step: Mapped[int] = mapped_column(Integer)
    decision: Mapped[str | None] = mapped_column(String(32))  # executed|rejected|confirmation|approval|recorded
    reason: Mapped[str | None] = mapped_column(String(64))
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    result: Mapped[Any | None] = mapped_column(JSONType)
    is_error: Mapped[bool] = mapped_column(default=False)
    policy_version: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(TS)


class ConfirmationRow(Base):
    """A confirmation of exact arguments asked of the acting person."""

    __tablename__ = "confirmations"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    conversation_id: Mapped[str] = mapped_column(String(64), index=True)
    run_id: Mapped[str] = mapped_column(String(64))
    proposal_id: Mapped[str] = mapped_column(String(64))
    tool: Mapped[str] = mapped_column(String(64))
    arguments: Mapped[Any] = mapped_column(JSONType)
    args_hash: Mapped[str] = mapped_column(String(64))
    principal: Mapped[str] = mapped_column(String(96))
    code: Mapped[str] = mapped_column(String(16))
    summary: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))  # pending|confirmed|declined|superseded|consumed
    version: Mapped[int] = mapped_column(Integer, default=1)
    #: What the action acts on (``order:O-1042``): only a re-proposal on the same target supersedes.
    target: Mapped[str | None] = mapped_column(String(255))
    #: Fixed when the action was first judged; every later attempt reuses it.
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    #: When the runtime's own rendering of the action reached the person (a free-text "yes" needs it).
    shown_at: Mapped[datetime | None] = mapped_column(TS)
    #: What confirming led to (decision, result, approval id), so a repeated confirm answers the same.
    outcome: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    #: Where its card is shown, per surface (to redraw it when it is answered elsewhere).
    surfaces: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(TS)
    decided_at: Mapped[datetime | None] = mapped_column(TS)


class ApprovalRow(Base):
    """An approval asked of a supervisor."""

    __tablename__ = "approvals"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    proposal_id: Mapped[str] = mapped_column(String(64))
    run_id: Mapped[str] = mapped_column(String(64), index=True)
    conversation_id: Mapped[str] = mapped_column(String(64), index=True)
    tool: Mapped[str] = mapped_column(String(64))
    arguments: Mapped[Any] = mapped_column(JSONType)
    args_hash: Mapped[str] = mapped_column(String(64))
    customer_id: Mapped[str | None] = mapped_column(String(64))
    summary: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), index=True)
    version: Mapped[int] = mapped_column(Integer, default=1)
    required_role: Mapped[str] = mapped_column(String(32))
    approvals_required: Mapped[int] = mapped_column(Integer, default=1)
    decisions: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    requester: Mapped[str] = mapped_column(String(96))
    decider: Mapped[str | None] = mapped_column(String(96))
    comment: Mapped[str | None] = mapped_column(Text)
    rationale: Mapped[str | None] = mapped_column(Text)
    evidence: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    provenance: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    policy_version: Mapped[str] = mapped_column(String(32))
    #: The money at stake and the figures that routed it here (reason, ceiling, aggregate).
    amount_minor: Mapped[int | None] = mapped_column(BigInteger)
    currency: Mapped[str | None] = mapped_column(String(3))
    routing: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    result: Mapped[Any | None] = mapped_column(JSONType)
    superseded_by: Mapped[str | None] = mapped_column(String(64))
    #: Where it is shown, per surface: what each needs to redraw its card (``{"slack": {...}}``).
    surfaces: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    expires_at: Mapped[datetime] = mapped_column(TS)
    created_at: Mapped[datetime] = mapped_column(TS)
    decided_at: Mapped[datetime | None] = mapped_column(TS)


class ToolExecutionRow(Base):
    """The idempotency ledger: insert the key, then call the downstream."""

    __tablename__ = "tool_executions"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(255), unique=True)
    tool: Mapped[str] = mapped_column(String(64))
    arguments: Mapped[Any] = mapped_column(JSONType)
    proposal_id: Mapped[str | None] = mapped_column(String(64))
    run_id: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))  # executing|succeeded|failed|needs_human
    result: Mapped[Any | None] = mapped_column(JSONType)
    #: ``host:pid:nonce`` of the process that claimed it: a claim whose process died is abandoned.
    holder: Mapped[str | None] = mapped_column(String(96))
    created_at: Mapped[datetime] = mapped_column(TS)
    updated_at: Mapped[datetime] = mapped_column(TS)


class AuditEventRow(Base):
    """Append-only, hash-chained. On PostgreSQL a trigger refuses UPDATE/DELETE."""

    __tablename__ = "audit_events"
    __table_args__ = (
        Index("ix_audit_events_kind_seq", "kind", "seq"),
        Index("ix_audit_events_part_pseq", "part", "pseq", unique=True),
    )

    #: The global order, assigned by the database (a sequence on PostgreSQL).
    seq: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    #: The partition (``storage.audit.partition_of``) and the position in its chain.
    part: Mapped[int] = mapped_column(Integer)
    pseq: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"))
    ts: Mapped[datetime] = mapped_column(TS)
    kind: Mapped[str] = mapped_column(String(48))
    run_id: Mapped[str | None] = mapped_column(String(64), index=True)
    proposal_id: Mapped[str | None] = mapped_column(String(64), index=True)
    trace_id: Mapped[str | None] = mapped_column(String(64))
    principal: Mapped[str | None] = mapped_column(String(96))
    tool: Mapped[str | None] = mapped_column(String(64))
    args_hash: Mapped[str | None] = mapped_column(String(64))
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    model: Mapped[str | None] = mapped_column(String(128))
    prompt_version: Mapped[str | None] = mapped_column(String(32))
    policy_version: Mapped[str | None] = mapped_column(String(32))
    # Float as migrated (0001): SQLAlchemy 2.1 maps a bare ``float`` annotation to Double.
    latency_ms: Mapped[float | None] = mapped_column(Float)
    data: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


class AuditHeadRow(Base):
    """One row per partition (``id``): its chain's last position and hash. Serialises that
    partition's appends; detects tail deletion."""

    __tablename__ = "audit_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"))
    hash: Mapped[str] = mapped_column(String(64))


class JobRow(Base):
    """A durable job (resume, expiry, a face's inbound turn)."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_claim", "status", "run_after"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(32))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType)
    dedup_key: Mapped[str | None] = mapped_column(String(255), unique=True)
    status: Mapped[str] = mapped_column(String(16))  # queued|running|done|quarantined
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    run_after: Mapped[datetime] = mapped_column(TS)
    locked_by: Mapped[str | None] = mapped_column(String(64))
    locked_at: Mapped[datetime | None] = mapped_column(TS)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS)


class IdentityRow(Base):
    """An outside identity (a channel's user id) linked, or being linked by one-time code, to a principal."""

    __tablename__ = "identities"
    __table_args__ = (UniqueConstraint("channel", "external_id", name="uq_identities_channel_ext"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    channel: Mapped[str] = mapped_column(String(16))
    external_id: Mapped[str] = mapped_column(String(255))
    principal_kind: Mapped[str] = mapped_column(String(16))
    principal_id: Mapped[str] = mapped_column(String(64))
    customer_id: Mapped[str | None] = mapped_column(String(64))
    link_code_hash: Mapped[str | None] = mapped_column(String(64))
    link_expires_at: Mapped[datetime | None] = mapped_column(TS)
    link_attempts: Mapped[int] = mapped_column(Integer, default=0)
    #: When the current attempts window began: a new code does not reset the count within it.
    link_window_at: Mapped[datetime | None] = mapped_column(TS)
    verified_at: Mapped[datetime | None] = mapped_column(TS)
    created_at: Mapped[datetime] = mapped_column(TS)
    #: ``link`` (made with an emailed code) or ``seed`` (the people file or the sandbox dataset:
    #: replaced whenever people are seeded again, while links made with a code stay).
    origin: Mapped[str] = mapped_column(String(16), default="link", server_default="link")


class StaffRow(Base):
    """A staff member (rep or supervisor): signoff's own record, whatever the shop; their Slack
    and Teams users are rows of ``identities``."""

    __tablename__ = "staff"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(16))  # rep | supervisor
    #: Their own email: an account with this email is theirs, and they never act on it.
    email: Mapped[str | None] = mapped_column(String(320))


class LinkRequestRow(Base):
    """One ``link <email>`` asked for: who asked and a hash of the address (code emails are capped)."""

    __tablename__ = "link_requests"
    __table_args__ = (
        Index("ix_link_requests_requester", "channel", "requester", "created_at"),
        Index("ix_link_requests_address", "address_hash", "created_at"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    channel: Mapped[str] = mapped_column(String(16))
    requester: Mapped[str] = mapped_column(String(255))
    address_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(TS)


class ProcessedEventRow(Base):
    """Slack (and email) delivery ids already handled: retries change nothing."""

    __tablename__ = "processed_events"

    event_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    source: Mapped[str] = mapped_column(String(16))
    received_at: Mapped[datetime] = mapped_column(TS)


class TokenUsageRow(Base):
    """The tokens one model call used."""

    __tablename__ = "token_usage"
    # A group's tokens in the last day are summed over the group's recent rows only.
    __table_args__ = (Index("ix_token_usage_group", "principal_group", "created_at"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(String(64), index=True)
    run_id: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(128))
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_creation_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_read_tokens: Mapped[int] = mapped_column(Integer, default=0)
    #: The group whose budget the call counts against: its conversation's ``principal_group``
    #: when the conversation is bound to no customer (``storage.limits.budget_group``), else null.
    principal_group: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(TS)


class CaseNoteRow(Base):
    """A note on a conversation's case."""

    __tablename__ = "case_notes"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(String(64), index=True)
    author: Mapped[str] = mapped_column(String(96))
    kind: Mapped[str] = mapped_column(String(16))  # note | escalation
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS)


class LockRow(Base):
    """Named leases for SQLite, where no advisory locks exist: one row per held lock.

    PostgreSQL uses ``pg_advisory_lock`` instead; this table stays empty there.
    """

    __tablename__ = "locks"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[datetime] = mapped_column(TS)


class InboundRow(Base):
    """A message a face accepted (a Slack event, a Teams activity, an email), kept until answered.

    Written with its delivery keys (``processed_events``) and its turn job in one transaction
    before the face answers 200; the worker runs the turn and delivers the reply from it.
    """

    __tablename__ = "inbound"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    face: Mapped[str] = mapped_column(String(16))
    #: queued | answered (the result is stored, delivery owed) | delivered | ignored | failed
    status: Mapped[str] = mapped_column(String(16), index=True)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(TS)
    updated_at: Mapped[datetime] = mapped_column(TS)


class DeliveryRow(Base):
    """One outbound message (a reply, a follow-up), posted at most once per key."""

    __tablename__ = "deliveries"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))  # sending | sent
    holder: Mapped[str | None] = mapped_column(String(96))
    ref: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(TS)
    updated_at: Mapped[datetime] = mapped_column(TS)


class ThreadBindingRow(Base):
    """A rep's assist thread (``slack:TEAM:CHANNEL:THREAD_TS``) bound to a customer account."""

    __tablename__ = "thread_bindings"

    ref: Mapped[str] = mapped_column(String(200), primary_key=True)
    customer_id: Mapped[str] = mapped_column(String(64))
    staff_id: Mapped[str] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime] = mapped_column(TS)
    updated_at: Mapped[datetime] = mapped_column(TS)


class SentMailRow(Base):
    """A Message-ID of a mail we sent: a reply may join a conversation only by citing one of
    these, sent to the same principal (threading is never taken from the sender's word)."""

    __tablename__ = "sent_mail"

    message_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    conversation_id: Mapped[str] = mapped_column(String(64))
    principal: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(TS)


class PolicyVersionRow(Base):
    """One applied policy (``signoff policy apply``): its YAML text exactly as applied, who applied
    it and what it replaced. The newest row (highest ``id``) is the active policy; rows are
    only ever added (a rollback is a new row carrying the older text)."""

    __tablename__ = "policy_versions"

    #: 1, 2, 3, …: each apply takes the next id, so two concurrent applies cannot both win.
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    version: Mapped[str] = mapped_column(String(32), index=True)
    yaml: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    applied_at: Mapped[datetime] = mapped_column(TS)
    #: The supervisor's staff id (``--as``) and the operating-system user who ran the command.
    applied_by: Mapped[str] = mapped_column(String(64))
    operator: Mapped[str] = mapped_column(String(64))
    #: The version it replaced (``None``: the first applied; the file/bundled one was active before).
    previous_version: Mapped[str | None] = mapped_column(String(32))


class KnowledgeDocumentRow(Base):
    """A document: its newest version (what search reads) and that version's digest."""

    __tablename__ = "knowledge_documents"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))  # policy | help
    title: Mapped[str] = mapped_column(String(255))
    digest: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[datetime] = mapped_column(TS)


class KnowledgeVersionRow(Base):
    """Every version a document has had."""

    __tablename__ = "knowledge_versions"

    doc_id: Mapped[str] = mapped_column(ForeignKey("knowledge_documents.id"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    title: Mapped[str] = mapped_column(String(255))
    digest: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(TS)


class KnowledgeSectionRow(Base):
    """One searchable passage of one version. ``doc_title`` is denormalised so the index covers it."""

    __tablename__ = "knowledge_sections"
    __table_args__ = (UniqueConstraint("doc_id", "version", "section_id", name="uq_knowledge_sections_doc_section"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    doc_id: Mapped[str] = mapped_column(ForeignKey("knowledge_documents.id"))
    version: Mapped[int] = mapped_column(Integer)
    section_id: Mapped[str] = mapped_column(String(64))
    position: Mapped[int] = mapped_column(Integer)
    doc_title: Mapped[str] = mapped_column(String(255))
    text: Mapped[str] = mapped_column(Text)


Index("ix_knowledge_sections_doc_version", KnowledgeSectionRow.doc_id, KnowledgeSectionRow.version)
search.register(KnowledgeSectionRow.__table__)  # type: ignore[arg-type]


class OutsideStaffActionRow(Base):
    """A refund, cancellation or return staff made outside signoff (in the Shopify admin), learnt
    from the shop's webhook; ``signoff rollout report`` counts them beside the actions staff
    executed through signoff. One row per webhook event (its id is the key)."""

    __tablename__ = "outside_staff_actions"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    source: Mapped[str] = mapped_column(String(16))
    #: The catalogue tool it corresponds to (``issue_refund``, ``cancel_order``, ``create_return``).
    tool: Mapped[str] = mapped_column(String(64))
    arguments: Mapped[Any] = mapped_column(JSONType)
    customer_id: Mapped[str | None] = mapped_column(String(64))
    principal: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(TS, index=True)


class WidgetSessionRow(Base):
    """A chat widget session (``bot/widget``): who it is bound to, never the secret itself (its
    hash), the current conversation, and a hash of the address it was opened from (guest limits)."""

    __tablename__ = "widget_sessions"
    __table_args__ = (
        Index("ix_widget_sessions_customer", "shop", "customer_id", "created_at"),
        Index("ix_widget_sessions_ip", "ip_hash", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    shop: Mapped[str] = mapped_column(String(255))
    customer_id: Mapped[str | None] = mapped_column(String(64))
    #: How the customer was established: app_proxy | jwt | order | code (None: a guest).
    verified_via: Mapped[str | None] = mapped_column(String(16))
    ip_hash: Mapped[str] = mapped_column(String(64))
    conversation_id: Mapped[str | None] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime] = mapped_column(TS)


class WidgetEventRow(Base):
    """One event of a widget session's stream, numbered per session (``seq``, the SSE id) and
    written once per key (a retried delivery writes nothing)."""

    __tablename__ = "widget_events"
    __table_args__ = (UniqueConstraint("session_id", "seq", name="uq_widget_events_session_seq"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(64))
    seq: Mapped[int] = mapped_column(Integer)
    key: Mapped[str] = mapped_column(String(255), unique=True)
    kind: Mapped[str] = mapped_column(String(24))
    data: Mapped[Any] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(TS)


class HandoffRow(Base):
    """A conversation handed to a person: waiting → taken → returned | closed (``storage/handoffs.py``)."""

    __tablename__ = "handoffs"
    #: At most one active (waiting or taken) hand-off per conversation, enforced by the
    #: database on SQLite and PostgreSQL alike: a partial unique index.
    __table_args__ = (
        Index(
            "uq_handoffs_active",
            "conversation_id",
            unique=True,
            sqlite_where=text(ACTIVE_HANDOFF_SQL),
            postgresql_where=text(ACTIVE_HANDOFF_SQL),
        ),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    conversation_id: Mapped[str] = mapped_column(String(64), index=True)
    #: waiting | taken | returned | closed
    state: Mapped[str] = mapped_column(String(16), index=True)
    reason: Mapped[str] = mapped_column(String(200))
    #: Who opened it: ``agent:run_…`` (escalate_to_human) or the customer's principal key.
    opened_by: Mapped[str] = mapped_column(String(160))
    #: The staff id owning it while ``taken`` (the last owner afterwards), and their display name.
    owner: Mapped[str | None] = mapped_column(String(64), index=True)
    owner_name: Mapped[str | None] = mapped_column(String(200))
    notes: Mapped[str | None] = mapped_column(Text)
    #: The staff thread it lives in (``slack:TEAM:CHANNEL:TS``), found again by a reply in it.
    thread: Mapped[str | None] = mapped_column(String(255), index=True)
    surfaces: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    version: Mapped[int] = mapped_column(Integer)
    opened_at: Mapped[datetime] = mapped_column(TS)
    taken_at: Mapped[datetime | None] = mapped_column(TS)
    ended_at: Mapped[datetime | None] = mapped_column(TS)


class HandoffThreadRow(Base):
    """A staff thread a hand-off lives in — one per staff surface (the Slack escalation thread,
    the Teams card's reply chain) — found again by a reply in it."""

    __tablename__ = "handoff_threads"

    thread: Mapped[str] = mapped_column(String(255), primary_key=True)
    handoff_id: Mapped[str] = mapped_column(String(64), primary_key=True)


class HandoffSuggestionRow(Base):
    """A reply the agent drafted for the person who owns a hand-off: shown in the staff thread
    with Send, never sent by the agent itself (``agent/handoff_suggest.py``)."""

    __tablename__ = "handoff_suggestions"

    #: Derived from the customer message it answers, so a retried draft is stored once.
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    handoff_id: Mapped[str] = mapped_column(String(64), index=True)
    conversation_id: Mapped[str] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS)


# The triggers behind the cross-process wake-ups (storage.notify).
notify.register(cast(Table, JobRow.__table__), cast(Table, WidgetEventRow.__table__))
