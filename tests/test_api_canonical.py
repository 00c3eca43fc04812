"""The seed conversation over HTTP: chat → confirm → PENDING_APPROVAL → approve → REFUNDED,
and every refusal on the way (role, own request, stale version, already decided, expired)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aiohttp.test_utils import TestClient

from agent.llm.testing import ScriptedModel, text_block, tool_use_block
from storage.db import Database
from tests.api_kit import bearer, client_for, counts
from tests.support import seeded

REFUND = {
    "order_id": "O-1042",
    "amount_minor": 18900,
    "currency": "USD",
    "reason_code": "damaged",
    "evidence": ["refund-policy@7#window"],
}
C7 = bearer("C-7", "customer")
C8 = bearer("C-8", "customer")
REP = bearer("S-1", "rep")
SUP = bearer("S-3", "supervisor")
SUP_B = bearer("S-4", "supervisor")


def script() -> ScriptedModel:
    return ScriptedModel(
        [
            [tool_use_block("get_order", {"order_id": "O-1042"})],
            [tool_use_block("search_knowledge", {"query": "refund window"})],
            [text_block("Checking the policy."), tool_use_block("issue_refund", REFUND)],
            "Your order O-1042 was delivered. Shall I refund $189.00? Please confirm.",
            "Thanks — a supervisor needs to approve this refund; it is pending.",
            "Good news: your refund of $189.00 was approved and issued.",
        ]
    )


async def post(client: TestClient, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    r = await client.post(path, json=body, headers=headers)
    return r.status, await r.json()


async def to_pending_approval(client: TestClient) -> tuple[dict[str, Any], dict[str, Any]]:
    """Chat as C-7 and confirm: returns (chat response, confirm response)."""
    status, chat = await post(
        client, "/api/chat", {"conversationId": None, "message": "Where is my order O-1042? Also refund it."}, C7
    )
    assert status == 200, chat
    status, confirmed = await post(client, f"/api/confirmations/{chat['pending'][0]['id']}/confirm", {}, C7)
    assert status == 200, confirmed
    return chat, confirmed


async def test_seed_conversation_over_http_refund_confirm_approve(any_db: Database) -> None:
    """The issue's canonical flow, over HTTP (SQLite and PostgreSQL), every decision refusal mapped."""
    db = any_db
    h = await seeded(db, script())
    async with client_for(h) as client:
        chat, confirmed = await to_pending_approval(client)
        assert "delivered" in chat["reply"].lower()
        assert [p["kind"] for p in chat["pending"]] == ["confirmation"]
        assert "189.00" in chat["pending"][0]["summary"] or "18900" in chat["pending"][0]["summary"]
        assert chat["iterations"] == 4 and chat["inputTokens"] > 0 and chat["outputTokens"] > 0

        assert confirmed["confirmation"]["status"] == "confirmed"
        shown = confirmed["confirmation"]["view"]  # as the cards show it
        assert (shown["open"], shown["awaitingApproval"], shown["outcome"]) == (False, True, None)
        assert confirmed["result"] == {"status": "PENDING_APPROVAL", "approvalId": confirmed["approval"]["id"]}
        assert confirmed["approval"]["status"] == "pending"
        assert "rationale" not in confirmed["approval"]  # the review file is for staff
        assert "pending" in confirmed["reply"]
        approval_id, version = confirmed["approval"]["id"], confirmed["approval"]["version"]

        listed = await client.get("/api/approvals?status=pending", headers=SUP)
        assert listed.status == 200
        assert [a["id"] for a in (await listed.json())["approvals"]] == [approval_id]
        assert (await client.get("/api/approvals", headers=REP)).status == 403
        assert (await client.get(f"/api/approvals/{approval_id}", headers=C7)).status == 403
        shown = await client.get(f"/api/approvals/{approval_id}", headers=REP)
        assert shown.status == 200 and (await shown.json())["rationale"]["trust"].startswith("untrusted")
        view = (await shown.json())["view"]  # as every face shows it
        assert (view["state"], view["open"], view["amount"], view["outcome"]) == ("open", True, "189.00 USD", None)
        assert view["reason"] is not None and view["reasonText"]

        path = f"/api/approvals/{approval_id}/approve"
        before = await counts(db)
        status, body = await post(client, path, {"version": version}, C7)
        assert (status, body["error"]) == (403, "forbidden")
        status, body = await post(client, path, {"version": version}, REP)
        assert (status, body["error"]) == (403, "forbidden")
        status, body = await post(client, path, {"version": version + 1}, SUP)
        assert (status, body["error"]) == (409, "conflict")
        assert await counts(db) == before

        status, body = await post(client, path, {"version": version, "comment": "ok, damaged"}, SUP)
        assert status == 200, body
        assert body["approval"]["status"] == "approved" and body["approval"]["version"] == version + 1
        assert body["result"]["status"] == "REFUNDED"
        view = body["approval"]["view"]
        assert (view["state"], view["open"]) == ("approved", False)
        assert view["outcome"]["reference"] == body["result"]["refund_id"]
        assert await h.services.backend.refundable_minor("C-7", "O-1042") == 0

        status, body = await post(client, path, {"version": version + 1}, SUP_B)
        assert (status, body["error"]) == (409, "conflict")
        status, body = await post(client, path, {"version": version}, SUP)
        assert status == 409


async def test_expired_approval_is_410(db: Database) -> None:
    """A decision after ``expires_at`` is refused with 410 and the approval becomes expired."""
    h = await seeded(db, script())
    async with client_for(h) as client:
        _chat, confirmed = await to_pending_approval(client)
        approval = confirmed["approval"]
        h.clock.now += timedelta(days=2)
        lapsed = await (await client.get(f"/api/approvals/{approval['id']}", headers=SUP)).json()
        assert lapsed["status"] == "pending" and (lapsed["view"]["state"], lapsed["view"]["open"]) == ("expired", False)
        status, body = await post(
            client, f"/api/approvals/{approval['id']}/approve", {"version": approval["version"]}, SUP
        )
        assert (status, body["error"]) == (410, "expired")
        shown = await (await client.get(f"/api/approvals/{approval['id']}", headers=SUP)).json()
        assert shown["status"] == "expired"
        assert await h.services.backend.refundable_minor("C-7", "O-1042") == 18900


async def test_reject_needs_a_comment_and_runs_nothing(db: Database) -> None:
    """Reject without a comment is 422 (schema); with one the approval is rejected and nothing runs."""
    h = await seeded(db, script())
    async with client_for(h) as client:
        _chat, confirmed = await to_pending_approval(client)
        approval = confirmed["approval"]
        path = f"/api/approvals/{approval['id']}/reject"
        status, body = await post(client, path, {"version": approval["version"]}, SUP)
        assert (status, body["error"]) == (422, "invalid") and "comment" in body["message"]
        status, body = await post(client, path, {"version": approval["version"], "comment": "   "}, SUP)
        assert status == 422
        status, body = await post(client, path, {"version": approval["version"], "comment": "no evidence"}, SUP)
        assert status == 200 and body["approval"]["status"] == "rejected" and body["result"] is None
        assert await h.services.backend.refundable_minor("C-7", "O-1042") == 18900


async def test_confirmations_only_by_the_acting_principal(db: Database) -> None:
    """Another customer sees a 404; staff get 403; a second answer is 409; decline does nothing."""
    model = ScriptedModel(
        [
            [tool_use_block("get_order", {"order_id": "O-1042"})],
            [tool_use_block("search_knowledge", {"query": "refund window"})],
            [tool_use_block("issue_refund", REFUND)],
            "Shall I refund $189.00? Please confirm.",
            "All right, I won't refund it.",
        ]
    )
    h = await seeded(db, model)
    async with client_for(h) as client:
        status, chat = await post(client, "/api/chat", {"message": "Refund my order O-1042"}, C7)
        cid = chat["pending"][0]["id"]
        before = await counts(db)
        assert (await post(client, f"/api/confirmations/{cid}/confirm", {}, C8))[0] == 404
        assert (await post(client, f"/api/confirmations/{cid}/confirm", {}, REP))[0] == 403
        assert (await post(client, "/api/confirmations/cnf_nope/confirm", {}, C7))[0] == 404
        assert (await post(client, f"/api/confirmations/{cid}/confirm", {"accept": True}, C7))[0] == 422
        assert await counts(db) == before
        status, body = await post(client, f"/api/confirmations/{cid}/decline", None, C7)
        assert status == 200 and body["confirmation"]["status"] == "declined" and body["result"] is None
        assert body["reply"] == "All right, I won't refund it."
        status, body = await post(client, f"/api/confirmations/{cid}/confirm", {}, C7)
        assert (status, body["error"]) == (409, "conflict")
        assert await h.services.backend.refundable_minor("C-7", "O-1042") == 18900


async def test_own_request_is_403(db: Database) -> None:
    """A supervisor who requested an approval (assist mode) cannot decide it; another supervisor can."""
    model = ScriptedModel(
        [
            [tool_use_block("load_tools", {"group": "account"})],
            [
                tool_use_block(
                    "search_knowledge", {"query": "account security contact details change", "kind": "policy"}
                )
            ],
            [
                tool_use_block(
                    "update_contact_details",
                    {"phone": "+15125550199", "evidence": ["account-security@5#contact-changes"]},
                )
            ],
            "Please confirm the new phone number.",
            "A second supervisor must approve this change.",
            "The phone number was updated.",
        ]
    )
    h = await seeded(db, model)
    async with client_for(h) as client:
        status, chat = await post(
            client, "/api/chat", {"message": "Change the phone on file", "customerId": "C-7"}, SUP
        )
        assert status == 200, chat
        status, confirmed = await post(client, f"/api/confirmations/{chat['pending'][0]['id']}/confirm", {}, SUP)
        assert status == 200, confirmed
        approval = confirmed["approval"]
        assert approval["requester"] == "supervisor:S-3"
        path = f"/api/approvals/{approval['id']}/approve"
        status, body = await post(client, path, {"version": approval["version"]}, SUP)
        assert (status, body["error"]) == (403, "own_request")
        status, body = await post(client, path, {"version": approval["version"]}, SUP_B)
        assert status == 200 and body["result"]["status"] == "UPDATED", body
