"""`signoff serve` with SIGNOFF_BACKEND=shopify against the fake Admin API (its own process):
it starts and answers a customer's order question over the API; the operator commands work."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from bot.api.auth import make_token
from tests.api_kit import JWT_SECRET
from tests.slack_kit import Serve, run_cli, until_healthy
from tests.test_api_serve import free_port

FAKE_SHOP = "fernway-outfitters.myshopify.com"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
async def fake_store() -> AsyncIterator[str]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.fakes.shopify_api", "--port", str(port), cwd=str(ROOT),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(400):
                try:
                    async with session.post(f"{url}/admin/oauth/access_token", data={}) as r:
                        if r.status:
                            break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        await proc.wait()


def _env(db: Path, admin_url: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SIGNOFF_", "ANTHROPIC_", "OPENAI_", "SLACK_"))}
    return {
        **base,
        "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{db}",
        "SIGNOFF_LLM_PROVIDER": "scripted",
        "SIGNOFF_JWT_SECRET": JWT_SECRET,
        "SIGNOFF_BACKEND": "shopify",
        "SIGNOFF_SHOPIFY_SHOP": FAKE_SHOP,
        "SIGNOFF_SHOPIFY_CLIENT_ID": "fake-client-id",
        "SIGNOFF_SHOPIFY_CLIENT_SECRET": "fake-client-secret",
        "SIGNOFF_SHOPIFY_ADMIN_URL": admin_url,
    }


async def test_serve_on_shopify_answers_a_customers_order_question(tmp_path: Path, fake_store: str) -> None:
    env = _env(tmp_path / "serve.db", fake_store)
    code, out = await run_cli(env, "db", "upgrade")
    assert code == 0, out
    code, out = await run_cli(env, "shopify", "check")
    assert code == 0 and "Fernway Outfitters" in out and "scopes missing: none" in out, out
    server = Serve(env)
    await server.start()
    try:
        assert await until_healthy(server.url)
        token = make_token(JWT_SECRET, sub="gid://shopify/Customer/7", role="customer")
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"{server.url}/api/chat", json={"message": "Where is my order #1042?"}, headers=headers
            ) as r:
                body = await r.json()
            assert r.status == 200, body
            assert "#1042" in body["reply"] and "delivered" in body["reply"].lower(), body
            async with session.post(
                f"{server.url}/api/chat", json={"message": "Where is my order #1001?"}, headers=headers
            ) as r:
                other = await r.json()
            assert "can't find" in other["reply"].lower() or "not" in other["reply"].lower(), other
    finally:
        await server.stop()


async def test_knowledge_sync_imports_the_shops_policies_and_pages(tmp_path: Path, fake_store: str) -> None:
    """`signoff knowledge sync` reads the shop's legal policies and published pages into signoff's
    own knowledge through the one importer; a second sync with nothing changed is a no-op."""
    env = _env(tmp_path / "sync.db", fake_store)
    code, out = await run_cli(env, "db", "upgrade")
    assert code == 0, out
    code, out = await run_cli(env, "knowledge", "sync")
    assert code == 0, out
    assert "refund-policy  v1  created" in out and "shipping-policy  v1  created" in out, out
    code, again = await run_cli(env, "knowledge", "sync")
    assert code == 0 and " 0 new or changed" in again, again
    code, listed = await run_cli(env, "knowledge", "list")
    assert code == 0 and "refund-policy  v1  policy" in listed and "page-" in listed, listed


async def test_knowledge_sync_with_a_shop_that_refuses_says_so(tmp_path: Path, fake_store: str) -> None:
    """Wrong credentials: one line naming the failure, exit 1, nothing imported."""
    env = {**_env(tmp_path / "bad.db", fake_store), "SIGNOFF_SHOPIFY_CLIENT_SECRET": "wrong"}
    code, out = await run_cli(env, "db", "upgrade")
    assert code == 0, out
    code, out = await run_cli(env, "knowledge", "sync")
    assert code == 1 and out.startswith("signoff: knowledge sync:") and "Traceback" not in out, out
    code, listed = await run_cli(env, "knowledge", "list")
    assert code == 0 and "refund-policy" not in listed, listed
