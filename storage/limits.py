"""What a principal used in a rolling window, counted from the database.

The per-principal limits (new conversations per hour, model tokens and actions per day, a
staff member's refund money per day) are checked against these counts, so they hold across
processes and restarts. Windows are measured on the wall clock, like every ``created_at``
the repositories write.
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, func, select

from storage.db import Database
from storage.fastsql import one_of, prepared
from storage.models import ApprovalRow, ConversationRow, ProposalRow, TokenUsageRow, ToolExecutionRow
from storage.records import wall_clock

#: Ledger entries that moved (or may have moved) something: only ``failed`` is left out.
_COUNTED = ("executing", "succeeded", "needs_human")


@dataclass(frozen=True, kw_only=True)
class Executed:
    """One action in the ledger: its tool and the arguments it was carried out with."""

    tool: str
    arguments: Any


def budget_group(principal_group: str | None, customer_id: str | None) -> str | None:
    """The group whose budget a conversation's model calls count against: every principal bound to
    no account shares its group's (a Slack team, a sender domain, the widget's guests); a
    conversation bound to a customer counts against the customer's own. Kept on each usage row
    (a conversation's group and binding never change), so a group's day is summed over the
    group's recent rows (``ix_token_usage_group``), not over every conversation it ever had."""
    return principal_group if customer_id is None else None


def _since(window: timedelta) -> datetime:
    return wall_clock() - window


_SINCE = bindparam("since", type_=ConversationRow.__table__.c.created_at.type)
# Built once: these run as a turn opens (storage.fastsql).
_CONVERSATIONS = prepared(
    select(func.count(ConversationRow.id)).where(
        ConversationRow.customer_id == bindparam("c"),
        ConversationRow.principal_kind == "customer",
        ConversationRow.created_at >= _SINCE,
    )
)
# An unbound principal (no account) is counted by its own key, its group by the group.
_PRINCIPAL_CONVERSATIONS = prepared(
    select(func.count(ConversationRow.id)).where(
        ConversationRow.principal_kind == bindparam("k"),
        ConversationRow.principal_id == bindparam("p"),
        ConversationRow.customer_id.is_(None),
        ConversationRow.created_at >= _SINCE,
    )
)
_GROUP_CONVERSATIONS = prepared(
    select(func.count(ConversationRow.id)).where(
        ConversationRow.principal_group == bindparam("g"),
        ConversationRow.customer_id.is_(None),
        ConversationRow.created_at >= _SINCE,
    )
)
_TOKEN_SUM = func.coalesce(
    func.sum(
        TokenUsageRow.input_tokens
        + TokenUsageRow.output_tokens
        + TokenUsageRow.cache_creation_tokens
        + TokenUsageRow.cache_read_tokens
    ),
    0,
)
_TOKENS_SINCE = TokenUsageRow.created_at >= _SINCE
_PRINCIPAL_TOKENS = prepared(
    select(_TOKEN_SUM)
    .join(ConversationRow, ConversationRow.id == TokenUsageRow.conversation_id)
    .where(
        ConversationRow.principal_kind == bindparam("k"),
        ConversationRow.principal_id == bindparam("p"),
        ConversationRow.customer_id.is_(None),
        _TOKENS_SINCE,
    )
)
_GROUP_TOKENS = prepared(select(_TOKEN_SUM).where(TokenUsageRow.principal_group == bindparam("g"), _TOKENS_SINCE))
_TOKENS = prepared(
    select(_TOKEN_SUM)
    .join(ConversationRow, ConversationRow.id == TokenUsageRow.conversation_id)
    .where(ConversationRow.customer_id == bindparam("c"), ConversationRow.principal_kind == "customer", _TOKENS_SINCE)
)


@functools.cache
def _actions_query(tools: tuple[str, ...]) -> Any:
    """The count behind the per-day action limit, built once per set of tools (few per process)."""
    return prepared(
        select(func.count(ToolExecutionRow.id))
        .join(ProposalRow, ProposalRow.id == ToolExecutionRow.proposal_id)
        .join(ConversationRow, ConversationRow.id == ProposalRow.conversation_id)
        .where(
            ConversationRow.customer_id == bindparam("c"),
            ConversationRow.principal_kind == "customer",
            one_of(ToolExecutionRow.tool, tools),
            one_of(ToolExecutionRow.status, _COUNTED),
            ToolExecutionRow.created_at >= bindparam("since", type_=ToolExecutionRow.__table__.c.created_at.type),
        )
    )


HOUR = timedelta(hours=1)
DAY = timedelta(hours=24)


@dataclass(frozen=True, kw_only=True)
class Allowance:
    """Who opens a turn and the caps checked before anything of it is stored (``None``: not
    checked). A customer bound to an account is counted by the account, anyone else by their
    own key and, with a ``group``, by the group's too."""

    kind: str
    ident: str
    customer_id: str | None = None
    group: str | None = None
    tokens_per_day: int | None = None
    group_tokens_per_day: int | None = None
    #: Only when the turn opens a new conversation.
    conversations_per_hour: int | None = None
    group_conversations_per_hour: int | None = None


class OverLimit(Exception):
    """A cap of an :class:`Allowance` is reached (``limit`` names it); nothing was written."""

    def __init__(self, limit: str) -> None:
        super().__init__(limit)
        self.limit = limit


def tokens_today(conn: Connection, a: Allowance) -> int | None:
    """The model tokens of ``a``'s own conversations in the last 24 h (``None``: not a customer)."""
    if a.kind != "customer":
        return None
    if a.customer_id:
        return int(conn.execute(_TOKENS, {"c": a.customer_id, "since": _since(DAY)}).scalar_one())
    params = {"k": a.kind, "p": a.ident, "since": _since(DAY)}
    return int(conn.execute(_PRINCIPAL_TOKENS, params).scalar_one())


def check_allowance(conn: Connection, a: Allowance) -> int | None:
    """Raise :class:`OverLimit` at the first cap of ``a`` reached (the day's tokens, the group's,
    then new conversations in the hour, the group's); else ``a``'s tokens today (see
    :func:`tokens_today`). Reads only: run it first in the transaction it guards."""
    used = tokens_today(conn, a)
    if a.tokens_per_day is not None and used is not None and used >= a.tokens_per_day:
        raise OverLimit("model_tokens_per_day")
    day, hour = {"g": a.group, "since": _since(DAY)}, {"g": a.group, "since": _since(HOUR)}
    if a.group is not None and a.group_tokens_per_day is not None:
        if int(conn.execute(_GROUP_TOKENS, day).scalar_one()) >= a.group_tokens_per_day:
            raise OverLimit("group_model_tokens_per_day")
    if a.conversations_per_hour is not None:
        if a.customer_id:
            opened = conn.execute(_CONVERSATIONS, {"c": a.customer_id, "since": hour["since"]}).scalar_one()
        else:
            params = {"k": a.kind, "p": a.ident, "since": hour["since"]}
            opened = conn.execute(_PRINCIPAL_CONVERSATIONS, params).scalar_one()
        if int(opened) >= a.conversations_per_hour:
            raise OverLimit("conversations_per_hour")
    if a.group is not None and a.group_conversations_per_hour is not None:
        if int(conn.execute(_GROUP_CONVERSATIONS, hour).scalar_one()) >= a.group_conversations_per_hour:
            raise OverLimit("group_conversations_per_hour")
    return used


class UsageCounts:
    """Counts behind the per-principal limits, read from the database (they hold across processes)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def check(self, allowance: Allowance) -> int | None:
        """:func:`check_allowance` in a read of its own."""
        return await self.db.read(lambda conn: check_allowance(conn, allowance))

    async def customer_conversations(self, customer_id: str, window: timedelta) -> int:
        """Conversations the customer themself opened in the window (staff ones not counted)."""
        params = {"c": customer_id, "since": _since(window)}
        return int(await self.db.read(lambda conn: conn.execute(_CONVERSATIONS, params).scalar_one()))

    async def customer_tokens(self, customer_id: str, window: timedelta) -> int:
        """Model tokens (input, output and cache) used in the customer's own conversations."""
        params = {"c": customer_id, "since": _since(window)}
        return int(await self.db.read(lambda conn: conn.execute(_TOKENS, params).scalar_one()))

    async def unbound_conversations(self, kind: str, ident: str, window: timedelta) -> int:
        """Conversations a principal bound to no account (``kind``, ``ident``) opened in the window."""
        params = {"k": kind, "p": ident, "since": _since(window)}
        return int(await self.db.read(lambda conn: conn.execute(_PRINCIPAL_CONVERSATIONS, params).scalar_one()))

    async def unbound_tokens(self, kind: str, ident: str, window: timedelta) -> int:
        """Model tokens used in the conversations of a principal bound to no account."""
        params = {"k": kind, "p": ident, "since": _since(window)}
        return int(await self.db.read(lambda conn: conn.execute(_PRINCIPAL_TOKENS, params).scalar_one()))

    async def group_conversations(self, group: str, window: timedelta) -> int:
        """Conversations every unbound principal of ``group`` (a Slack team, a sender domain) opened."""
        params = {"g": group, "since": _since(window)}
        return int(await self.db.read(lambda conn: conn.execute(_GROUP_CONVERSATIONS, params).scalar_one()))

    async def group_tokens(self, group: str, window: timedelta) -> int:
        """Model tokens every unbound principal of ``group`` used."""
        params = {"g": group, "since": _since(window)}
        return int(await self.db.read(lambda conn: conn.execute(_GROUP_TOKENS, params).scalar_one()))

    async def customer_actions(self, customer_id: str, window: timedelta, tools: Collection[str]) -> int:
        """Actions of ``tools`` carried out (ledger entries not ``failed``) in the window in
        the customer's own conversations."""
        params = {"c": customer_id, "since": _since(window)}
        q = _actions_query(tuple(sorted(tools)))
        return int(await self.db.read(lambda conn: conn.execute(q, params).scalar_one()))

    async def executed_by(
        self, principals: Collection[str], window: timedelta, tools: Collection[str]
    ) -> list[Executed]:
        """Actions of ``tools`` that any of ``principals`` (one person's keys: ``rep:ID``,
        ``supervisor:ID``) carried out in the window, across every customer (an approved
        request counts for the one who requested it)."""
        q = (
            select(ToolExecutionRow.tool, ToolExecutionRow.arguments)
            .join(ProposalRow, ProposalRow.id == ToolExecutionRow.proposal_id)
            .where(
                ProposalRow.principal.in_(list(principals)),
                ToolExecutionRow.tool.in_(list(tools)),
                ToolExecutionRow.status.in_(_COUNTED),
                ToolExecutionRow.created_at >= _since(window),
            )
        )
        async with self.db.reader() as s:
            return [Executed(tool=t, arguments=a) for t, a in (await s.execute(q)).all()]

    async def pending_requested_by(
        self, principals: Collection[str], tools: Collection[str]
    ) -> list[tuple[str, int, str]]:
        """``(args_hash, amount_minor, currency)`` of every approval any of ``principals`` (one
        person's keys) requested for ``tools`` that is still pending (if approved, that money
        moves too)."""
        q = select(ApprovalRow.args_hash, ApprovalRow.amount_minor, ApprovalRow.currency).where(
            ApprovalRow.requester.in_(list(principals)),
            ApprovalRow.status == "pending",
            ApprovalRow.tool.in_(list(tools)),
        )
        async with self.db.reader() as s:
            return [(h, int(a or 0), c or "") for h, a, c in (await s.execute(q)).all()]
