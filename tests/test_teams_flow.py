"""The pieces compose: a signed click arrives, a stand-in for the runtime decides, the
clicker gets the redrawn card in the invoke answer, and everyone's copy is updated with a
PUT to the fake Bot Connector using only the stored reference and the card's activity id."""

from __future__ import annotations

from typing import Any

import aiohttp
from aiohttp import web

from bot.teams.auth import InboundAuthenticator
from bot.teams.config import TeamsConfig
from bot.teams.inbound import TeamsActivity, TeamsCardAction, parse_activity
from bot.teams.invoke import InvokeReply, card_reply, refusal_reply
from bot.teams.routes import teams_routes
from bot.teams.sender import TeamsSender, connections_with
from tests.fakes.bot_connector import (
    APP_ID,
    TENANT_ID,
    USER_AAD_ID,
    FakeBotConnector,
    StaticTokenProvider,
    TokenIssuer,
    card_action_activity,
    message_activity,
)
from tests.test_teams_cards import T0, confirmation, confirmation_card


async def test_a_confirm_click_redraws_the_card_for_the_clicker_and_for_everyone() -> None:
    async with TokenIssuer() as issuer, FakeBotConnector() as connector, aiohttp.ClientSession() as http:
        config = TeamsConfig(
            app_id=APP_ID,
            tenant_id=TENANT_ID,
            botframework_jwks_url=issuer.jwks_url,
            service_url_allow=("http://127.0.0.1",),
        )
        sender = TeamsSender(config, connections=connections_with(config, StaticTokenProvider()))
        conv = "a:1personal-conversation"
        connector.open_conversation(conv)

        async def accept(activity: TeamsActivity, raw: dict[str, Any], reference: dict[str, Any]) -> InvokeReply:
            assert isinstance(activity, TeamsCardAction) and activity.card_activity_id
            if activity.sender.aad_object_id != USER_AAD_ID:  # the runtime's check, stood in for here
                return refusal_reply("Only the person asked can confirm.")
            decided = confirmation_card(
                confirmation(status="confirmed", version=2, decided_at=T0), decided_by=activity.sender.name
            )
            await sender.update(reference, activity_id=activity.card_activity_id, card=decided)
            return card_reply(decided)

        app = web.Application()
        app.add_routes(teams_routes(accept, auth=InboundAuthenticator(config)))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/teams/messages"
        try:
            # The confirmation card was posted earlier, from the reference of the customer's message.
            first = message_activity(service_url=connector.base_url)
            stored = parse_activity(first).reference
            card_id = await sender.send(stored, card=confirmation_card(confirmation()))
            click = card_action_activity(service_url=connector.base_url, card_activity_id=card_id)
            token = issuer.mint(audience=APP_ID, service_url=connector.base_url)
            async with http.post(url, json=click, headers={"Authorization": f"Bearer {token}"}) as resp:
                answer = await resp.json()
            assert resp.status == 200 and answer["type"] == "application/vnd.microsoft.card.adaptive"
            assert "actions" not in answer["value"]
            (shown,) = connector.visible(conv)
            assert shown.id == card_id and shown.updates == 1 and shown.card == answer["value"]
        finally:
            await runner.cleanup()
