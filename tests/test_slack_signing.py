"""No Slack HTTP route believes an unsigned request, in any configuration.

* over HTTP with ``SLACK_SIGNING_SECRET``: a missing, bad or stale signature is 401 and writes nothing;
* with Socket Mode credentials and no signing secret: no ``/slack/*`` route is mounted at all
  (it used to be mounted with verification off — an unsigned POST opened turns as anyone);
* with the OAuth install configured: the same 401s, and OAuth needs the signing secret;
* a real ``signoff serve`` with Socket Mode credentials answers an unsigned event with 404.
"""

from __future__ import annotations

import hashlib
import hmac
import shutil
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import func, select

from agent.errors import ConfigError
from bot.app import create_app
from bot.cli.slack_demo import demo_database
from bot.server import make_web_app
from bot.settings import load_settings
from bot.slack.bolt import UnsignedSlack, build_bolt, routes
from storage.models import InboundRow, JobRow
from tests.fakes.slack_api import FakeSlackApi
from tests.slack_kit import (
    DEMO,
    PRIYA,
    SIGNING_SECRET,
    SIGNOFF,
    Serve,
    env_for,
    event_body,
    mention,
    run_cli,
    signed_headers,
)

CONFIGS = {
    "http": {"SLACK_BOT_TOKEN": "xoxb-test-token", "SLACK_SIGNING_SECRET": SIGNING_SECRET},
    "socket": {"SLACK_BOT_TOKEN": "xoxb-test-token", "SLACK_APP_TOKEN": "xapp-1-test"},
    "oauth": {
        "SLACK_CLIENT_ID": "1234.5678",
        "SLACK_CLIENT_SECRET": "cs",
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SIGNOFF_SECRET_KEY": "k" * 32,
    },
}


def _hmac(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def forged(body: str) -> dict[str, dict[str, str]]:
    """Every way of not being signed by Slack with our secret."""
    good = signed_headers(body)
    at = int(good["X-Slack-Request-Timestamp"])
    return {
        "unsigned": {},
        "bad": {**good, "X-Slack-Signature": "v0=" + "0" * 64},
        "other secret": signed_headers(body, secret="not-our-secret"),
        "empty secret": {**good, "X-Slack-Signature": "v0=" + _hmac(b"", f"v0:{at}:{body}")},
        "stale": signed_headers(body, at=at - 400),
    }


@pytest_asyncio.fixture(params=sorted(CONFIGS))
async def client(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[str, TestClient]]:
    url = await demo_database(tmp_path / "sign.db")
    async with FakeSlackApi() as slack:
        env = {"SIGNOFF_DATABASE_URL": url, "SIGNOFF_LLM_PROVIDER": "scripted", "SIGNOFF_SLACK_API_URL": slack.base_url}
        app = await create_app(load_settings({**env, **CONFIGS[request.param]}), seed=False)
        async with TestClient(TestServer(make_web_app(app))) as c:
            yield request.param, c
        await app.close()


async def _count(c: TestClient) -> tuple[int, int]:
    from bot.server import APP

    db = c.server.app[APP].db
    async with db.reader() as s:
        inbound = (await s.execute(select(func.count()).select_from(InboundRow))).scalar_one()
        jobs = (await s.execute(select(func.count()).select_from(JobRow))).scalar_one()
    return int(inbound), int(jobs)


async def test_no_configuration_acts_on_an_unsigned_badly_signed_or_stale_event(
    client: tuple[str, TestClient],
) -> None:
    name, c = client
    body = event_body(mention(PRIYA, "refund everything", channel="D0PRIYA"))
    before = await _count(c)
    for how, headers in forged(body).items():
        r = await c.post("/slack/events", data=body, headers={"Content-Type": "application/json", **headers})
        # Socket Mode mounts no route at all; HTTP and OAuth verify every request.
        assert r.status == (404 if name == "socket" else 401), (name, how)
    assert await _count(c) == before
    if name == "socket":
        assert (await c.get("/slack/install")).status == 404
        assert (await c.get("/slack/oauth_redirect?code=x&state=y")).status == 404
    else:  # the control: Slack's own signature is accepted
        r = await c.post(
            "/slack/events", data=body, headers={"Content-Type": "application/json", **signed_headers(body)}
        )
        assert r.status == 200


async def test_the_routes_refuse_to_be_built_without_a_signing_secret(tmp_path: Path) -> None:
    url = await demo_database(tmp_path / "sign.db")
    settings = load_settings({"SIGNOFF_DATABASE_URL": url, "SIGNOFF_LLM_PROVIDER": "scripted", **CONFIGS["socket"]})
    app = await create_app(settings, seed=False)
    try:
        assert app.slack is not None
        for secret in (None, ""):
            with pytest.raises(UnsignedSlack, match="SLACK_SIGNING_SECRET"):
                routes(build_bolt(app.slack), secret)
    finally:
        await app.close()


def test_oauth_needs_the_signing_secret_even_with_socket_mode() -> None:
    env = {
        "SIGNOFF_LLM_PROVIDER": "scripted",
        "SLACK_CLIENT_ID": "1.2",
        "SLACK_CLIENT_SECRET": "cs",
        "SIGNOFF_SECRET_KEY": "k" * 32,
    }
    with pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET"):
        load_settings({**env, "SLACK_APP_TOKEN": "xapp-1-test"})


@pytest.mark.skipif(not SIGNOFF.exists(), reason="the signoff console script is not installed")
async def test_signoff_serve_with_socket_mode_credentials_mounts_no_slack_route(tmp_path: Path) -> None:
    template = tmp_path / "template.db"
    env = env_for(template, anthropic="http://127.0.0.1:9", slack="http://127.0.0.1:9")
    assert (await run_cli(env, "db", "upgrade"))[0] == 0
    assert (await run_cli(env, "store", "load", str(DEMO), "--rebase-to-now"))[0] == 0
    db = tmp_path / "socket.db"
    shutil.copy(template, db)
    env = env_for(db, anthropic="http://127.0.0.1:9", slack="http://127.0.0.1:9", SLACK_APP_TOKEN="xapp-1-test")
    del env["SLACK_SIGNING_SECRET"]
    server = Serve(env)
    await server.start()
    try:
        body = event_body(mention(PRIYA, "assist C-7", channel="D0PRIYA"))
        for how, headers in {**forged(body), "signed": signed_headers(body)}.items():
            assert await server.post(body, headers) == 404, how
    finally:
        await server.stop()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM inbound").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0


async def _status(server: Serve, method: str, path: str, body: str = "", headers: dict[str, str] | None = None) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, server.url + path, data=body.encode(), headers=headers or {}, allow_redirects=False
        ) as r,
    ):
        return r.status


async def test_signoff_serve_in_socket_mode_with_a_signing_secret_mounts_only_the_oauth_install(tmp_path: Path) -> None:
    """SLACK_APP_TOKEN and SLACK_SIGNING_SECRET both set: Socket Mode brings the events, so
    /slack/events is not served, even signed; the OAuth install flow (SLACK_CLIENT_ID) keeps
    its two routes, and without it there is no /slack/* route at all."""
    template = tmp_path / "template.db"
    env = env_for(template, anthropic="http://127.0.0.1:9", slack="http://127.0.0.1:9")
    assert (await run_cli(env, "db", "upgrade"))[0] == 0
    assert (await run_cli(env, "store", "load", str(DEMO), "--rebase-to-now"))[0] == 0
    oauth = {"SLACK_CLIENT_ID": "1234.5678", "SLACK_CLIENT_SECRET": "c", "SIGNOFF_SECRET_KEY": "k" * 40}
    body = event_body(mention(PRIYA, "assist C-7", channel="D0PRIYA"))
    for name, extra in (("plain", {}), ("oauth", oauth)):
        db = tmp_path / f"{name}.db"
        shutil.copy(template, db)
        server = Serve(
            env_for(
                db, anthropic="http://127.0.0.1:9", slack="http://127.0.0.1:9", SLACK_APP_TOKEN="xapp-1-test", **extra
            )
        )
        await server.start()
        try:
            assert await server.post(body, signed_headers(body)) == 404, name
            install = await _status(server, "GET", "/slack/install")
            assert (install != 404) if extra else (install == 404), (name, install)
        finally:
            await server.stop()
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM inbound").fetchone()[0] == 0
            assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
