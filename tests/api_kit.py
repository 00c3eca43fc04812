"""Helpers for the HTTP API and email bridge tests: an aiohttp test client over a seeded runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import func, select

from agent.face_port import FacePort
from bot.api import wiring as api_wiring
from bot.api.auth import AuthConfig, make_token
from bot.app import App, build_mailer
from bot.email import wiring as email_wiring
from bot.email.bridge import EmailConfig
from bot.email.smtp import Mailer
from bot.faces import FaceKit
from bot.server import APP, make_web_app
from bot.settings import Settings, load_settings
from storage.db import Database
from storage.models import (
    ApprovalRow,
    AuditEventRow,
    ConfirmationRow,
    ConversationRow,
    MessageRow,
    ProcessedEventRow,
    ProposalRow,
)
from tests.support import Harness

JWT_SECRET = "test-jwt-secret-that-is-long-enough-for-hs256"
EMAIL_SECRET = "test-email-secret"


def settings(**extra: str) -> Settings:
    env = {
        "SIGNOFF_ENV": "development",  # shared-secret staff tokens (tests/conftest.py)
        "SIGNOFF_LLM_PROVIDER": "scripted",
        "SIGNOFF_JWT_SECRET": JWT_SECRET,
        "SIGNOFF_EMAIL_SECRET": EMAIL_SECRET,
        **extra,
    }
    return load_settings(env)


def app_of(
    h: Harness,
    s: Settings | None = None,
    *,
    mailer: Mailer | None = None,
    auth: AuthConfig | None = None,
    email: EmailConfig | None = None,
) -> App:
    """An App over the harness's runtime, with the SMTP client the composition root would build
    (or ``mailer``), the HTTP API face (its tokens checked with ``auth``, else as the settings
    say) and the email face (its webhook checked with ``email``, else as the settings say)."""
    s = s or settings()
    mailer = mailer or build_mailer(s)
    backend: Any = h.services.backend
    kit = FaceKit(settings=s, port=FacePort(h.runtime), backend=backend, clock=h.services.clock, mailer=mailer)
    api = api_wiring.build(kit, auth or AuthConfig.from_settings(s))
    mail = email_wiring.build(kit, email or EmailConfig.from_settings(s))
    return App(
        settings=s,
        db=h.db,
        runtime=h.runtime,
        backend=h.services.backend,  # type: ignore[arg-type]
        notifier=h.notifier,
        mailer=mailer,
        inbound={mail.name: mail.handle},
        faces=(api, mail),
        http_routes=(*api.routes(), *mail.routes()),
    )


@asynccontextmanager
async def client_for(
    h: Harness,
    s: Settings | None = None,
    *,
    mailer: Mailer | None = None,
    auth: AuthConfig | None = None,
    email: EmailConfig | None = None,
    **kw: Any,
) -> AsyncIterator[TestClient]:
    """An aiohttp test client against ``make_web_app`` over the harness's runtime."""
    web_app = make_web_app(app_of(h, s, mailer=mailer, auth=auth, email=email), **kw)
    async with TestClient(TestServer(web_app)) as client:
        yield client


def app_behind(client: TestClient) -> App:
    """The :class:`App` a :func:`client_for` client serves."""
    return client.server.app[APP]  # type: ignore[attr-defined]


async def drain(client: TestClient, *, rounds: int = 20) -> int:
    """Run the worker until no job is due (the faces' accepted messages, confirmations): what
    ``signoff serve`` does in the background after answering. Returns the jobs handled."""
    worker, done = app_behind(client).worker(), 0
    for _ in range(rounds):
        handled = await worker.run_once()
        if handled == 0:
            return done
        done += handled
    raise AssertionError("jobs still due after draining")


def token(sub: str, role: str, **kw: Any) -> str:
    return make_token(JWT_SECRET, sub=sub, role=role, **kw)


def bearer(sub: str, role: str, **kw: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(sub, role, **kw)}"}


C7_AUTH = {"sub": "C-7", "role": "customer"}
TABLES = (ConversationRow, MessageRow, AuditEventRow, ConfirmationRow, ApprovalRow, ProposalRow, ProcessedEventRow)


async def counts(db: Database) -> dict[str, int]:
    """Rows per runtime table: a rejected request must leave every number as it was."""
    out: dict[str, int] = {}
    async with db.sessions() as s:
        for table in TABLES:
            out[table.__tablename__] = int((await s.execute(select(func.count()).select_from(table))).scalar_one())
    return out
