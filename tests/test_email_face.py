"""The email face's webhook comes through its registry line (``bot/email/wiring.py``), like every
face's routes: a deployment without ``SIGNOFF_EMAIL_SECRET`` answers ``POST /email/inbound``
exactly as before (503 ``unavailable``, nothing stored), and a registry without the email face
serves no ``/email/inbound`` at all."""

from __future__ import annotations

import time
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import func, select

from agent.llm.testing import ScriptedModel
from bot.app import FACES, create_app
from bot.email import wiring as email_wiring
from bot.email import wording as say
from bot.email.parsing import sign
from bot.server import make_web_app
from bot.settings import load_settings
from sandbox.schema import upgrade
from storage.models import InboundRow
from tests.test_email_bridge import mail


async def _app(tmp_path: Path, faces: tuple = FACES, **env: str):  # type: ignore[type-arg,no-untyped-def]
    url = f"sqlite+aiosqlite:///{tmp_path / 'email.db'}"
    await upgrade(url)
    settings = load_settings({"SIGNOFF_DATABASE_URL": url, "SIGNOFF_ENV": "development", **env})
    return await create_app(settings, model=ScriptedModel([]), seed=False, faces=faces)


async def test_without_a_secret_the_webhook_answers_503_and_stores_nothing(tmp_path: Path) -> None:
    """Today's answer, pinned: signed or not, 503 ``unavailable`` with its message; no row."""
    app = await _app(tmp_path)
    try:
        async with TestClient(TestServer(make_web_app(app))) as client:
            body = mail("hi", message_id="<n1@x>")
            stamp = str(int(time.time()))
            for headers in ({}, {"X-Signoff-Timestamp": stamp, "X-Signoff-Signature": sign("s", body, stamp)}):
                r = await client.post(
                    "/email/inbound", data=body, headers={"Content-Type": "application/json", **headers}
                )
                assert r.status == 503
                assert await r.json() == {"error": "unavailable", "message": say.EMAIL_NOT_CONFIGURED}
            assert (await client.get("/email/inbound")).status == 405
        async with app.db.reader() as s:
            assert await s.scalar(select(func.count()).select_from(InboundRow)) == 0
    finally:
        await app.close()


async def test_the_webhook_is_the_email_faces_route_from_its_registry_line(tmp_path: Path) -> None:
    """The email face serves ``POST /email/inbound``; without its line the server serves none."""
    app = await _app(tmp_path, SIGNOFF_EMAIL_SECRET="s")
    try:
        (mail,) = [f for f in app.faces if f.name == "email"]
        assert [(r.method, r.path) for r in mail.routes()] == [("POST", "/email/inbound")]  # type: ignore[attr-defined]
    finally:
        await app.close()
    app = await _app(tmp_path, tuple(f for f in FACES if f is not email_wiring.face), SIGNOFF_EMAIL_SECRET="s")
    try:
        async with TestClient(TestServer(make_web_app(app))) as client:
            r = await client.post("/email/inbound", data=b"{}", headers={"Content-Type": "application/json"})
            assert r.status == 404
            assert (await client.get("/healthz")).status == 200
    finally:
        await app.close()
