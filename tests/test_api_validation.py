"""Client mistakes are JSON 4xx with a stable code, never a 5xx, and change nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agent.llm.testing import ScriptedModel
from agent.runtime import Runtime
from bot.api.routes import MAX_BODY
from bot.email.bridge import MAX_EMAIL_BODY
from bot.server import make_web_app
from storage.conversations import ConversationRepo
from storage.db import Database, create_database
from tests.api_kit import app_of, bearer, client_for, counts
from tests.support import seeded

C7 = bearer("C-7", "customer")
SUP = bearer("S-3", "supervisor")
JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def client(db: Database) -> AsyncIterator[TestClient]:
    h = await seeded(db, ScriptedModel([]))  # any model call would fail the test
    async with client_for(h) as c:
        yield c


async def expect(
    client: TestClient, db: Database, method: str, path: str, status: int, code: str, **kw: Any
) -> dict[str, Any]:
    before = await counts(db)
    r = await client.request(method, path, **kw)
    body = await r.json()
    assert (r.status, body["error"]) == (status, code), body
    assert isinstance(body["message"], str) and body["message"]
    assert await counts(db) == before
    return body  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "data,status,code",
    [
        (b"{", 400, "bad_request"),
        (b"", 400, "bad_request"),
        (b"\xff\xfe{}", 400, "bad_request"),
        (b'{"message": NaN}', 400, "bad_request"),
        (b"[" * 100_00 + b"]" * 100_00, 400, "bad_request"),
        (b'"just a string"', 422, "invalid"),
        (b"[1, 2]", 422, "invalid"),
        (b"{}", 422, "invalid"),
        (b'{"message": 42}', 422, "invalid"),
        (b'{"message": ""}', 422, "invalid"),
        (b'{"message": "   \\n\\t "}', 422, "invalid"),
        (b'{"message": "hi", "role": "supervisor"}', 422, "invalid"),
        (b'{"message": "hi", "conversationId": 5}', 422, "invalid"),
        (b'{"message": "hi", "conversationId": "../../etc/passwd"}', 422, "invalid"),
        (b'{"message": "hi", "customerId": "C-7\\u0000"}', 422, "invalid"),
        (b'{"message": "' + b"x" * 4001 + b'"}', 422, "invalid"),
    ],
)
async def test_bad_chat_bodies(client: TestClient, db: Database, data: bytes, status: int, code: str) -> None:
    await expect(client, db, "POST", "/api/chat", status, code, data=data, headers={**C7, **JSON})


async def test_messages_name_the_field_without_echoing_it(client: TestClient, db: Database) -> None:
    body = await expect(client, db, "POST", "/api/chat", 422, "invalid", json={"message": "y" * 5000}, headers=C7)
    assert "message" in body["message"] and "yyyy" not in body["message"]
    body = await expect(
        client, db, "POST", "/api/chat", 422, "invalid", json={"message": "hi", "evil": 1, "worse": 2}, headers=C7
    )
    assert body["message"] == "unknown field: evil, worse"


async def test_wrong_content_type_is_415(client: TestClient, db: Database) -> None:
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        await expect(
            client,
            db,
            "POST",
            "/api/chat",
            415,
            "unsupported_media_type",
            data=b'{"message": "hi"}',
            headers={**C7, "Content-Type": ctype},
        )


async def test_huge_bodies_are_413(client: TestClient, db: Database) -> None:
    big = b'{"message": "' + b"x" * (MAX_BODY + 10) + b'"}'
    await expect(client, db, "POST", "/api/chat", 413, "too_large", data=big, headers={**C7, **JSON})

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the limit holds while reading
        yield b'{"message": "'
        for _ in range(40):
            yield b"x" * 4096
        yield b'"}'

    await expect(client, db, "POST", "/api/chat", 413, "too_large", data=chunks(), headers={**C7, **JSON})
    # Mail is read up to MAX_EMAIL_BODY (a 25 MB attachment is dropped, not refused): above it, 413.
    await expect(client, db, "POST", "/email/inbound", 413, "too_large", data=b"x" * (MAX_EMAIL_BODY + 1), headers=JSON)
    await expect(client, db, "POST", "/email/inbound", 401, "unauthorized", data=b"x" * (2 * 1024 * 1024), headers=JSON)


async def test_decision_bodies(client: TestClient, db: Database) -> None:
    path = "/api/approvals/apr_missing/approve"
    for body in (
        {},
        {"version": "1"},
        {"version": 0},
        {"version": 1.5},
        {"version": True},
        {"version": 2**40},
        {"version": 1, "comment": "x" * 2001},
        {"version": 1, "by": "S-3"},
    ):
        await expect(client, db, "POST", path, 422, "invalid", json=body, headers=SUP)
    await expect(client, db, "POST", path, 404, "not_found", json={"version": 1}, headers=SUP)
    await expect(client, db, "POST", path, 403, "forbidden", json={"version": 1}, headers=C7)
    await expect(
        client, db, "POST", "/api/approvals/apr_missing/reject", 422, "invalid", json={"version": 1}, headers=SUP
    )
    await expect(
        client, db, "POST", "/api/confirmations/cnf_missing/confirm", 422, "invalid", json={"accept": False}, headers=C7
    )
    await expect(client, db, "POST", "/api/confirmations/cnf_missing/confirm", 404, "not_found", headers=C7)


async def test_paths_and_queries(client: TestClient, db: Database) -> None:
    await expect(client, db, "GET", "/api/conversations/%00%01", 404, "not_found", headers=C7)
    await expect(client, db, "GET", "/api/conversations/" + "a" * 300, 404, "not_found", headers=C7)
    await expect(client, db, "GET", "/api/approvals?status=bogus", 422, "invalid", headers=SUP)
    await expect(client, db, "GET", "/api/approvals?limit=0", 422, "invalid", headers=SUP)
    await expect(client, db, "GET", "/api/approvals?limit=201", 422, "invalid", headers=SUP)
    await expect(client, db, "GET", "/api/approvals?status=pending&status=expired", 422, "invalid", headers=SUP)
    await expect(client, db, "GET", "/api/approvals?sort=desc", 422, "invalid", headers=SUP)
    await expect(client, db, "DELETE", "/api/chat", 405, "method_not_allowed", headers=C7)
    await expect(client, db, "GET", "/api/nothing-here", 404, "not_found")
    r = await client.get("/api/approvals?status=expired&limit=5", headers=SUP)
    assert r.status == 200 and (await r.json()) == {"approvals": []}


async def test_healthz_and_metrics(db: Database) -> None:
    h = await seeded(db, ScriptedModel([]))
    async with client_for(h, metrics_render=lambda: b"signoff_up 1\n") as c:
        r = await c.get("/healthz")
        assert (r.status, await r.json()) == (200, {"status": "ok"})
        r = await c.get("/metrics")
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert await r.text() == "signoff_up 1\n"
    async with client_for(h) as c:
        assert (await c.get("/metrics")).status == 404


async def test_healthz_reports_a_dead_database(db: Database) -> None:
    """503 JSON when the trivial query fails."""
    h = await seeded(db, ScriptedModel([]))
    dead = create_database("sqlite+aiosqlite:////nonexistent-dir/x.db")
    services = dataclasses.replace(h.services, db=dead, conversations=ConversationRepo(dead))
    app = dataclasses.replace(app_of(h), db=dead, runtime=Runtime(services))
    async with TestClient(TestServer(make_web_app(app))) as c:
        r = await c.get("/healthz")
        assert (r.status, (await r.json())["error"]) == (503, "unavailable")
    await dead.dispose()
