"""The Teams face's cards for stored records: record → view (:mod:`agent.views`) → Adaptive Card.

The one place the Teams face turns an approval, a confirmation or a shadow proposal into what it shows: the
view is built with the runtime's catalogue and a clock (so expiry, amounts, the routing
reason and the outcome are the ones every face shows), then rendered by ``cards.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from agent.notify import ShadowNotice
from agent.views import approval_view, confirmation_view, shadow_view
from bot.teams.cards import Card, approval_card, confirmation_card, shadow_card
from storage.records import Approval, Confirmation
from tools.registry import ToolDef

#: The catalogue's entry for a tool name (``FacePort.tool``).
ToolOf = Callable[[str], ToolDef | None]


def approval(a: Approval, *, tool_of: ToolOf, now: datetime, names: Mapping[str, str]) -> Card:
    """The approval's card as shown at ``now``."""
    return approval_card(approval_view(a, tool=tool_of(a.tool), now=now, names=names))


def confirmation(c: Confirmation, *, tool_of: ToolOf, decided_by: str | None = None) -> Card:
    """The confirmation's card; ``decided_by`` names the person who answered it."""
    names = {c.principal: decided_by} if decided_by else None
    return confirmation_card(confirmation_view(c, tool=tool_of(c.tool), names=names))


def shadow(notice: ShadowNotice, *, tool_of: ToolOf, names: Mapping[str, str] | None = None) -> Card:
    """A shadow proposal's card ("shadow: not executed"), from the notice's exact arguments."""
    return shadow_card(shadow_view(notice, tool=tool_of(notice.tool), names=names))
