"""Shared by the tests of the fake Shopify Admin API: a seeded fake, a tiny GraphQL client,
and the documents the tests send."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest

from sandbox.dataset import DEMO_DATASET_PATH, load_dataset_file
from tests.fakes.shopify.seed import seed_shop
from tests.fakes.shopify_api import FakeShopifyAPI

TOKEN = "shpat_test_static_token"
AS_OF = datetime(2025, 6, 2, 15, 0, tzinfo=UTC)


class Client:
    """A minimal GraphQL client for poking the fake (the product's client lives in shopify/)."""

    def __init__(self, api: FakeShopifyAPI, session: aiohttp.ClientSession, token: str = TOKEN) -> None:
        self.api, self.session, self.token = api, session, token

    async def post(
        self, query: str, variables: dict[str, Any] | None = None, *, version: str = "2026-10"
    ) -> tuple[int, Any]:
        url = f"{self.api.base_url}/admin/api/{version}/graphql.json"
        body = {"query": query, "variables": variables or {}}
        async with self.session.post(url, json=body, headers={"X-Shopify-Access-Token": self.token}) as r:
            return r.status, await r.json(content_type=None)

    async def gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        status, body = await self.post(query, variables)
        assert status == 200, body
        return body


@pytest.fixture
async def shopify() -> AsyncIterator[FakeShopifyAPI]:
    shop = seed_shop(load_dataset_file(DEMO_DATASET_PATH))
    # These tests send invalid operations on purpose (everyone else's fail on them).
    async with FakeShopifyAPI(shop, access_token=TOKEN, now=lambda: AS_OF, allow_invalid=True) as api:
        yield api


@pytest.fixture
async def client(shopify: FakeShopifyAPI) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as session:
        yield Client(shopify, session)


ORDER = """
query Order($id: ID!) {
  order(id: $id) {
    id name createdAt cancelledAt displayFinancialStatus displayFulfillmentStatus currencyCode
    customer { id }
    totalPriceSet { shopMoney { amount currencyCode } }
    lineItems(first: 10) { nodes { id sku quantity } }
    transactions(first: 10) { kind status amountSet { shopMoney { amount } } }
    fulfillments(first: 5) { displayStatus trackingInfo { company number url } }
  }
}
"""


REFUND = """
mutation Refund($input: RefundInput!, $key: String!) {
  refundCreate(input: $input) @idempotent(key: $key) {
    refund { id totalRefundedSet { shopMoney { amount currencyCode } } }
    order { id displayFinancialStatus }
    userErrors { field message }
  }
}
"""


def refund_input(order: int, amount: str) -> dict[str, Any]:
    return {
        "orderId": f"gid://shopify/Order/{order}",
        "transactions": [
            {
                "orderId": f"gid://shopify/Order/{order}",
                "amount": amount,
                "kind": "REFUND",
                "gateway": "shopify_payments",
            }
        ],
    }
