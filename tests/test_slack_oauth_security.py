"""Slack OAuth: only allowed workspaces, and bot tokens sealed at rest.

* ``SIGNOFF_SLACK_ALLOWED_TEAMS``: an install from another workspace is refused and stores
  nothing; an event from another workspace is not acted on (OAuth and single-workspace);
* the database file never holds ``xoxb-`` (tokens are AES-GCM under ``SIGNOFF_SECRET_KEY``);
* rows an older version stored in clear are sealed at start-up and still work;
* OAuth without ``SIGNOFF_SECRET_KEY`` is a configuration error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from slack_sdk.oauth.installation_store.models.installation import Installation
from slack_sdk.oauth.installation_store.sqlalchemy import AsyncSQLAlchemyInstallationStore
from sqlalchemy import func, select, text

from agent.errors import ConfigError
from bot.app import App, create_app
from bot.cli.slack_demo import demo_database
from bot.server import make_web_app
from bot.settings import load_settings
from bot.slack.settings import allowed_teams
from storage.models import InboundRow
from tests.fakes.slack_api import FakeSlackApi
from tests.slack_kit import SIGNING_SECRET, event_body, mention, next_ts, signed_headers

KEY = "an-operator-key-of-at-least-32-characters"
ALLOWED, OTHER = "T0ALLOWED", "T0OTHERWS"


def _env(url: str, slack: FakeSlackApi, **extra: str) -> dict[str, str]:
    return {
        "SIGNOFF_DATABASE_URL": url,
        "SIGNOFF_LLM_PROVIDER": "scripted",
        "SLACK_CLIENT_ID": "1234.5678",
        "SLACK_CLIENT_SECRET": "client-secret",
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SIGNOFF_SLACK_API_URL": slack.base_url,
        "SIGNOFF_SLACK_STREAMING": "false",
        "SIGNOFF_SECRET_KEY": KEY,
        "SIGNOFF_SLACK_ALLOWED_TEAMS": ALLOWED,
        **extra,
    }


@pytest_asyncio.fixture
async def oauth(tmp_path: Path) -> AsyncIterator[tuple[App, TestClient, FakeSlackApi, Path]]:
    db = tmp_path / "oauth.db"
    url = await demo_database(db)
    async with FakeSlackApi() as slack:
        app = await create_app(load_settings(_env(url, slack)), seed=False)
        async with TestClient(TestServer(make_web_app(app))) as client:
            yield app, client, slack, db
        await app.close()


async def _install(client: TestClient, slack: FakeSlackApi, team: str, code: str) -> int:
    page = await client.get("/slack/install")
    state = (await page.text()).split("state=")[1].split("&")[0].split('"')[0]
    slack.grant(code, team_id=team, token=f"xoxb-{team.lower()}-secret")
    cookie = {"Cookie": page.headers["Set-Cookie"].split(";")[0]}
    done = await client.get(f"/slack/oauth_redirect?code={code}&state={state}", headers=cookie)
    return done.status


async def _rows(app: App, sql: str) -> list[Any]:
    async with app.db.reader() as s:
        return list((await s.execute(text(sql))).all())


async def _event_from(client: TestClient, team: str) -> int:
    body = event_body(mention("U0SOMEONE", "hello", channel="C0WS", ts=next_ts(), team=team))
    body = body.replace('"team_id": "T0SIGNOFF"', f'"team_id": "{team}"')
    body = body.replace('"authorizations": [{"team_id": "T0SIGNOFF"', f'"authorizations": [{{"team_id": "{team}"')
    r = await client.post(
        "/slack/events", data=body, headers={"Content-Type": "application/json", **signed_headers(body)}
    )
    return r.status


async def _inbound(app: App) -> int:
    async with app.db.reader() as s:
        return int((await s.execute(select(func.count()).select_from(InboundRow))).scalar_one())


async def test_an_install_from_a_workspace_not_allowed_is_refused_and_its_events_ignored(
    oauth: tuple[App, TestClient, FakeSlackApi, Path],
) -> None:
    app, client, slack, _db = oauth
    assert await _install(client, slack, OTHER, "code-other") != 200
    assert await _rows(app, "SELECT id FROM slack_bots") == []
    assert await _install(client, slack, ALLOWED, "code-allowed") == 200
    before = await _inbound(app)
    await _event_from(client, OTHER)
    assert await _inbound(app) == before
    assert await _event_from(client, ALLOWED) == 200
    assert await _inbound(app) == before + 1


async def test_the_database_never_holds_a_bot_token_in_clear(oauth: tuple[App, TestClient, FakeSlackApi, Path]) -> None:
    app, client, slack, db = oauth
    assert await _install(client, slack, ALLOWED, "code-1") == 200
    (token,) = [r[0] for r in await _rows(app, "SELECT bot_token FROM slack_bots")]
    assert token.startswith("enc1:") and "xoxb" not in token
    for path in db.parent.glob(db.name + "*"):  # the file, its WAL and shared memory
        assert b"xoxb-" not in path.read_bytes(), path
    assert app.slack is not None
    face = await app.slack.for_team(ALLOWED)
    assert face.client.token == "xoxb-t0allowed-secret"


async def test_tokens_stored_in_clear_by_an_older_version_are_sealed_at_start(tmp_path: Path) -> None:
    url = await demo_database(tmp_path / "old.db")
    async with FakeSlackApi() as slack:
        first = await create_app(load_settings(_env(url, slack)), seed=False)
        try:
            old = AsyncSQLAlchemyInstallationStore(client_id="1234.5678", engine=first.db.engine)
            await old.async_save(
                Installation(
                    app_id="A1", team_id=ALLOWED, user_id="U1", bot_token="xoxb-stored-in-clear", bot_user_id="UB"
                )
            )
        finally:
            await first.close()
        again = await create_app(load_settings(_env(url, slack)), seed=False)
        try:
            tokens = [r[0] for r in await _rows(again, "SELECT bot_token FROM slack_bots")]
            tokens += [r[0] for r in await _rows(again, "SELECT bot_token FROM slack_installations")]
            assert tokens and all(t.startswith("enc1:") for t in tokens)
            assert again.slack is not None
            assert (await again.slack.for_team(ALLOWED)).client.token == "xoxb-stored-in-clear"
        finally:
            await again.close()
        # Another key cannot open them: refused clearly, not used.
        other = await create_app(load_settings(_env(url, slack, SIGNOFF_SECRET_KEY="x" * 40)), seed=False)
        try:
            assert other.slack is not None
            with pytest.raises(ValueError, match="does not open with SIGNOFF_SECRET_KEY"):
                await other.slack.for_team(ALLOWED)
        finally:
            await other.close()


async def test_a_single_workspace_app_ignores_events_from_a_team_not_allowed(tmp_path: Path) -> None:
    url = await demo_database(tmp_path / "single.db")
    async with FakeSlackApi() as slack:
        env = {
            "SIGNOFF_DATABASE_URL": url,
            "SIGNOFF_LLM_PROVIDER": "scripted",
            "SLACK_BOT_TOKEN": slack.token,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SIGNOFF_SLACK_API_URL": slack.base_url,
            "SIGNOFF_SLACK_ALLOWED_TEAMS": "T0SIGNOFF",
        }
        app = await create_app(load_settings(env), seed=False)
        try:
            async with TestClient(TestServer(make_web_app(app))) as client:
                await _event_from(client, OTHER)
                assert await _inbound(app) == 0
                assert await _event_from(client, "T0SIGNOFF") == 200
                assert await _inbound(app) == 1
        finally:
            await app.close()


@pytest.mark.parametrize("key", [None, "too-short"])
def test_oauth_without_a_secret_key_is_a_configuration_error(key: str | None) -> None:
    env = {
        "SIGNOFF_LLM_PROVIDER": "scripted",
        "SLACK_CLIENT_ID": "1.2",
        "SLACK_CLIENT_SECRET": "cs",
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        **({"SIGNOFF_SECRET_KEY": key} if key else {}),
    }
    with pytest.raises(ConfigError, match="SIGNOFF_SECRET_KEY"):
        load_settings(env)


def test_the_allow_list_takes_team_ids_only() -> None:
    base = {"SIGNOFF_LLM_PROVIDER": "scripted"}
    assert allowed_teams(load_settings({**base, "SIGNOFF_SLACK_ALLOWED_TEAMS": "T01, T02"})) == {"T01", "T02"}
    with pytest.raises(ConfigError, match="SIGNOFF_SLACK_ALLOWED_TEAMS"):
        load_settings({**base, "SIGNOFF_SLACK_ALLOWED_TEAMS": "acme.slack.com"})
