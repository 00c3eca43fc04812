"""Small frozen inputs for the Block Kit builders that are Slack's own.

The cards render the face-neutral views of :mod:`agent.views`; these add what only
Slack has (user ids to mention, assist threads, streamed steps). Nothing here talks to Slack.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.slack import mrkdwn, wording


@dataclass(frozen=True, kw_only=True)
class Directory:
    """Who people are in Slack: principal keys (``supervisor:S-1``) or staff ids (``S-1``)
    to Slack user ids, and optional display names for those without one."""

    slack_ids: Mapping[str, str] = field(default_factory=dict)
    names: Mapping[str, str] = field(default_factory=dict)

    def _lookup(self, table: Mapping[str, str], key: str) -> str | None:
        _, _, bare = key.partition(":")
        return table.get(key) or (table.get(bare) if bare else None)

    def who(self, key: str | None, name: str | None = None) -> str:
        """For internal cards: a mention when we know the Slack user, else the escaped name
        (``name``, the view's, first) or id."""
        if not key:
            return wording.UNKNOWN_PERSON
        known = mrkdwn.mention(self._lookup(self.slack_ids, key))
        if known:
            return known
        shown = name or self._lookup(self.names, key)
        return mrkdwn.clip(mrkdwn.one_line(shown or key), 80)

    def who_public(self, key: str | None) -> str | None:
        """For cards another organisation may read: a mention, or nothing (never an internal id)."""
        return mrkdwn.mention(self._lookup(self.slack_ids, key)) if key else None


@dataclass(frozen=True, kw_only=True)
class AssistThread:
    """A rep's open assist thread, bound to one customer account."""

    channel: str
    thread_ts: str
    customer_id: str
    customer_name: str | None = None


StepStatus = Literal["pending", "in_progress", "complete", "error"]


@dataclass(frozen=True, kw_only=True)
class Step:
    """One step of a turn shown while the agent works: a tool call and what the gate decided.

    ``title`` is written by our code from the exact arguments (e.g. "Looked up O-1042",
    "Refund 189.00 USD — waiting for your confirmation"), never by the model.
    """

    id: str
    title: str
    status: StepStatus = "complete"
    details: str | None = None
    output: str | None = None

    @classmethod
    def for_gate(cls, id: str, summary: str, decision: str) -> Step:
        """The step for a gate decision on an action, e.g. ``for_gate("p1", "Refund 189.00 USD on O-1042",
        "confirmation")`` → "Refund 189.00 USD on O-1042 — waiting for your confirmation" (pending).
        ``summary`` is the runtime's rendering of the exact arguments."""
        template, status = wording.GATE_STEP.get(decision, ("{summary}", "complete"))
        return cls(id=id, title=template.format(summary=summary), status=status)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class Outbound:
    """One message ready to send: the notification/fallback ``text`` and its ``blocks``."""

    text: str
    blocks: tuple[dict[str, Any], ...] = ()

    @property
    def block_list(self) -> list[dict[str, Any]]:
        """The blocks as the Web API takes them."""
        return list(self.blocks)
