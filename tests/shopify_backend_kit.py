"""The fake Shopify store seeded from the demo dataset (rebased to now) and a ShopifyBackend on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from pydantic import SecretStr

from bot.app import shopify_backend
from sandbox.dataset import DEMO_DATASET_PATH, load_dataset_file
from shopify.config import ShopifyConfig
from shopify.writes import ShopifyBackend
from tests.fakes.shopify.cost import Bucket
from tests.fakes.shopify.seed import seed_shop
from tests.fakes.shopify_api import FakeShopifyAPI

CLIENT_ID, CLIENT_SECRET = "fake-client-id", "fake-client-secret"
C7 = "gid://shopify/Customer/7"


def config(base_url: str, **extra: object) -> ShopifyConfig:
    """Client credentials against the fake at ``base_url``."""
    return ShopifyConfig(
        shop="signoff-test.myshopify.com",
        admin_url=base_url,
        client_id=CLIENT_ID,
        client_secret=SecretStr(CLIENT_SECRET),
        webhook_secret=SecretStr(CLIENT_SECRET),
        **extra,  # type: ignore[arg-type]
    )


@asynccontextmanager
async def fake_shop(
    *, now: datetime | None = None, bucket: Bucket | None = None
) -> AsyncIterator[tuple[FakeShopifyAPI, ShopifyBackend]]:
    """The demo shop on the fake Admin API, and a backend reaching it with client credentials."""
    at = now or datetime.now(UTC)
    shop = seed_shop(load_dataset_file(DEMO_DATASET_PATH), rebase_to=at)
    async with FakeShopifyAPI(shop, client_id=CLIENT_ID, client_secret=CLIENT_SECRET, bucket=bucket) as api:
        backend = shopify_backend(config(api.base_url))
        try:
            yield api, backend
        finally:
            await backend.client.close()
            assert api.invalid_operations == [], [(o.name, o.errors) for o in api.invalid_operations]
