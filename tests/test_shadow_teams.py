"""Shadow as staff see it, in Teams (the face in process, its Bot Connector faked): a Teams
customer's refund in shadow is a card marked "shadow: not executed" in the approvals
conversation, with nothing to click; the customer hears a person will follow up, never that
it was refunded; the same activity delivered again posts nothing twice."""

from __future__ import annotations

import json
from pathlib import Path

from agent.wording import SHADOW_CUSTOMER_NOTICE, SHADOW_LABEL
from sandbox.models import StoreRefundRow
from tests.slack_kit import POLICY
from tests.teams_kit import APPROVALS, message
from tests.test_teams_face import open_rig


def _shadow_policy(path: Path) -> Path:
    """The bundled policy with Teams customers in shadow."""
    text = POLICY.read_text()
    line = "teams: {customer: full, rep: assist, supervisor: assist}"
    assert line in text
    text = text.replace(line, "teams: {customer: shadow, rep: assist, supervisor: assist}")
    path.write_text(text.replace('version: "2026.12.3"', 'version: "2030.1.1"'))
    return path


async def test_a_teams_customer_s_shadow_refund_is_a_card_for_staff_and_a_person_follows_up(tmp_path: Path) -> None:
    policy = str(_shadow_policy(tmp_path / "policy.yaml"))
    async with open_rig(tmp_path, SIGNOFF_POLICY_FILE=policy) as rig:
        refunds = await rig.count(StoreRefundRow)
        ask = message(rig.connector.base_url)
        assert (await rig.post(ask))[0] == 202
        await rig.work()
        said = " ".join(a.text or "" for a in rig.said())
        assert SHADOW_CUSTOMER_NOTICE in said and "refunded" not in said.lower(), said
        assert all(a.card is None or "actions" not in a.card for a in rig.said())  # nothing to confirm
        cards = [a.card for a in rig.said(APPROVALS) if a.card and SHADOW_LABEL in json.dumps(a.card)]
        assert len(cards) == 1 and "actions" not in cards[0]
        shown = json.dumps(cards[0])
        assert "O-1042" in shown and "C-7" in shown and "60.00 USD" in shown
        assert await rig.count(StoreRefundRow) == refunds  # nothing moved in the shop
        before = (len(rig.said()), len(rig.said(APPROVALS)))
        assert (await rig.post(ask))[0] == 202  # Teams delivers the same activity again
        await rig.work()
        assert (len(rig.said()), len(rig.said(APPROVALS))) == before
