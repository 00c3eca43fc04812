"""The Slack face's cards for stored records: record → view (:mod:`agent.views`) → Block Kit.

The one place the Slack face turns an approval, a confirmation or a shadow proposal into what it shows: the
view is built with the runtime's catalogue and clock (so expiry, amounts, the routing
reason and the outcome are the ones every face shows), then rendered by ``blocks.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.notify import ShadowNotice
from agent.views import ApprovalView, approval_view, confirmation_view, shadow_view
from bot.slack import blocks
from bot.slack.face import SlackFace
from bot.slack.view_models import Directory, Outbound
from storage.records import Approval, Confirmation


async def approval_views(face: SlackFace, approvals: Sequence[Approval]) -> tuple[list[ApprovalView], Directory]:
    """The approvals as shown now, and who their people are in Slack."""
    keys = [k for a in approvals for k in (a.requester, a.decider, *(d.actor for d in a.decisions))]
    people = await face.directory(*keys)
    now = face.port.clock()
    views = [approval_view(a, tool=face.port.tool(a.tool), now=now, names=people.names) for a in approvals]
    return views, people


async def approval_card(face: SlackFace, approval: Approval) -> Outbound:
    """The approval's card as the database has it now."""
    [view], people = await approval_views(face, [approval])
    return blocks.approval_card(view, directory=people)


def confirmation_card(face: SlackFace, confirmation: Confirmation) -> Outbound:
    """The confirmation's card as the record has it."""
    tool = face.port.tool(confirmation.tool)
    return blocks.confirmation_card(confirmation_view(confirmation, tool=tool))


def reject_modal(face: SlackFace, approval: Approval, *, channel: str | None, ts: str | None) -> dict[str, Any]:
    """The reject dialog for the approval as it stands (no look-ups: it opens within Slack's 3 s)."""
    view = approval_view(approval, tool=face.port.tool(approval.tool), now=face.port.clock())
    return blocks.reject_modal(view, channel=channel, ts=ts)


async def shadow_card(face: SlackFace, notice: ShadowNotice, *, in_thread: bool = False) -> Outbound:
    """A shadow proposal as staff see it ("shadow: not executed"), from the notice's exact arguments."""
    people = await face.directory(notice.requester)
    view = shadow_view(notice, tool=face.port.tool(notice.tool), names=people.names)
    return blocks.shadow_card(view, directory=people, in_thread=in_thread)
