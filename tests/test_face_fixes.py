"""What people see through the faces, in process (the composition root's app, the recording
Slack API, the fake Bot Connector, a local SMTP server):

* a model answer's links reach neither Slack nor Teams live;
* a Slack Connect user links with a code sent over SMTP (when configured), then reads their own
  order's status where only they see it, never in the shared channel;
* in a rep's assist thread the agent speaks about the customer, not to them.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from aiosmtpd.controller import Controller

from agent.llm.base import ModelRequest, ModelResponse
from agent.llm.testing import FunctionModel, make_response, text_block
from agent.outcomes import TurnResult
from agent.planner import DemoPlanner
from bot.app import App, create_app
from bot.cli.slack_demo import demo_database
from bot.server import make_web_app
from bot.settings import load_settings
from bot.teams.config import TeamsConfig
from bot.teams.delivery import reply_of
from bot.teams.sender import TeamsSender, connections_with
from tests.fakes.bot_connector import APP_ID, TENANT_ID, FakeBotConnector, StaticTokenProvider
from tests.fakes.slack_api import BOT_USER_ID, FakeSlackApi
from tests.slack_kit import MAYA, PRIYA, SIGNING_SECRET, event_body, mention, message, next_ts, signed_headers
from tests.test_email_bridge import Inbox, free_port

EVIL = "See [x](https://evil.example) or <https://evil.example|x> for details."
SHARED, OTHER_TEAM, STRANGER = "C0SHARED", "T0CUSTOMER", "U0STRANGER"


def live_links(text: str) -> list[str]:
    """Anything a Slack or Teams client would turn into a link to evil.example."""
    return re.findall(r"\]\(https?://|<https?://|https?://evil", text)


class World:
    def __init__(self, app: App, client: TestClient, slack: FakeSlackApi) -> None:
        self.app, self.client, self.slack = app, client, slack

    async def event(self, ev: dict[str, Any], **kw: Any) -> None:
        body = event_body(ev, **kw)
        r = await self.client.post(
            "/slack/events", data=body, headers={"Content-Type": "application/json", **signed_headers(body)}
        )
        assert r.status == 200
        worker = self.app.worker()
        idle = 0
        while idle < 2:
            idle = idle + 1 if await worker.run_once() == 0 else 0

    def sent(self) -> str:
        """Everything our calls carried to Slack (text, blocks, streamed Markdown)."""
        return json.dumps([c.args for c in self.slack.calls()], ensure_ascii=False)


async def world_of(tmp_path: Path, slack: FakeSlackApi, model: Any, **extra: str) -> AsyncIterator[World]:
    settings = load_settings(
        {
            "SIGNOFF_DATABASE_URL": await demo_database(tmp_path / "face.db"),
            "SIGNOFF_LLM_PROVIDER": "scripted",
            "SLACK_BOT_TOKEN": slack.token,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SIGNOFF_SLACK_API_URL": slack.base_url,
            "SIGNOFF_SLACK_STREAMING": "false",
            **extra,
        }
    )
    app = await create_app(settings, model=model, seed=False)
    async with TestClient(TestServer(make_web_app(app))) as client:
        yield World(app, client, slack)
    await app.close()


@pytest_asyncio.fixture
async def evil(tmp_path: Path) -> AsyncIterator[World]:
    def answer(request: ModelRequest) -> ModelResponse:
        return make_response([text_block(EVIL)], model="evil", request=request)

    async with FakeSlackApi() as slack:
        async for w in world_of(tmp_path, slack, FunctionModel(answer)):
            yield w


async def test_a_model_answer_reaches_slack_without_a_live_link(evil: World) -> None:
    """Markdown links and Slack's ``<url|text>`` in the model's words are shown as words."""
    await evil.event(mention(MAYA, "hello"))
    sent = evil.sent()
    assert "evil" in sent  # the answer went out
    assert live_links(sent) == []


async def test_a_model_answer_reaches_teams_as_plain_text_without_a_live_link() -> None:
    """What the Bot Connector receives: ``textFormat: plain`` and no address a client would link."""
    result = TurnResult(
        conversation_id="conv_1",
        run_id="run_1",
        outcome="answered",
        reply=EVIL,
        answer=EVIL,
        iterations=1,
        input_tokens=0,
        output_tokens=0,
        pending=(),
    )
    async with FakeBotConnector() as fake:
        config = TeamsConfig(app_id=APP_ID, tenant_id=TENANT_ID, service_url_allow=("http://127.0.0.1",))
        sender = TeamsSender(config, connections=connections_with(config, StaticTokenProvider()))
        fake.open_conversation("a:1")
        reference = {
            "user": {"id": "29:1user", "name": "Ann"},
            "bot": {"id": f"28:{APP_ID}", "name": "signoff"},
            "conversation": {"id": "a:1", "conversationType": "personal", "tenantId": TENANT_ID},
            "channelId": "msteams",
            "serviceUrl": fake.base_url,
        }
        await sender.send(reference, text=reply_of(result).text)
        [call] = fake.calls("POST")
    body = call.body
    assert body["textFormat"] == "plain" and "x" in body["text"]
    assert live_links(json.dumps(body)) == []


@pytest.fixture
def smtp() -> Any:
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    yield inbox, f"smtp://127.0.0.1:{controller.port}"
    controller.stop()


async def test_slack_connect_link_code_goes_by_smtp_and_the_status_only_to_the_user(
    tmp_path: Path, smtp: tuple[Inbox, str]
) -> None:
    inbox, url = smtp
    async with FakeSlackApi() as slack:
        extra = {"SIGNOFF_SMTP_URL": url, "SIGNOFF_EMAIL_FROM": "support@fernway.example"}
        async for w in world_of(tmp_path, slack, DemoPlanner(), **extra):
            await w.event(
                mention(STRANGER, "link maya.chen@example.com", channel=SHARED, team=OTHER_TEAM), ext_shared=True
            )
            [(sender, rcpts, mail)] = inbox.messages
            assert (sender, rcpts) == ("support@fernway.example", ["maya.chen@example.com"])
            found = re.search(r"code is ([A-Z0-9]{6})", str(mail.get_payload(decode=True), "utf-8"))
            assert found is not None
            await w.event(mention(STRANGER, found.group(1), channel=SHARED, team=OTHER_TEAM), ext_shared=True)
            ts = next_ts()
            await w.event(
                mention(STRANGER, "Where is my order O-1042?", channel=SHARED, team=OTHER_TEAM, ts=ts), ext_shared=True
            )
            mine = [e for e in slack.ephemeral if e["user"] == STRANGER and e["thread_ts"] == ts]
            assert any("O-1042" in json.dumps(e) and "delivered" in json.dumps(e) for e in mine)
            channel = json.dumps([m.visible for m in slack.messages_in(SHARED, None)]) + json.dumps(
                [m.visible for m in slack.messages_in(SHARED, ts)]
            )
            assert "O-1042" not in channel and "delivered" not in channel


async def test_in_an_assist_thread_the_agent_speaks_to_the_rep_about_the_customer(tmp_path: Path) -> None:
    async with FakeSlackApi() as slack:
        async for w in world_of(tmp_path, slack, None):
            root = next_ts()
            await w.event(mention(PRIYA, "assist C-17", ts=root))
            await w.event(message(PRIYA, "Where is order O-1040?", thread_ts=root))
            said = " ".join(m.visible for m in slack.messages_in("C0SUPPORT", root) if m.user == BOT_USER_ID)
            assert "The customer's order O-1040" in said
            assert "Your order" not in said and "your order" not in said
