"""Shared pieces of the Teams face's scenario tests: a dataset whose people carry Teams users,
the environment that points signoff at a local token issuer and fake Bot Connector, the
planner that asks for a refund above the customer ceiling, and activities as Teams sends them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_api import refund_script, tool_uses
from tests.fakes.bot_connector import APP_ID, TENANT_ID, TokenIssuer, card_action_activity, message_activity

DEMO = Path(__file__).resolve().parents[1] / "sandbox" / "data" / "demo.json"
C7 = "c7c7c7c7-0000-4000-8000-000000000007"  # Maya Chen, customer C-7
C8 = "c8c8c8c8-0000-4000-8000-000000000008"  # Jonas Weber, customer C-8
REP = "51515151-0000-4000-8000-000000000001"  # Priya Raman, rep S-1
SUP = "53535353-0000-4000-8000-000000000003"  # Grace Liu, supervisor S-3
NOBODY = "99999999-0000-4000-8000-000000000999"  # on no list
PERSONAL = "a:1personal-maya"
APPROVALS = "19:approvals@thread.tacv2"
DEV_TOKEN = "dev-outbound-token-for-the-fake-connector"
#: A refund above the customer ceiling (50.00 USD): the customer confirms, a supervisor approves.
REFUND = {
    "order_id": "O-1042",
    "amount_minor": 6000,
    "currency": "USD",
    "reason_code": "damaged",
    "evidence": ["refund-policy@7#window"],
}
SCRIPT = refund_script(REFUND)


def dataset_file(tmp: Path) -> Path:
    """The demo dataset with Teams users on two customers, a rep and a supervisor."""
    data = json.loads(DEMO.read_text(encoding="utf-8"))
    ids = {"C-7": C7, "C-8": C8, "S-1": REP, "S-3": SUP}
    for person in [*data["customers"], *data["staff"]]:
        if person["id"] in ids:
            person["teams_user_id"] = ids[person["id"]]
    path = tmp / "teams-dataset.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def teams_env(*, issuer: TokenIssuer, connector_url: str) -> dict[str, str]:
    """SIGNOFF_TEAMS_* for a local issuer and connector (development settings, never production)."""
    return {
        "SIGNOFF_ENV": "development",
        "SIGNOFF_TEAMS_APP_ID": APP_ID,
        "SIGNOFF_TEAMS_TENANT_ID": TENANT_ID,
        "SIGNOFF_TEAMS_DEV_OUTBOUND_TOKEN": DEV_TOKEN,
        "SIGNOFF_TEAMS_DEV_JWKS_URL": issuer.jwks_url,
        "SIGNOFF_TEAMS_SERVICE_URL_ALLOW": "http://127.0.0.1",
        "SIGNOFF_TEAMS_APPROVALS_CONVERSATION": APPROVALS,
        "SIGNOFF_TEAMS_SERVICE_URL": connector_url,
    }


def planner_reply(messages: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | str:
    """Stateless (the same after a restart): the next call of the script, then text."""
    uses = tool_uses(messages)
    if uses < len(SCRIPT):
        return SCRIPT[uses]
    last = json.dumps(messages[-1]) if messages else ""
    if "approved" in last:
        return "The refund went through."
    return "I have asked for that refund; please confirm it." if uses == len(SCRIPT) else "Noted."


def message(
    connector_url: str,
    *,
    aad: str = C7,
    text: str = "Refund 60.00 on O-1042, it arrived damaged.",
    activity_id: str = "1700000000001",
    conversation_id: str = PERSONAL,
    **extra: Any,
) -> dict[str, Any]:
    activity = message_activity(
        service_url=connector_url, text=text, activity_id=activity_id, conversation_id=conversation_id, **extra
    )
    activity["from"] = {"id": f"29:{aad[:8]}", "name": "Someone", "aadObjectId": aad}
    return activity


def click(
    connector_url: str,
    *,
    aad: str,
    verb: str,
    target: str,
    version: int,
    card_activity_id: str,
    conversation_id: str = PERSONAL,
    invoke_id: str = "f:invoke-1",
    comment: str | None = None,
) -> dict[str, Any]:
    data: dict[str, Any] = {"id": target, "version": version}
    if comment is not None:
        data["comment"] = comment
    activity = card_action_activity(
        service_url=connector_url,
        verb=verb,
        data=data,
        card_activity_id=card_activity_id,
        conversation_id=conversation_id,
    )
    activity["id"] = invoke_id
    activity["from"] = {"id": f"29:{aad[:8]}", "name": "Someone", "aadObjectId": aad}
    return activity


def token(issuer: TokenIssuer, connector_url: str, **kw: Any) -> str:
    return issuer.mint(**{"audience": APP_ID, "service_url": connector_url, **kw})
