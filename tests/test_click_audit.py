"""One click, one audit shape, whatever the face: the same clicks on a Slack approval card and on
a Teams one (a rep's approve, the supervisor's approve, the supervisor's replay of it) leave the
same ``click.refused`` / ``click.decided`` events through ``FacePort.click_event``, with the same
fields; only the face's own user and team ids differ."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.app import App
from bot.slack.ids import decode_value
from tests.fakes.bot_connector import TENANT_ID
from tests.fakes.slack_api import TEAM_ID
from tests.slack_kit import GRACE, TOMAS, button_value
from tests.teams_kit import APPROVALS as TEAMS_APPROVALS
from tests.teams_kit import REP, SUP, click
from tests.test_slack_face import APPROVALS as SLACK_APPROVALS
from tests.test_slack_face import World, _approval_card, world  # noqa: F401 (the fixture)
from tests.test_teams_face import _to_approval, open_rig

#: What the three clicks leave, face aside: (kind, action, reason, who clicked).
EXPECTED = [
    ("click.refused", "approve", "forbidden", "rep"),
    ("click.decided", "approve", None, "supervisor"),
    ("click.refused", "approve", "conflict", "supervisor"),
]
FIELDS = {"face", "action", "target", "user", "team"}


async def _clicks_after(app: App, seq: int) -> list[Any]:
    events = await app.services.audit.list(after_seq=seq, limit=1000)
    return [e for e in events if e.kind in ("click.decided", "click.refused")]


def _shape(events: list[Any], *, face: str, target: str, users: dict[str, tuple[str, str]]) -> list[Any]:
    """Each event as (kind, action, reason, who), after checking its face, target, user and team."""
    by_user = {ids: who for who, ids in users.items()}
    out = []
    for e in events:
        assert set(e.data) == FIELDS | ({"reason"} if e.kind == "click.refused" else set()), e.data
        assert (e.data["face"], e.data["target"]) == (face, target), e.data
        out.append((e.kind, e.data["action"], e.data.get("reason"), by_user[(e.data["user"], e.data["team"])]))
    return out


async def test_the_same_clicks_leave_the_same_audit_events_on_slack(world: World) -> None:  # noqa: F811
    card = await _approval_card(world)
    value = button_value(card.blocks, "signoff.approve")
    seq = await world.app.services.audit.head_seq()
    for who in (TOMAS, GRACE, GRACE):  # the rep, the supervisor, the supervisor's replay
        assert await world.click(who, "signoff.approve", value, channel=SLACK_APPROVALS, message_ts=card.ts) == 200
        await world.drain()
    target, _ = decode_value(value)
    users = {"rep": (TOMAS, TEAM_ID), "supervisor": (GRACE, TEAM_ID)}
    shape = _shape(await _clicks_after(world.app, seq), face="slack", target=target, users=users)
    assert shape == EXPECTED


async def test_the_same_clicks_leave_the_same_audit_events_on_teams(tmp_path: Path) -> None:
    async with open_rig(tmp_path) as rig:
        base = rig.connector.base_url
        approval_msg, _ = await _to_approval(rig)
        data = next(a["data"] for a in approval_msg.card["actions"] if a["verb"] == "signoff.approve")
        seq = await rig.app.services.audit.head_seq()
        for n, who in enumerate((REP, SUP, SUP)):
            approve = click(
                base,
                aad=who,
                invoke_id=f"f:audit-{n}",
                verb="signoff.approve",
                target=data["id"],
                version=data["version"],
                card_activity_id=approval_msg.id,
                conversation_id=TEAMS_APPROVALS,
            )
            assert (await rig.post(approve))[0] == 200
            await rig.work()
        users = {"rep": (REP, TENANT_ID), "supervisor": (SUP, TENANT_ID)}
        shape = _shape(await _clicks_after(rig.app, seq), face="teams", target=data["id"], users=users)
        assert shape == EXPECTED
