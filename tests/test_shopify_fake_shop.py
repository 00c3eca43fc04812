"""The fake Shopify shop's contents and side doors: writes, the seeded dataset, policies and
pages, signed webhooks and staff admin actions, and the out-of-process entry point."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import aiohttp
import pytest
from aiohttp import web

from tests.fakes.plugin import refused_operations
from tests.fakes.shopify.process import fake_process
from tests.fakes.shopify_api import FakeShopifyAPI
from tests.shopify_kit import REFUND, Client, client, refund_input, shopify

__all__ = ["client", "shopify"]  # the fixtures


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


@pytest.mark.sends_invalid_shopify_operations
async def test_the_fake_runs_as_its_own_process_and_prints_its_url() -> None:
    """fake_process() starts python -m tests.fakes.shopify_api --port 0: its URL answers the token
    grant and GraphQL; a clean SIGTERM exits 0, and 1 when an operation failed validation."""
    form = {"grant_type": "client_credentials", "client_id": "fake-client-id", "client_secret": "fake-client-secret"}
    async with fake_process("--access-token", "shpat_cli") as fake, aiohttp.ClientSession() as session:
        assert fake.url.startswith("http://127.0.0.1:")
        async with session.post(f"{fake.url}/admin/oauth/access_token", data=form) as r:
            assert r.status == 200 and (await r.json())["expires_in"] == 86399
        url, headers = f"{fake.url}/admin/api/2026-10/graphql.json", {"X-Shopify-Access-Token": "shpat_cli"}
        async with session.post(url, json={"query": "{ shop { name } }"}, headers=headers) as r:
            assert (await r.json())["data"] == {"shop": {"name": "Fernway Outfitters"}}
    assert fake.returncode == 0
    seen = len(refused_operations())
    async with fake_process("--access-token", "shpat_cli") as bad, aiohttp.ClientSession() as session:
        async with session.post(url.replace(fake.url, bad.url), json={"query": "{ shop { nope } }"}, headers=headers):
            pass
    assert bad.returncode == 1
    assert [op["query"] for op in refused_operations()[seen:]] == ["{ shop { nope } }"]  # for the session's check


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


async def test_compliance_webhooks_name_the_customer_and_their_orders(shopify: FakeShopifyAPI) -> None:
    """customers/redact lists C-7's orders to redact; shop/redact names only the shop."""
    redact = shopify.compliance("customers/redact", 7).payload
    assert redact["customer"]["id"] == 7 and 1042 in redact["orders_to_redact"]
    assert shopify.compliance("customers/data_request", 7).payload["orders_requested"] == redact["orders_to_redact"]
    assert shopify.compliance("shop/redact").payload == {
        "shop_id": 1,
        "shop_domain": "fernway-outfitters.myshopify.com",
    }


async def test_the_apps_own_writes_emit_webhooks_without_a_staff_user(client: Client, shopify: FakeShopifyAPI) -> None:
    """A refund made through the API is announced on refunds/create too, with user_id null;
    a staff refund carries the staff member's user_id."""
    await client.gql(REFUND, {"input": refund_input(1042, "5.00"), "key": "op-8"})
    await client.gql(REFUND, {"input": refund_input(1042, "5.00"), "key": "op-8"})  # a replay emits nothing
    staff = shopify.staff_refund(1042, 500)
    emitted = shopify.take_emitted()
    assert [w.topic for w in emitted] == ["refunds/create"]
    assert emitted[0].payload["user_id"] is None and staff.payload["user_id"] is not None
    assert shopify.take_emitted() == []


async def test_staff_approve_a_requested_return_and_edit_a_note(shopify: FakeShopifyAPI) -> None:
    """returns/approve moves RT-2004 (requested) to OPEN; orders/updated carries the new note."""
    approve = shopify.staff_approve_return(2004)
    assert approve.topic == "returns/approve" and approve.payload["status"] == "open"
    edited = shopify.staff_edit_note(1042, "gift wrap")
    assert edited.topic == "orders/updated" and edited.payload["id"] == 1042
    assert shopify.shop.orders[1042].note == "gift wrap"


async def test_a_draft_order_for_a_reorder_is_created_for_the_customer(client: Client, shopify: FakeShopifyAPI) -> None:
    """draftOrderCreate with custom lines for C-7 totals them; an unknown customer is a userError."""
    mutation = """mutation D($input: DraftOrderInput!) { draftOrderCreate(input: $input) {
        draftOrder { id status customer { id } totalPriceSet { shopMoney { amount currencyCode } } }
        userErrors { field message } } }"""
    line = {
        "title": "Ridgeline boots",
        "quantity": 2,
        "originalUnitPriceWithCurrency": {"amount": "94.5", "currencyCode": "USD"},
    }
    made = await client.gql(
        mutation, {"input": {"purchasingEntity": {"customerId": "gid://shopify/Customer/7"}, "lineItems": [line]}}
    )
    draft = made["data"]["draftOrderCreate"]["draftOrder"]
    assert draft["customer"] == {"id": "gid://shopify/Customer/7"} and draft["status"] == "OPEN"
    assert draft["totalPriceSet"]["shopMoney"] == {"amount": "189.0", "currencyCode": "USD"}
    nobody = await client.gql(
        mutation, {"input": {"purchasingEntity": {"customerId": "gid://shopify/Customer/999"}, "lineItems": [line]}}
    )
    assert nobody["data"]["draftOrderCreate"]["userErrors"][0]["field"] == ["purchasingEntity", "customerId"]
    assert len(shopify.shop.drafts) == 1
