"""The account group against the real sandbox store: profile reads, contact
changes (tier 3), password reset and payment links to contacts on file (S1, S3)."""

from __future__ import annotations

from typing import Any

from sandbox.io import export_dataset
from storage.db import Database
from tests.catalogue_harness import (
    call,
    check,
    dataset,
    handler_only,
    make_ctx,
    make_store,
    same_but_id,
)

EVIDENCE = ["identity-policy@1#verify"]


def untrusted_place(city: str) -> dict[str, object]:
    """What the model sees of an address: the customer-written city wrapped as untrusted, the country."""
    return {"city": {"untrusted_data": {"source": "address", "text": city, "truncated": False}}, "country": "US"}


async def _outbox(db: Database) -> list[dict[str, Any]]:
    return list((await export_dataset(db)).get("outbox", []))


async def test_get_account_masks_contact_details(db: Database) -> None:
    """The bound account's view shows masked email and phone and city/country only."""
    store = await make_store(db)
    out = await call("get_account", {}, make_ctx(store))
    assert out["customer_id"] == "C-7"
    assert out["email"] == "j***@example.com" and out["phone"] == "***0123"
    assert out["location"] == untrusted_place("Springfield")
    assert out["name"]["untrusted_data"]["text"] == "Jane Doe"
    assert out["payment_method_count"] == 2


async def test_get_account_reads_only_the_bound_customer(db: Database) -> None:
    """The account comes from the session binding, so another binding sees another account."""
    store = await make_store(db)
    out = await call("get_account", {}, make_ctx(store, "C-8"))
    assert out["customer_id"] == "C-8" and out["phone"] is None


async def test_account_tools_need_a_bound_account(db: Database) -> None:
    """Without a bound customer the tool fails cleanly instead of guessing one."""
    store = await make_store(db)
    out = await call("get_account", {}, make_ctx(store, None))
    assert out["error"] == "no_account_bound"


async def test_list_payment_methods_shows_brand_last4_and_expiry(db: Database) -> None:
    """Saved cards, with expired ones flagged against ctx.now."""
    store = await make_store(db)
    out = await call("list_payment_methods", {}, make_ctx(store))
    assert out["count"] == 2
    assert [(m["payment_method_id"], m["last4"], m["expired"]) for m in out["payment_methods"]] == [
        ("pm-1", "4242", False),
        ("pm-2", "0005", True),
    ]


async def test_update_contact_details_changes_the_email_on_file(db: Database) -> None:
    """After check and handler the store holds the new email; the result is masked."""
    store = await make_store(db)
    ctx = make_ctx(store)
    out = await call("update_contact_details", {"email": "Jane.New@Example.com", "evidence": EVIDENCE}, ctx)
    assert out == {
        "customer_id": "C-7",
        "updated": ["email"],
        "email": "j***@example.com",
        "phone": "***0123",
    }
    customer = await store.get_customer("C-7")
    assert customer is not None and customer.email == "jane.new@example.com"


async def test_update_contact_details_check_refuses_empty_and_unchanged(db: Database) -> None:
    """Nothing to update, or the same details again, is refused before any write."""
    store = await make_store(db)
    ctx = make_ctx(store)
    assert (await check("update_contact_details", {"evidence": EVIDENCE}, ctx))["error"] == ("nothing_to_update")
    same = await check("update_contact_details", {"email": "JANE@example.com"}, ctx)
    assert same is not None and same["error"] == "no_change"


async def test_update_contact_details_backend_refusal_is_a_tool_failure(db: Database) -> None:
    """Another customer's email is refused by the store with its code, not an exception."""
    store = await make_store(db)
    out = await call("update_contact_details", {"email": "bob@example.org"}, make_ctx(store))
    assert out["error"] == "email_unavailable"


async def test_send_password_reset_goes_to_the_email_on_file(db: Database) -> None:
    """The reset link is sent to the address on file, once per day (S3, C9)."""
    store = await make_store(db)
    ctx = make_ctx(store)
    first = await call("send_password_reset", {}, ctx)
    again = await call("send_password_reset", {}, ctx)
    assert first["to"] == "j***@example.com" and first["template"] == "password_reset"
    assert again["message_id"] == first["message_id"]
    outbox = await _outbox(db)
    assert [(m["to"], m["template"], m["channel"]) for m in outbox] == [("jane@example.com", "password_reset", "email")]
    assert "reset" in outbox[0]["body"]


async def test_send_payment_link_for_an_unpaid_order(db: Database) -> None:
    """A pending order with a failed payment gets a link naming order and amount."""
    store = await make_store(db)
    out = await call("send_payment_link", {"order_id": "O-1045"}, make_ctx(store))
    assert out["template"] == "payment_link"
    outbox = await _outbox(db)
    assert outbox[0]["to"] == "jane@example.com"
    assert "O-1045" in outbox[0]["body"] and "30.00 USD" in outbox[0]["body"]


async def test_send_payment_link_without_order_updates_payment_details(db: Database) -> None:
    """With no order the link is for updating the saved payment details."""
    store = await make_store(db)
    out = await call("send_payment_link", {}, make_ctx(store))
    assert out["channel"] == "email"
    assert "payment details" in (await _outbox(db))[0]["body"]


async def test_send_payment_link_check_failures(db: Database) -> None:
    """Paid, cancelled and other customers' orders are refused; the last as not_found."""
    store = await make_store(db)
    ctx = make_ctx(store)
    paid = await check("send_payment_link", {"order_id": "O-1043"}, ctx)
    cancelled = await check("send_payment_link", {"order_id": "O-1048"}, ctx)
    theirs = await check("send_payment_link", {"order_id": "O-2002"}, ctx)
    missing = await check("send_payment_link", {"order_id": "O-9999"}, ctx)
    assert paid is not None and paid["error"] == "order_already_paid"
    assert cancelled is not None and cancelled["error"] == "order_not_payable"
    assert theirs is not None and missing is not None
    assert theirs["error"] == "not_found"
    assert same_but_id(theirs, "O-2002", missing, "O-9999")
    assert await _outbox(db) == []


async def test_send_payment_link_handler_refuses_another_customers_order(db: Database) -> None:
    """Even without the check, the handler cannot message about someone else's order."""
    store = await make_store(db)
    out = await handler_only("send_payment_link", {"order_id": "O-2002"}, make_ctx(store))
    assert out["error"] == "not_found"
    assert await _outbox(db) == []


async def test_update_contact_details_same_phone_in_another_format_is_no_change(
    db: Database,
) -> None:
    """A phone number on file is compared by its digits, not its spacing."""
    data = dataset()
    data["customers"][0]["phone"] = "+1 415 555 0123"
    store = await make_store(db, data)
    out = await check("update_contact_details", {"phone": "+14155550123"}, make_ctx(store))
    assert out is not None and out["error"] == "no_change"


async def test_password_reset_result_never_shows_the_link_to_the_model(db: Database) -> None:
    """The reset token goes to the inbox on file only; the tool result has no body or URL."""
    store = await make_store(db)
    out = await call("send_password_reset", {}, make_ctx(store))
    [msg] = await _outbox(db)
    token = msg["body"].split("token=")[1].split()[0]
    assert token not in str(out) and "http" not in str(out)
    assert set(out) == {"message_id", "channel", "template", "to", "sent_at"}
