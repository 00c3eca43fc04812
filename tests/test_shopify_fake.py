"""The fake Shopify Admin API (tests/fakes/shopify_api.py) answers as the service does:
schema validation, auth, cost throttling, idempotency, jobs and injected faults."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import aiohttp
import pytest

from sandbox.dataset import DEMO_DATASET_PATH, load_dataset_file
from tests.fakes.plugin import refused_operations
from tests.fakes.shopify.cost import Bucket
from tests.fakes.shopify.seed import seed_shop
from tests.fakes.shopify_api import INVALID_TOKEN, FakeShopifyAPI, Fault
from tests.shopify_kit import AS_OF, ORDER, REFUND, TOKEN, Client, client, refund_input, shopify

__all__ = ["client", "shopify"]  # the fixtures


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


@pytest.mark.sends_invalid_shopify_operations
async def test_a_clean_exit_after_an_invalid_operation_fails_the_test() -> None:
    """By default the fake refuses to end quietly when a document failed validation, and the
    refusal is recorded for the session's check (``tests.fakes.plugin``), which fails any test
    not marked like this one."""
    api = FakeShopifyAPI(access_token=TOKEN)
    seen = len(refused_operations())
    with pytest.raises(AssertionError, match="Cannot query field 'nope'"):
        async with api:
            async with aiohttp.ClientSession() as session:
                await Client(api, session).gql("query Q { shop { nope } }")
    assert [op.name for op in api.invalid_operations] == ["Q"]
    assert [op["name"] for op in refused_operations()[seen:]] == ["Q"]


async def test_a_fake_opened_to_take_invalid_operations_records_none_for_the_session(client: Client) -> None:
    """The fake's own tests send bad documents on purpose (``allow_invalid``): not our code's."""
    seen = len(refused_operations())
    await client.gql("query Bad { shop { nope } }")
    assert refused_operations()[seen:] == []


async def test_the_operations_are_readable_from_another_process(client: Client, shopify: FakeShopifyAPI) -> None:
    """GET /__fake__/operations lists each operation with its validity (for `signoff serve` tests)."""
    await client.gql("query Good { shop { name } }")
    await client.gql("query Bad { shop { nope } }")
    async with client.session.get(f"{shopify.base_url}/__fake__/operations") as r:
        listed = await r.json()
    assert [(op["name"], op["valid"]) for op in listed["operations"]] == [("Good", True), ("Bad", False)]
    assert listed["invalid"] == 1


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


async def test_the_same_key_while_the_first_is_in_flight_is_a_concurrent_request(
    client: Client, shopify: FakeShopifyAPI
) -> None:
    """A retry racing a held refundCreate gets IDEMPOTENCY_CONCURRENT_REQUEST; the first still lands, once,
    even though its caller went away (a killed client does not cancel what the shop received)."""
    release = asyncio.Event()
    fault = shopify.inject(Fault(match="refundCreate", hold=release))
    first = asyncio.create_task(client.post(REFUND, {"input": refund_input(1042, "5.00"), "key": "op-6"}))
    await asyncio.wait_for(fault.arrived.wait(), 10)
    racing = await client.gql(REFUND, {"input": refund_input(1042, "5.00"), "key": "op-6"})
    assert racing["errors"][0]["extensions"]["code"] == "IDEMPOTENCY_CONCURRENT_REQUEST"
    first.cancel()
    seen = len(shopify.requests)
    release.set()
    await shopify.wait_for_requests(seen + 1)  # the held request finished on the shop's side
    assert len(shopify.shop.orders[1042].refunds) == 1
    settled = await client.gql(REFUND, {"input": refund_input(1042, "5.00"), "key": "op-6"})
    assert settled["data"]["refundCreate"]["refund"]
    assert len(shopify.shop.orders[1042].refunds) == 1


async def test_an_order_name_search_works_with_or_without_the_hash(client: Client) -> None:
    """orders(query: "name:1042") finds #1042 as "name:#1042" does."""
    body = await client.gql('{ a: orders(first: 2, query: "name:1042") { nodes { name } } }')
    assert body["data"]["a"]["nodes"] == [{"name": "#1042"}]


async def test_scopes_not_granted_are_access_denied_and_old_orders_need_read_all_orders() -> None:
    """Without write_orders refundCreate is ACCESS_DENIED; without read_all_orders #1043
    (placed more than 60 days before now) reads as null while #1042 answers."""
    shop = seed_shop(load_dataset_file(DEMO_DATASET_PATH))
    scopes = ("read_orders", "read_customers")
    async with FakeShopifyAPI(shop, access_token=TOKEN, now=lambda: AS_OF, scopes=scopes) as api:
        async with aiohttp.ClientSession() as session:
            c = Client(api, session)
            denied = await c.gql(REFUND, {"input": refund_input(1042, "1.00"), "key": "op-7"})
            two = "query Two($a: ID!, $b: ID!) { a: order(id: $a) { name } b: order(id: $b) { name } }"
            orders = await c.gql(two, {"a": "gid://shopify/Order/1042", "b": "gid://shopify/Order/1043"})
    assert denied["errors"][0]["extensions"]["code"] == "ACCESS_DENIED"
    assert "`write_orders`" in denied["errors"][0]["message"]
    assert shop.orders[1042].refunds == []
    assert orders["data"] == {"a": {"name": "#1042"}, "b": None}


async def test_orders_search_by_time_compares_times_in_any_utc_spelling(
    client: Client, shopify: FakeShopifyAPI
) -> None:
    """updated_at:>= with +00:00 or Z selects the same orders: those changed at or after that instant."""
    since = "2025-06-01T00:00:00"
    query = "query S($q: String!) { orders(first: 250, query: $q) { nodes { name } } }"
    with_z = await client.gql(query, {"q": f"updated_at:>={since}Z"})
    with_offset = await client.gql(query, {"q": f"updated_at:>='{since}+00:00'"})
    names = {n["name"] for n in with_z["data"]["orders"]["nodes"]}
    assert names == {n["name"] for n in with_offset["data"]["orders"]["nodes"]}
    expected = {o.name for o in shopify.shop.orders.values() if o.updated_at >= datetime(2025, 6, 1, tzinfo=UTC)}
    assert names == expected and names
