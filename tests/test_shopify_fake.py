"""The fake Shopify Admin API (tests/fakes/shopify_api.py) answers as the service does:
schema validation, auth, cost throttling, idempotency, jobs, seeding and webhooks."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from sandbox.dataset import DEMO_DATASET_PATH, load_dataset_file
from tests.fakes.shopify.cost import Bucket
from tests.fakes.shopify.seed import seed_shop
from tests.fakes.shopify_api import INVALID_TOKEN, FakeShopifyAPI, Fault

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


async def test_a_valid_query_answers_from_the_seeded_shop(client: Client) -> None:
    """O-1042 reads back as #1042: C-7's, delivered, paid 189.0 USD, with tracking."""
    body = await client.gql(ORDER, {"id": "gid://shopify/Order/1042"})
    order = body["data"]["order"]
    assert order["name"] == "#1042"
    assert order["customer"] == {"id": "gid://shopify/Customer/7"}
    assert order["displayFinancialStatus"] == "PAID"
    assert order["displayFulfillmentStatus"] == "FULFILLED"
    assert order["totalPriceSet"]["shopMoney"] == {"amount": "189.0", "currencyCode": "USD"}
    assert order["transactions"] == [
        {"kind": "SALE", "status": "SUCCESS", "amountSet": {"shopMoney": {"amount": "189.0"}}}
    ]
    assert order["fulfillments"][0]["displayStatus"] == "DELIVERED"
    assert order["fulfillments"][0]["trackingInfo"][0]["number"]
    cost = body["extensions"]["cost"]
    assert cost["requestedQueryCost"] > 0
    assert cost["throttleStatus"]["maximumAvailable"] == 2000.0


async def test_an_unknown_field_is_rejected_and_recorded_as_invalid(client: Client, shopify: FakeShopifyAPI) -> None:
    """A field the schema lacks answers 200 with errors (as Shopify does) and no data."""
    body = await client.gql('query Bad { order(id: "gid://shopify/Order/1042") { id status } }')
    assert "data" not in body
    assert "Cannot query field 'status' on type 'Order'" in body["errors"][0]["message"]
    assert [op.name for op in shopify.invalid_operations] == ["Bad"]


async def test_an_unknown_argument_and_a_wrong_variable_type_are_rejected(
    client: Client, shopify: FakeShopifyAPI
) -> None:
    """Arguments and variables are checked against the schema's types before anything runs."""
    bad_arg = await client.gql('{ order(id: "gid://shopify/Order/1042", name: "#1042") { id } }')
    assert "Unknown argument 'name'" in bad_arg["errors"][0]["message"]
    bad_var = await client.gql("query Q($first: Int!) { orders(first: $first) { nodes { id } } }", {"first": "ten"})
    assert "Variable '$first' has invalid value" in bad_var["errors"][0]["message"]
    wrong_type = await client.gql("query Q($id: String!) { order(id: $id) { id } }", {"id": "x"})
    assert "type 'String!' used in position expecting type 'ID!'" in wrong_type["errors"][0]["message"]
    assert len(shopify.invalid_operations) == 3
    assert all(op.errors for op in shopify.invalid_operations)


async def test_a_valid_field_the_fake_does_not_answer_says_so(client: Client) -> None:
    """Nobody is misled by a silent null: unimplemented parts of the schema are named."""
    body = await client.gql('{ order(id: "gid://shopify/Order/1042") { id riskLevel } }')
    assert "Order.riskLevel is not implemented by the fake" in body["errors"][0]["message"]
    body = await client.gql(
        'mutation { tagsAdd(id: "gid://shopify/Order/1042", tags: ["x"]) { userErrors { message } } }'
    )
    assert "The mutation tagsAdd is not implemented by the fake" in body["errors"][0]["message"]


async def test_requests_without_a_valid_token_or_on_another_version_are_refused(client: Client) -> None:
    """401 with Shopify's wording for a missing or wrong token; 404 for another API version."""
    client.token = "shpat_wrong"
    assert await client.post("{ shop { name } }") == (401, {"errors": INVALID_TOKEN})
    client.token = ""
    assert await client.post("{ shop { name } }") == (401, {"errors": INVALID_TOKEN})
    client.token = TOKEN
    status, _ = await client.post("{ shop { name } }", version="2025-01")
    assert status == 404


async def test_client_credentials_issue_a_token_that_works_until_it_expires(
    client: Client, shopify: FakeShopifyAPI
) -> None:
    """The grant answers access_token/scope/expires_in; wrong secrets are refused; expiry is enforced."""
    url = f"{shopify.base_url}/admin/oauth/access_token"
    form = {"grant_type": "client_credentials", "client_id": "fake-client-id", "client_secret": "fake-client-secret"}
    async with client.session.post(url, data=form) as r:
        assert r.status == 200
        grant = await r.json()
    assert grant["expires_in"] == 86399 and "write_orders" in grant["scope"].split(",")
    client.token = grant["access_token"]
    assert (await client.gql("{ shop { name } }"))["data"]["shop"]["name"] == "Fernway Outfitters"
    async with client.session.post(url, json={**form, "client_secret": "nope"}) as r:
        assert r.status == 401
    async with client.session.post(url, json={**form, "grant_type": "password"}) as r:
        assert r.status == 400
    assert shopify.token_requests == 3
    shopify.expire_tokens()
    assert (await client.post("{ shop { name } }"))[0] == 401


async def test_a_query_costing_more_than_the_bucket_holds_is_throttled(shopify: FakeShopifyAPI, client: Client) -> None:
    """THROTTLED with the bucket's status, nothing executed; it passes once the bucket refills."""
    now = [0.0]
    shopify.bucket = Bucket(maximum=50, restore_rate=10, clock=lambda: now[0])
    query = "{ orders(first: 20) { nodes { id name } } }"
    first = await client.gql(query)
    assert first["extensions"]["cost"]["requestedQueryCost"] == 22
    await client.gql(query)
    throttled = await client.gql(query)
    assert throttled["errors"] == [{"message": "Throttled", "extensions": {"code": "THROTTLED"}}]
    assert "data" not in throttled
    assert throttled["extensions"]["cost"]["throttleStatus"] == {
        "maximumAvailable": 50,
        "currentlyAvailable": 6,
        "restoreRate": 10,
    }
    now[0] += 2.0
    assert "data" in await client.gql(query)


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


async def test_refund_create_with_the_same_key_and_input_makes_one_refund(
    client: Client, shopify: FakeShopifyAPI
) -> None:
    """A retried refundCreate returns the first refund; the order holds exactly one new refund."""
    first = await client.gql(REFUND, {"input": refund_input(1042, "50.00"), "key": "op-1"})
    again = await client.gql(REFUND, {"input": refund_input(1042, "50.00"), "key": "op-1"})
    made = first["data"]["refundCreate"]
    assert made["userErrors"] == []
    assert made["refund"]["totalRefundedSet"]["shopMoney"] == {"amount": "50.0", "currencyCode": "USD"}
    assert made["order"]["displayFinancialStatus"] == "PARTIALLY_REFUNDED"
    assert again["data"]["refundCreate"]["refund"]["id"] == made["refund"]["id"]
    assert len(shopify.shop.orders[1042].refunds) == 1


async def test_refund_create_key_reused_with_other_input_is_an_error(client: Client, shopify: FakeShopifyAPI) -> None:
    """Same key, different parameters: an error, and no second refund."""
    await client.gql(REFUND, {"input": refund_input(1042, "50.00"), "key": "op-1"})
    body = await client.gql(REFUND, {"input": refund_input(1042, "60.00"), "key": "op-1"})
    assert body["data"]["refundCreate"] is None
    assert body["errors"][0]["extensions"]["code"] == "IDEMPOTENCY_KEY_PARAMETER_MISMATCH"
    assert len(shopify.shop.orders[1042].refunds) == 1


async def test_refund_create_without_a_key_or_with_a_blank_one_is_refused(
    client: Client, shopify: FakeShopifyAPI
) -> None:
    """Since 2026-04 refundCreate requires @idempotent; an empty key is refused too."""
    bare = REFUND.replace(" @idempotent(key: $key)", "").replace(", $key: String!", "")
    body = await client.gql(bare, {"input": refund_input(1042, "10.00")})
    assert body["errors"][0]["extensions"]["code"] == "IDEMPOTENCY_KEY_REQUIRED"
    body = await client.gql(REFUND, {"input": refund_input(1042, "10.00"), "key": "  "})
    assert body["errors"][0]["extensions"]["code"] == "INVALID_IDEMPOTENCY_KEY"
    assert shopify.shop.orders[1042].refunds == []


async def test_idempotent_on_a_mutation_without_documented_support_is_an_error(
    client: Client, shopify: FakeShopifyAPI
) -> None:
    """orderCancel does not document @idempotent: carrying it is an error and nothing is cancelled."""
    body = await client.gql(
        'mutation { orderCancel(orderId: "gid://shopify/Order/1044", reason: CUSTOMER, restock: true)'
        ' @idempotent(key: "k") { job { id } orderCancelUserErrors { message } } }'
    )
    assert body["errors"][0]["extensions"]["code"] == "IDEMPOTENCY_NOT_SUPPORTED"
    assert shopify.shop.orders[1044].cancelled_at is None


async def test_a_refund_over_the_refundable_amount_is_a_user_error(client: Client, shopify: FakeShopifyAPI) -> None:
    """O-1042 took 189.00: 189.01 is refused with userErrors and changes nothing."""
    body = await client.gql(REFUND, {"input": refund_input(1042, "189.01"), "key": "op-2"})
    result = body["data"]["refundCreate"]
    assert result["refund"] is None
    assert result["userErrors"][0]["field"] == ["transactions"]
    assert "greater than the refundable amount 189.0 USD" in result["userErrors"][0]["message"]
    assert shopify.shop.orders[1042].refunds == []


CANCEL = """
mutation Cancel($id: ID!) {
  orderCancel(orderId: $id, reason: CUSTOMER, restock: true, refund: true) {
    job { id done }
    orderCancelUserErrors { field message code }
    userErrors { field message }
  }
}
"""
JOB = "query Job($id: ID!) { job(id: $id) { id done } }"


async def test_order_cancel_returns_a_job_that_completes_after_polling(client: Client, shopify: FakeShopifyAPI) -> None:
    """O-1044 (paid, unfulfilled) cancels: a job, not done, then done on the second poll; refunded."""
    body = await client.gql(CANCEL, {"id": "gid://shopify/Order/1044"})
    job = body["data"]["orderCancel"]["job"]
    assert job["done"] is False and job["id"].startswith("gid://shopify/Job/")
    polls = [(await client.gql(JOB, {"id": job["id"]}))["data"]["job"]["done"] for _ in range(2)]
    assert polls == [False, True]
    order = (await client.gql(ORDER, {"id": "gid://shopify/Order/1044"}))["data"]["order"]
    assert order["cancelledAt"] == "2025-06-02T15:00:00Z"
    assert order["displayFinancialStatus"] == "REFUNDED"


async def test_cancelling_a_cancelled_or_fulfilled_order_is_a_user_error(client: Client) -> None:
    """O-1086 is already cancelled, O-1045 has shipped: orderCancelUserErrors, no job."""
    for order_id, message in ((1086, "already been cancelled"), (1045, "has fulfillments")):
        body = await client.gql(CANCEL, {"id": f"gid://shopify/Order/{order_id}"})
        result = body["data"]["orderCancel"]
        assert result["job"] is None
        assert message in result["orderCancelUserErrors"][0]["message"]


async def test_customers_and_orders_are_found_by_search_query(client: Client) -> None:
    """customers(query: "email:…") and orders(query: "name:#1042" / "customer_id:7")."""
    body = await client.gql(
        """{ customers(first: 2, query: "email:maya.chen@example.com") { nodes { id firstName lastName } }
             byName: orders(first: 2, query: "name:#1042") { nodes { id } }
             mine: orders(first: 50, query: "customer_id:7") { nodes { name } } }"""
    )
    data = body["data"]
    assert data["customers"]["nodes"] == [{"id": "gid://shopify/Customer/7", "firstName": "Maya", "lastName": "Chen"}]
    assert data["byName"]["nodes"] == [{"id": "gid://shopify/Order/1042"}]
    assert {"#1042", "#1043", "#1044", "#1045"} <= {n["name"] for n in data["mine"]["nodes"]}


async def test_a_502_after_applying_leaves_the_refund_made(client: Client, shopify: FakeShopifyAPI) -> None:
    """The ambiguous failure: the client sees 502, the shop has the refund; a retry with the key finds it."""
    fault = shopify.inject(Fault(match="refundCreate", status=502, after_apply=True))
    status, _ = await client.post(REFUND, {"input": refund_input(1042, "20.00"), "key": "op-3"})
    assert status == 502 and fault.arrived.is_set()
    assert len(shopify.shop.orders[1042].refunds) == 1
    retry = await client.gql(REFUND, {"input": refund_input(1042, "20.00"), "key": "op-3"})
    assert retry["data"]["refundCreate"]["userErrors"] == []
    assert len(shopify.shop.orders[1042].refunds) == 1


async def test_a_5xx_before_applying_changes_nothing(client: Client, shopify: FakeShopifyAPI) -> None:
    """A 503 before the shop acts: no refund; the next attempt goes through."""
    shopify.inject(Fault(match="refundCreate", status=503))
    status, _ = await client.post(REFUND, {"input": refund_input(1042, "20.00"), "key": "op-4"})
    assert status == 503 and shopify.shop.orders[1042].refunds == []
    assert (await client.gql(REFUND, {"input": refund_input(1042, "20.00"), "key": "op-4"}))["data"]["refundCreate"][
        "refund"
    ]


ADDRESS = {"address1": "1 New St", "city": "Portland", "provinceCode": "OR", "zip": "97201", "countryCode": "US"}
ORDER_UPDATE = """
mutation Update($input: OrderInput!) {
  orderUpdate(input: $input) {
    order {
      id shippingAddress { address1 city countryCodeV2 }
      metafield(namespace: "signoff", key: "operations") { value }
    }
    userErrors { field message }
  }
}
"""


async def test_order_update_changes_the_address_and_metafield_together_while_unfulfilled(client: Client) -> None:
    """O-1044 is unfulfilled: the address and the signoff.operations metafield land in one mutation."""
    metafield = {"namespace": "signoff", "key": "operations", "type": "json", "value": '["op-9"]'}
    body = await client.gql(
        ORDER_UPDATE,
        {"input": {"id": "gid://shopify/Order/1044", "shippingAddress": ADDRESS, "metafields": [metafield]}},
    )
    order = body["data"]["orderUpdate"]["order"]
    assert order["shippingAddress"] == {"address1": "1 New St", "city": "Portland", "countryCodeV2": "US"}
    assert order["metafield"] == {"value": '["op-9"]'}


async def test_order_update_refuses_the_address_of_a_fulfilled_order_and_changes_nothing(
    client: Client, shopify: FakeShopifyAPI
) -> None:
    """O-1045 has shipped: userErrors, and its metafield is not written either (all or nothing)."""
    metafield = {"namespace": "signoff", "key": "operations", "type": "json", "value": '["op-9"]'}
    before = shopify.shop.orders[1045].shipping_address
    body = await client.gql(
        ORDER_UPDATE,
        {"input": {"id": "gid://shopify/Order/1045", "shippingAddress": ADDRESS, "metafields": [metafield]}},
    )
    result = body["data"]["orderUpdate"]
    assert result["order"] is None and result["userErrors"][0]["field"] == ["shippingAddress"]
    assert shopify.shop.orders[1045].shipping_address == before
    assert shopify.shop.orders[1045].metafields == {}


async def test_customer_update_validates_email_and_phone(client: Client, shopify: FakeShopifyAPI) -> None:
    """A taken or malformed email is a userError; a good one is saved."""
    mutation = """mutation U($input: CustomerInput!) { customerUpdate(input: $input) {
        customer { id defaultEmailAddress { emailAddress } } userErrors { field message } } }"""
    taken = await client.gql(mutation, {"input": {"id": "gid://shopify/Customer/7", "email": "jonas.weber@example.de"}})
    bad = await client.gql(mutation, {"input": {"id": "gid://shopify/Customer/7", "phone": "call me"}})
    good = await client.gql(mutation, {"input": {"id": "gid://shopify/Customer/7", "email": "maya@new.example"}})
    assert taken["data"]["customerUpdate"]["userErrors"] == [
        {"field": ["email"], "message": "Email has already been taken"}
    ]
    assert bad["data"]["customerUpdate"]["userErrors"] == [{"field": ["phone"], "message": "Phone is invalid"}]
    assert good["data"]["customerUpdate"]["customer"]["defaultEmailAddress"] == {"emailAddress": "maya@new.example"}
    assert shopify.shop.customers[7].email == "maya@new.example"


async def test_return_request_on_fulfilled_lines_and_refused_on_unfulfilled(client: Client) -> None:
    """O-1042 (delivered) can be returned once per unit; O-1044 (unfulfilled) cannot."""
    mutation = """mutation R($input: ReturnRequestInput!) { returnRequest(input: $input) {
        return { id status name returnLineItems(first: 5) { nodes { ... on ReturnLineItem { quantity } } } }
        userErrors { field message code } } }"""
    line = {"fulfillmentLineItemId": "gid://shopify/FulfillmentLineItem/104201", "quantity": 1}
    made = await client.gql(mutation, {"input": {"orderId": "gid://shopify/Order/1042", "returnLineItems": [line]}})
    ret = made["data"]["returnRequest"]["return"]
    assert ret["status"] == "REQUESTED" and ret["returnLineItems"]["nodes"] == [{"quantity": 1}]
    again = await client.gql(mutation, {"input": {"orderId": "gid://shopify/Order/1042", "returnLineItems": [line]}})
    assert again["data"]["returnRequest"]["userErrors"][0]["code"] == "INVALID"
    line44 = {"fulfillmentLineItemId": "gid://shopify/FulfillmentLineItem/104401", "quantity": 1}
    refused = await client.gql(
        mutation, {"input": {"orderId": "gid://shopify/Order/1044", "returnLineItems": [line44]}}
    )
    assert refused["data"]["returnRequest"]["userErrors"][0]["code"] == "INVALID_STATE"


async def test_metafields_set_is_all_or_nothing(client: Client, shopify: FakeShopifyAPI) -> None:
    """One bad entry (invalid JSON) refuses the whole set."""
    mutation = """mutation M($m: [MetafieldsSetInput!]!) { metafieldsSet(metafields: $m) {
        metafields { key value } userErrors { field message code elementIndex } } }"""
    good = {
        "ownerId": "gid://shopify/Order/1042",
        "namespace": "signoff",
        "key": "operations",
        "type": "json",
        "value": "[]",
    }
    bad = {**good, "ownerId": "gid://shopify/Customer/7", "value": "{not json"}
    refused = await client.gql(mutation, {"m": [good, bad]})
    assert refused["data"]["metafieldsSet"]["userErrors"][0]["elementIndex"] == 1
    assert shopify.shop.orders[1042].metafields == {}
    done = await client.gql(mutation, {"m": [good]})
    assert done["data"]["metafieldsSet"]["metafields"] == [{"key": "operations", "value": "[]"}]


async def test_webhook_subscriptions_are_created_once_and_listed(client: Client) -> None:
    """webhookSubscriptionCreate then webhookSubscriptions; the same topic and address twice is refused."""
    mutation = """mutation W($uri: String!) { webhookSubscriptionCreate(topic: REFUNDS_CREATE,
        webhookSubscription: {uri: $uri}) { webhookSubscription { id topic uri } userErrors { message } } }"""
    uri = "https://signoff.example/shopify/webhooks"
    made = await client.gql(mutation, {"uri": uri})
    assert made["data"]["webhookSubscriptionCreate"]["webhookSubscription"]["topic"] == "REFUNDS_CREATE"
    dup = await client.gql(mutation, {"uri": uri})
    assert "already been taken" in dup["data"]["webhookSubscriptionCreate"]["userErrors"][0]["message"]
    listed = await client.gql("{ webhookSubscriptions(first: 10) { nodes { topic uri } } }")
    assert listed["data"]["webhookSubscriptions"]["nodes"] == [{"topic": "REFUNDS_CREATE", "uri": uri}]


async def test_the_seed_maps_the_dataset_as_documented(shopify: FakeShopifyAPI) -> None:
    """C-7 → Customer/7, O-1042 → #1042, P-1060-2 → OrderTransaction/10602, R-3001 → Refund/3001,
    RT-2001 → Return/2001 (rejected → DECLINED), O-1086 cancelled, knowledge → policies and pages."""
    shop = shopify.shop
    assert (shop.customers[7].first_name, shop.customers[7].last_name) == ("Maya", "Chen")
    assert shop.orders[1042].name == "#1042" and shop.orders[1042].customer_id == 7
    assert [t.id for t in shop.orders[1060].transactions if t.kind == "SALE"] == [10601, 10602]
    assert shop.orders[1060].refundable_minor == 22600
    r3001 = shop.refund(3001)
    assert r3001 is not None and r3001[0].id == 1066 and r3001[1].return_id == 2003
    assert shop.return_(2001) is not None and shop.return_(2001)[1].status == "DECLINED"  # type: ignore[index]
    assert shop.orders[1086].cancelled_at is not None and shop.orders[1086].financial_status() == "VOIDED"
    assert shop.orders[1045].fulfillments[0].display_status == "IN_TRANSIT"
    assert {p.type for p in shop.policies} == {"REFUND_POLICY", "SHIPPING_POLICY", "PRIVACY_POLICY"}
    assert "returns-policy" in {p.handle for p in shop.pages.values()}


async def test_policies_and_pages_read_back_with_their_sections(client: Client) -> None:
    """shop.shopPolicies and pages carry the knowledge text, one <section id> per section."""
    body = await client.gql(
        "{ shop { shopPolicies { type title body } } pages(first: 50) { nodes { handle title body } } }"
    )
    refund = next(p for p in body["data"]["shop"]["shopPolicies"] if p["type"] == "REFUND_POLICY")
    assert refund["title"] == "Refund policy" and '<section id="window" data-version="7">' in refund["body"]
    assert any(p["handle"] == "order-tracking" for p in body["data"]["pages"]["nodes"])


async def test_a_staff_refund_in_the_admin_emits_a_verifiable_signed_webhook(shopify: FakeShopifyAPI) -> None:
    """refunds/create: the HMAC verifies on the raw body with the app secret and the payload is REST-shaped."""
    hook = shopify.staff_refund(1042, 5000, note="goodwill")
    headers = hook.headers("fake-client-secret")
    expected = base64.b64encode(hmac.new(b"fake-client-secret", hook.body, hashlib.sha256).digest()).decode()
    assert headers["X-Shopify-Hmac-Sha256"] == expected
    assert headers["X-Shopify-Topic"] == "refunds/create"
    assert headers["X-Shopify-Shop-Domain"] == "fernway-outfitters.myshopify.com"
    assert headers["X-Shopify-API-Version"] == "2026-10"
    payload = hook.payload
    assert payload["order_id"] == 1042 and payload["admin_graphql_api_id"].startswith("gid://shopify/Refund/")
    assert payload["transactions"][0]["amount"] == "50.0" and payload["user_id"] is not None
    assert shopify.shop.orders[1042].refunded_minor == 5000


async def test_admin_webhooks_are_delivered_to_a_url(shopify: FakeShopifyAPI) -> None:
    """send_webhook POSTs the raw body with its headers; cancel and return actions emit their topics."""
    received: list[tuple[dict[str, str], bytes]] = []

    async def receive(request: web.Request) -> web.Response:
        received.append((dict(request.headers), await request.read()))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hooks", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/hooks"
    try:
        cancel = shopify.staff_cancel(1044)
        ret = shopify.staff_return(1042)
        assert await shopify.send_webhook(url, cancel) == 200
        assert await shopify.send_webhook(url, ret) == 200
    finally:
        await runner.cleanup()
    assert [h["X-Shopify-Topic"] for h, _ in received] == ["orders/cancelled", "returns/request"]
    assert json.loads(received[0][1])["cancelled_at"] is not None
    assert json.loads(received[1][1])["status"] == "requested"
    assert received[0][0]["X-Shopify-Hmac-Sha256"] == cancel.headers("fake-client-secret")["X-Shopify-Hmac-Sha256"]


async def test_the_fake_runs_as_its_own_process_and_prints_its_url() -> None:
    """python -m tests.fakes.shopify_api --port 0 prints a URL that answers the token grant; SIGTERM stops it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.fakes.shopify_api", "--port", "0", stdout=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        url = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip()
        assert url.startswith("http://127.0.0.1:")
        form = {
            "grant_type": "client_credentials",
            "client_id": "fake-client-id",
            "client_secret": "fake-client-secret",
        }
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{url}/admin/oauth/access_token", data=form) as r:
                assert r.status == 200 and (await r.json())["expires_in"] == 86399
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 30) == 0


async def test_suggested_refund_spreads_a_full_refund_over_both_charges(client: Client) -> None:
    """O-1060 was charged twice (113.0 each): the full suggestion is 226.0 over two parent sales."""
    body = await client.gql(
        """{ order(id: "gid://shopify/Order/1060") { suggestedRefund(suggestFullRefund: true) {
             amountSet { shopMoney { amount } } maximumRefundableSet { shopMoney { amount } }
             suggestedTransactions { kind amountSet { shopMoney { amount } } parentTransaction { id } } } } }"""
    )
    suggestion = body["data"]["order"]["suggestedRefund"]
    assert suggestion["amountSet"]["shopMoney"]["amount"] == "226.0"
    assert suggestion["maximumRefundableSet"]["shopMoney"]["amount"] == "226.0"
    assert [t["parentTransaction"]["id"] for t in suggestion["suggestedTransactions"]] == [
        "gid://shopify/OrderTransaction/10601",
        "gid://shopify/OrderTransaction/10602",
    ]


async def test_a_clean_exit_after_an_invalid_operation_fails_the_test() -> None:
    """By default the fake refuses to end quietly when a document failed validation."""
    api = FakeShopifyAPI(access_token=TOKEN)
    with pytest.raises(AssertionError, match="Cannot query field 'nope'"):
        async with api:
            async with aiohttp.ClientSession() as session:
                await Client(api, session).gql("query Q { shop { nope } }")
    assert [op.name for op in api.invalid_operations] == ["Q"]


async def test_the_operations_are_readable_from_another_process(client: Client, shopify: FakeShopifyAPI) -> None:
    """GET /__fake__/operations lists each operation with its validity (for `signoff serve` tests)."""
    await client.gql("query Good { shop { name } }")
    await client.gql("query Bad { shop { nope } }")
    async with client.session.get(f"{shopify.base_url}/__fake__/operations") as r:
        listed = await r.json()
    assert [(op["name"], op["valid"]) for op in listed["operations"]] == [("Good", True), ("Bad", False)]
    assert listed["invalid"] == 1


async def test_compliance_webhooks_name_the_customer_and_their_orders(shopify: FakeShopifyAPI) -> None:
    """customers/redact lists C-7's orders to redact; shop/redact names only the shop."""
    redact = shopify.compliance("customers/redact", 7).payload
    assert redact["customer"]["id"] == 7 and 1042 in redact["orders_to_redact"]
    assert shopify.compliance("customers/data_request", 7).payload["orders_requested"] == redact["orders_to_redact"]
    assert shopify.compliance("shop/redact").payload == {
        "shop_id": 1,
        "shop_domain": "fernway-outfitters.myshopify.com",
    }


async def test_a_held_refund_is_in_flight_until_released(client: Client, shopify: FakeShopifyAPI) -> None:
    """hold/arrived let a test act while refundCreate is in flight (the SIGKILL crash test's hook)."""
    release = asyncio.Event()
    fault = shopify.inject(Fault(match="refundCreate", hold=release))
    call = asyncio.create_task(client.post(REFUND, {"input": refund_input(1042, "5.00"), "key": "op-5"}))
    await asyncio.wait_for(fault.arrived.wait(), 10)
    assert shopify.shop.orders[1042].refunds == [] and not call.done()
    release.set()
    status, body = await call
    assert status == 200 and body["data"]["refundCreate"]["refund"]
    assert len(shopify.shop.orders[1042].refunds) == 1


async def test_the_actual_cost_counts_what_came_back_and_refunds_the_rest(
    client: Client, shopify: FakeShopifyAPI
) -> None:
    """orders(first: 50) matching one order: requested 2 + 50 × 2, actual 2 + 1 × 2; the bucket keeps the rest."""
    now = [0.0]
    shopify.bucket = Bucket(maximum=200, restore_rate=1, clock=lambda: now[0])
    body = await client.gql('{ orders(first: 50, query: "name:#1042") { nodes { id customer { id } } } }')
    cost = body["extensions"]["cost"]
    assert (cost["requestedQueryCost"], cost["actualQueryCost"]) == (102, 4)
    assert cost["throttleStatus"]["currentlyAvailable"] == 196
