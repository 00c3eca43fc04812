"""A confirmed action is never lost: SIGKILL of a real ``signoff serve`` in the confirm path.

Each sample starts ``signoff serve`` (the console script, SQLite file, the real Anthropic
SDK client pointed at the strict local fake), opens a refund the customer must confirm,
writes the confirm request on a raw socket and SIGKILLs the server a chosen number of
milliseconds later — densely from 0 to 100 ms, so the kill lands before, inside and after
the confirmation's transaction, the refund, the ledger and the agent's answer. A second
server then starts on the same file and the customer confirms again. Every time: that
confirm answers 200 with the refund, exactly one refund exists, the conversation holds the
runtime's "confirmed" event exactly once with the agent's answer after it, and the audit
chain verifies.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from bot.api.auth import make_token
from tests.fakes.anthropic_api import FakeAnthropicAPI, refund_script, text_turn, tool_turn, tool_uses
from tests.slack_kit import Serve as Server
from tests.slack_kit import run_cli as _run
from tests.support import scrubbed_env

SIGNOFF = Path(sys.executable).with_name("signoff")
DEMO = Path(__file__).resolve().parents[1] / "sandbox" / "data" / "demo.json"
SECRET = "crash-test-secret-" + "x" * 32
REFUND = {
    "order_id": "O-1042",
    "amount_minor": 2000,
    "currency": "USD",
    "reason_code": "damaged",
    "evidence": ["refund-policy@7#window"],
}
#: Milliseconds between writing the confirm request and the SIGKILL.
DELAYS_MS = [0, 3, 6, 9, 12, 15, 18, 21, 25, 30, 35, 40, 50, 60, 70, 85, 100]
SCRIPT = refund_script(REFUND)

pytestmark = pytest.mark.skipif(not SIGNOFF.exists(), reason="the signoff console script is not installed")


def planner(body: dict[str, Any]) -> dict[str, Any]:
    """Stateless, so it answers the same after a restart: the next call of the script, then text."""
    uses = tool_uses(body["messages"])
    if uses < len(SCRIPT):
        return tool_turn(*SCRIPT[uses])
    return text_turn(
        "It needs your confirmation." if uses == len(SCRIPT) and not _confirmed(body) else "Your refund is done."
    )


def _confirmed(body: dict[str, Any]) -> bool:
    return "confirmed" in json.dumps(body["messages"][-1])


def _env(db: Path, api: FakeAnthropicAPI) -> dict[str, str]:
    env = scrubbed_env()
    return {
        **env,
        "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{db}",
        "SIGNOFF_LLM_PROVIDER": "anthropic",
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": api.base_url,
        "SIGNOFF_JWT_SECRET": SECRET,
    }


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {make_token(SECRET, sub='C-7', role='customer')}"}


async def _post(url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body or {}, headers=_auth()) as r:
        return r.status, await r.json()


async def _write_and_kill(server: Server, path: str, delay_ms: int) -> None:
    """Write the whole request on a raw socket, wait ``delay_ms``, SIGKILL the server."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    auth = _auth()["Authorization"]
    writer.write(
        (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {auth}\r\n"
            "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        ).encode()
    )
    await writer.drain()
    await asyncio.sleep(delay_ms / 1000)
    await server.kill()
    writer.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def template(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Path, FakeAnthropicAPI]]:
    """A migrated SQLite file with the demo store loaded, and the fake model API."""
    base = Path(tmp_path_factory.mktemp("crash-serve"))
    async with FakeAnthropicAPI(planner) as api:
        db = base / "template.db"
        env = _env(db, api)
        assert (await _run(env, "db", "upgrade"))[0] == 0
        assert (await _run(env, "store", "load", str(DEMO), "--rebase-to-now"))[0] == 0
        yield db, api


async def _sample(template: tuple[Path, FakeAnthropicAPI], tmp: Path, delay_ms: int) -> dict[str, Any]:
    src, api = template
    db = tmp / f"kill-{delay_ms}.db"
    shutil.copy(src, db)
    env = _env(db, api)
    before = _refunds(db)
    first = Server(env)
    await first.start()
    status, chat = await _post(
        f"{first.url}/api/chat", {"conversationId": None, "message": "Refund 20.00 on O-1042, it arrived damaged."}
    )
    assert status == 200 and [p["kind"] for p in chat["pending"]] == ["confirmation"], chat
    conf_id, conv_id = chat["pending"][0]["id"], chat["conversationId"]
    await _write_and_kill(first, f"/api/confirmations/{conf_id}/confirm", delay_ms)
    second = Server(env)
    await second.start()
    try:
        status, again = await _post(f"{second.url}/api/confirmations/{conf_id}/confirm")
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{second.url}/api/conversations/{conv_id}", headers=_auth()) as r,
        ):
            view = await r.json()
    finally:
        await second.stop()
    code, verified = await _run(env, "audit", "verify")
    return {"status": status, "again": again, "refunds": _refunds(db) - before, "view": view, "audit": (code, verified)}


def _refunds(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(
            conn.execute("SELECT count(*) FROM store_refunds WHERE order_id = 'O-1042' AND kind = 'refund'").fetchone()[
                0
            ]
        )


@pytest.mark.asyncio(loop_scope="module")
async def test_sigkill_anywhere_in_the_confirm_path_loses_nothing_and_refunds_once(
    template: tuple[Path, FakeAnthropicAPI], tmp_path: Path
) -> None:
    """For every kill delay: the repeated confirm answers 200 with the one refund, the store holds
    exactly one new refund, the history tells the model once what happened (and the agent
    answered after it), and the audit chain verifies."""
    results: dict[int, dict[str, Any]] = {}
    for batch in range(0, len(DELAYS_MS), 3):  # three servers at a time on two cores
        delays = DELAYS_MS[batch : batch + 3]
        done = await asyncio.gather(*(_sample(template, tmp_path, d) for d in delays))
        results.update(zip(delays, done, strict=True))
    for delay, r in results.items():
        assert r["status"] == 200, (delay, r["again"])
        result = r["again"]["result"]
        assert result and str(result.get("refund_id", "")).startswith("R-"), (delay, r["again"])
        assert not result.get("replayed"), (delay, result)
        assert r["again"]["confirmation"]["status"] == "consumed", delay
        assert r["refunds"] == 1, (delay, r["refunds"])
        events = [m for m in r["view"]["messages"] if m["role"] == "event" and "confirmed" in m["text"]]
        assert len(events) == 1 and "executed" in events[0]["text"], (delay, events)
        after = [m for m in r["view"]["messages"] if m["seq"] > events[0]["seq"] and m["role"] == "assistant"]
        assert after, (delay, "the agent never answered after the confirmation")
        assert r["audit"][0] == 0, (delay, r["audit"][1])
