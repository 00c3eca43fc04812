"""ShopifyBackend against the strict fake Admin API: reads with ownership, the catalogue's tools,
the refund's key to the money (@idempotent, a 502 after the shop applied it), throttling."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from agent.executor import Executor
from shopify.client import ShopifyUnavailable
from storage.db import Database
from storage.ledger import Ledger
from tests.catalogue_harness import REGISTRY, call, make_ctx
from tests.fakes.shopify.cost import Bucket
from tests.fakes.shopify_api import Fault
from tests.shopify_backend_kit import C7, fake_shop
from tools.backend import Address, BackendError, ReturnItem

NOW = datetime.now(UTC)


async def test_customers_by_gid_number_and_email() -> None:
    async with fake_shop() as (_, backend):
        by_gid = await backend.get_customer(C7)
        assert by_gid is not None and by_gid.name == "Maya Chen"
        assert await backend.get_customer("7") == by_gid
        assert await backend.find_customer_by_email(by_gid.email.upper()) == by_gid
        assert await backend.get_customer("C-7") is None and await backend.get_customer("gid://shopify/Order/7") is None
        assert await backend.find_customer_by_email('x" OR email:*') is None
        # Staff and Slack/Teams users are signoff's own people (storage.identities), never the shop's.
        assert not hasattr(backend, "get_staff") and not hasattr(backend, "find_customer_by_slack_user")


async def test_orders_by_name_number_or_gid_and_someone_elses_reads_as_missing() -> None:
    async with fake_shop() as (_, backend):
        by_name = await backend.get_order(C7, "#1042")
        assert by_name is not None and by_name.id == "#1042" and by_name.total_minor == 18900
        assert by_name.status == "DELIVERED" and by_name.currency == "USD"
        assert await backend.get_order("7", "1042") == by_name
        assert await backend.get_order(C7, "gid://shopify/Order/1042") == by_name
        # #1001 is C-24's: exactly like a missing one
        assert await backend.get_order(C7, "#1001") is None and await backend.get_order(C7, "#999999") is None
        assert await backend.track_shipment(C7, "#1001") is None and await backend.refundable_minor(C7, "#1001") is None
        listed = await backend.list_orders(C7)
        assert "#1042" in {o.id for o in listed} and all(o.customer_id == C7 for o in listed)
        assert {o.id for o in await backend.list_orders(C7, status="DELIVERED")} <= {o.id for o in listed}


async def test_statuses_tracking_money_and_returns_map_from_the_shop() -> None:
    async with fake_shop() as (_, backend):
        cancelled = await backend.get_order("49", "#1007")
        assert cancelled is not None and cancelled.status == "CANCELLED"
        pending = await backend.get_order("24", "#1001")
        assert pending is not None and pending.status == "PENDING" and pending.currency == "EUR"
        shipment = await backend.track_shipment(C7, "#1042")
        assert shipment is not None and shipment.status == "delivered" and shipment.tracking_number
        assert await backend.refundable_minor(C7, "#1042") == 18900
        payments = await backend.list_payments(C7, order_id="#1042")
        assert [(p.amount_minor, p.status) for p in payments] == [(18900, "captured")]
        returns = await backend.list_returns("42")  # RT-2005 on O-1002 (received), RT-2019 on O-1216 (refunded)
        assert sorted((r.order_id, r.status) for r in returns) == [("#1002", "received"), ("#1216", "refunded")]
        one = await backend.get_return("42", returns[0].id)
        assert one == returns[0]
        assert await backend.get_return(C7, returns[0].id) is None  # someone else's


async def test_every_offered_read_tool_answers_through_the_backend() -> None:
    async with fake_shop() as (_, backend):
        ctx = make_ctx(backend, C7, now=NOW)  # type: ignore[arg-type]
        calls = {
            "get_account": {},
            "get_order": {"order_id": "#1042"},
            "list_orders": {},
            "track_shipment": {"order_id": "#1042"},
            "list_returns": {},
            "list_payments": {"order_id": "#1042"},
        }
        for name, args in calls.items():
            result = await call(name, args, ctx)
            assert "error" not in result, (name, result)
        assert (await call("get_order", {"order_id": "#1001"}, ctx))["error"] == "not_found"
        assert set(calls) <= set(REGISTRY.tools) and set(calls) <= backend.supported_tools


async def test_a_refund_carries_its_key_with_idempotent_and_the_same_key_refunds_once() -> None:
    async with fake_shop() as (api, backend):
        key = "refund:#1042:2000:USD:-"
        first = await backend.issue_refund(C7, "#1042", amount_minor=2000, currency="USD", reason_code="damaged",
                                           return_id=None, idempotency_key=key)  # fmt: skip
        again = await backend.issue_refund(C7, "#1042", amount_minor=2000, currency="USD", reason_code="damaged",
                                           return_id=None, idempotency_key=key)  # fmt: skip
        assert again == first and first.amount_minor == 2000
        assert [r.id for r in await backend.list_refunds(C7, order_id="#1042")].count(first.id) == 1
        assert len(await backend.list_refunds(C7, order_id="#1042")) == 1
        sent = api.operations_named("refundCreate")
        assert len(sent) == 1 and "@idempotent(key: $key)" in sent[0].query
        assert await backend.refundable_minor(C7, "#1042") == 16900
        today = await backend.refunds_since(C7, datetime.now(UTC) - timedelta(days=1))
        assert [(r.id, r.amount_minor, r.kind) for r in today] == [(first.id, 2000, "refund")]
        assert await backend.refunds_since(C7, datetime.now(UTC) + timedelta(hours=1)) == []
        record = await backend.lookup_write(key)
        assert record is not None and record.result == {"refund_id": first.id}
        assert await backend.lookup_write("refund:#1042:999:USD:-") is None


async def test_refund_refusals_are_business_errors_and_send_nothing() -> None:
    async with fake_shop() as (api, backend):
        with pytest.raises(BackendError) as too_much:
            await backend.issue_refund(C7, "#1042", amount_minor=18901, currency="USD", reason_code="damaged",
                                       return_id=None, idempotency_key="refund:#1042:18901:USD:-")  # fmt: skip
        assert too_much.value.code == "amount_exceeds_refundable"
        with pytest.raises(BackendError) as other:
            await backend.issue_refund(C7, "#1001", amount_minor=100, currency="EUR", reason_code="damaged",
                                       return_id=None, idempotency_key="refund:#1001:100:EUR:-")  # fmt: skip
        assert other.value.code == "not_found"
        assert api.operations_named("refundCreate") == []


async def test_a_502_after_the_shop_applied_the_refund_settles_as_done_through_the_ledger(db: Database) -> None:
    async with fake_shop() as (api, backend):
        api.inject(Fault(match="refundCreate", status=502, after_apply=True))
        tool = REGISTRY.tools["issue_refund"]
        args = {"order_id": "#1042", "amount_minor": 2500, "currency": "USD", "reason_code": "damaged",
                "evidence": ["refund-policy@7#window"]}  # fmt: skip
        ctx = make_ctx(backend, C7, now=NOW)  # type: ignore[arg-type]
        key = tool.key(args, ctx) if tool.key else None
        assert key is not None
        outcome = await Executor(Ledger(db)).run(tool, args, ctx, key=key, proposal_id="p-1", run_id="r-1")
        assert outcome.is_error is False, outcome.result  # the truth: it was refunded
        refunds = await backend.list_refunds(C7, order_id="#1042")
        assert len(refunds) == 1 and refunds[0].amount_minor == 2500
        assert outcome.result["refund_id"] == refunds[0].id
        assert len(api.operations_named("refundCreate")) == 1  # reconciled by reading, not sent again


async def test_a_502_before_the_shop_applied_it_is_released_and_nothing_happened(db: Database) -> None:
    async with fake_shop() as (api, backend):
        api.inject(Fault(match="refundCreate", status=502))
        with pytest.raises(ShopifyUnavailable):
            await backend.issue_refund(C7, "#1042", amount_minor=2000, currency="USD", reason_code="damaged",
                                       return_id=None, idempotency_key="refund:#1042:2000:USD:-")  # fmt: skip
        assert await backend.lookup_write("refund:#1042:2000:USD:-") is None
        assert await backend.list_refunds(C7, order_id="#1042") == []


async def test_a_throttled_shop_is_waited_out_and_tokens_are_shared() -> None:
    async with fake_shop(bucket=Bucket(maximum=370.0, restore_rate=100.0)) as (
        api,
        backend,
    ):  # one Order (361) at a time
        orders = await asyncio.gather(*(backend.get_order(C7, "gid://shopify/Order/1042") for _ in range(4)))
        assert all(o is not None and o.id == "#1042" for o in orders)
        assert backend.client.waited_s > 0  # waited out (asyncio.sleep), never failed
        assert api.token_requests == 1


async def test_cancellation_and_contact_and_address_and_return_carry_their_keys() -> None:
    async with fake_shop() as (api, backend):
        order = await backend.cancel_order(
            "60", "#1009", reason_code="customer_request", idempotency_key="cancel:#1009"
        )
        assert order.status == "CANCELLED"
        assert (await backend.lookup_write("cancel:#1009")) is not None
        again = await backend.cancel_order(
            "60", "#1009", reason_code="customer_request", idempotency_key="cancel:#1009"
        )
        assert again.status == "CANCELLED" and len(api.operations_named("orderCancel")) == 1
        assert (await backend.list_refunds("60", order_id="#1009"))[0].kind == "cancellation"

        moved = ADDRESS_NEW
        changed = await backend.update_shipping_address(
            "57", "#1010", address=moved, idempotency_key="address:#1010:p1"
        )
        assert changed.shipping_address == moved and await backend.lookup_write("address:#1010:p1") is not None
        with pytest.raises(BackendError) as shipped:  # #1042 is delivered: too late
            await backend.update_shipping_address(C7, "#1042", address=moved, idempotency_key="address:#1042:p2")
        assert shipped.value.code == "address_change_not_allowed"

        who = await backend.update_contact_details(
            C7, email=None, phone="+14155550199", idempotency_key=f"contact:{C7}:p3"
        )
        assert who.phone == "+14155550199" and await backend.lookup_write(f"contact:{C7}:p3") is not None

        boots, rkey = [ReturnItem(sku="BOOT-RDG-W8", qty=1)], "return:#1042:BOOT-RDG-W8x1"
        ret = await backend.create_return(C7, "#1042", items=boots, reason_code="damaged", idempotency_key=rkey)
        assert ret.status == "requested" and ret.items == (ReturnItem(sku="BOOT-RDG-W8", qty=1),)
        record = await backend.lookup_write("return:#1042:BOOT-RDG-W8x1")
        assert record is not None and record.result == {"return_id": ret.id}
        same = await backend.create_return(C7, "#1042", items=boots, reason_code="damaged", idempotency_key=rkey)
        assert same.id == ret.id and len(api.operations_named("returnRequest")) == 1


ADDRESS_NEW = Address(line1="9 New Road", city="Austin", postal_code="73301", country="US", region="TX")


async def test_every_offered_action_tool_runs_through_the_catalogue_on_the_shop() -> None:
    async with fake_shop() as (api, backend):
        ctx = make_ctx(backend, C7, now=NOW)  # type: ignore[arg-type]
        address = {"line1": "9 New Road", "city": "Austin", "postal_code": "73301", "country": "US"}
        calls = [
            ("update_contact_details", {"phone": "+14155550123"}, ctx),
            (
                "create_return",
                {"order_id": "#1042", "items": [{"sku": "BOOT-RDG-W8", "qty": 1}], "reason_code": "damaged"},
                ctx,
            ),  # fmt: skip
            (
                "cancel_order",
                {"order_id": "#1009", "reason_code": "customer_request"},
                make_ctx(backend, "60", now=NOW),
            ),  # type: ignore[arg-type]
            ("update_shipping_address", {"order_id": "#1010", "address": address}, make_ctx(backend, "57", now=NOW)),  # type: ignore[arg-type]
        ]
        for name, args, c in calls:
            result = await call(name, args, c)
            assert "error" not in result, (name, result)
        assert len(api.operations_named("orderCancel")) == 1 and len(api.operations_named("returnRequest")) == 1
