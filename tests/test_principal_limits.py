"""Per-principal limits across conversations (issue 13): a customer's new conversations per
hour, model tokens and actions per day; a staff member's refund money per day across customers;
and no staff member acting on an account linked to their own email."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from sqlalchemy import func, select

from agent.errors import LimitExceeded
from agent.llm.testing import CompromisedModel
from agent.metrics import attach_metrics
from agent.runtime import Runtime
from bot.app import sandbox_services
from sandbox.dataset import DatasetError, parse_dataset
from storage.db import Database
from storage.models import TokenUsageRow
from tests.api_kit import bearer, client_for, counts
from tests.gatekeeper_kit import C7, C8, REP, SUP, audit_ok, base_dataset, make_env, policy_with, refund, store_state
from tests.support import Harness
from tools.context import Principal

PREAMBLE = '[[CALL load_tools {"group": "billing"}]] [[CALL search_knowledge {"query": "refund window damaged"}]] '
C9 = Principal(kind="customer", id="C-9", customer_id="C-9")
REP_ON_C9 = Principal(kind="rep", id="S-1", customer_id="C-9")
REP2_ON_C9 = Principal(kind="rep", id="S-2", customer_id="C-9")
REP_ON_C8 = Principal(kind="rep", id="S-1", customer_id="C-8")


def ask(args: dict[str, Any]) -> str:
    return PREAMBLE + f"[[CALL issue_refund {json.dumps(args)}]]"


def limited(**customer: int) -> Any:
    return policy_with(customer=customer)


def limit_count(metrics: Any, limit: str) -> float:
    return metrics.registry.get_sample_value("signoff_limit_refusals_total", {"limit": limit}) or 0.0


async def last_refund_proposal(env: Any, conversation_id: str) -> Any:
    run = await env.services.conversations.open_run(conversation_id)
    assert run is not None
    return [p for p in await env.services.conversations.proposals(run.id) if p.tool == "issue_refund"][-1]


def test_the_bundled_policy_has_the_limits_and_refuses_a_zero_one() -> None:
    p = policy_with()
    assert p.customer.max_new_conversations_per_hour >= 1 and p.customer.max_actions_per_day >= 1
    assert p.staff_daily_refund_cap("USD") > 0 and p.staff_daily_refund_cap("JPY") > 0
    with pytest.raises(Exception, match="max_actions_per_day"):
        limited(max_actions_per_day=0)


async def test_new_conversations_per_hour_are_refused_before_anything_is_stored(any_db: Database) -> None:
    env = await make_env(any_db, model=CompromisedModel(), policy=limited(max_new_conversations_per_hour=2))
    metrics = attach_metrics(env.services)
    first = await env.runtime.chat(principal=C7, channel="api", message="hello")
    await env.runtime.chat(principal=C7, channel="email", message="hello again")
    before = await counts(any_db)
    with pytest.raises(LimitExceeded) as refused:
        await env.runtime.chat(principal=C7, channel="slack", message="a third conversation")
    assert (refused.value.code, refused.value.limit) == ("rate_limited", "conversations_per_hour")
    assert await counts(any_db) == before
    assert limit_count(metrics, "conversations_per_hour") == 1
    # an open conversation continues; another customer and staff on the account are not limited
    await env.runtime.chat(principal=C7, channel="api", message="still here", conversation_id=first.conversation_id)
    await env.runtime.chat(principal=C8, channel="api", message="hello")
    await env.runtime.chat(principal=REP, channel="api", message="looking at C-7")
    # a restart (a new runtime over the same database) still counts them
    again = Runtime(sandbox_services(db=any_db, model=CompromisedModel(), policy=env.services.policy))
    with pytest.raises(LimitExceeded):
        await again.chat(principal=C7, channel="api", message="after a restart")
    await audit_ok(env)


async def test_model_tokens_per_day_refuse_the_turn_before_the_model_is_called(any_db: Database) -> None:
    env = await make_env(any_db, model=CompromisedModel())
    first = await env.runtime.chat(principal=C7, channel="api", message="hello")
    async with any_db.sessions() as s:
        used = int(
            (
                await s.execute(
                    select(func.sum(TokenUsageRow.input_tokens + TokenUsageRow.output_tokens)).where(
                        TokenUsageRow.conversation_id == first.conversation_id
                    )
                )
            ).scalar_one()
        )
    assert used >= 1000
    # Another process with the day's budget at what C-7 already used: counted from the database.
    model = CompromisedModel()
    services = sandbox_services(db=any_db, model=model, policy=limited(max_model_tokens_per_day=used))
    rt = Runtime(services)
    metrics = attach_metrics(services)
    before = await counts(any_db)
    for conversation_id in (first.conversation_id, None):
        with pytest.raises(LimitExceeded) as refused:
            await rt.chat(principal=C7, channel="api", message="more", conversation_id=conversation_id)
        assert refused.value.limit == "model_tokens_per_day"
    assert await counts(any_db) == before
    assert limit_count(metrics, "model_tokens_per_day") == 2
    other = await rt.chat(principal=C8, channel="api", message="hello")
    assert other.iterations >= 1


async def test_actions_per_day_are_refused_by_the_gate_even_for_confirmations_waiting(any_db: Database) -> None:
    env = await make_env(any_db, model=CompromisedModel(), policy=limited(max_actions_per_day=2))
    metrics = attach_metrics(env.services)
    waiting = []
    for order in ("O-1042", "O-1049", "O-1048"):
        r = await env.runtime.chat(principal=C7, channel="api", message=ask(refund(order, 1000)))
        [pending] = r.pending
        waiting.append((r.conversation_id, pending.id))
    results = [await env.runtime.confirm(cid, actor=C7, accept=True) for _, cid in waiting]
    assert [isinstance(x.result, dict) and "refund_id" in x.result for x in results] == [True, True, False]
    third = results[2].confirmation.outcome or {}
    assert (third.get("decision"), third.get("result", {}).get("error")) == ("reject", "daily_action_limit_reached"), (
        results[2]
    )
    assert len((await store_state(any_db))["refunds"]) == 2
    # a new request in a new conversation is refused as a tool result the model sees
    r = await env.runtime.chat(principal=C7, channel="email", message=ask(refund("O-1049", 500)))
    assert r.pending == ()
    refused = await last_refund_proposal(env, r.conversation_id)
    assert (refused.reason, refused.is_error) == ("daily_action_limit_reached", True)
    assert refused.result["error"] == "daily_action_limit_reached" and refused.result["message"]
    assert len((await store_state(any_db))["refunds"]) == 2
    assert limit_count(metrics, "actions_per_day") == 2
    # another customer is unaffected
    other = await env.runtime.chat(principal=C8, channel="api", message=ask(refund("O-1050", 1000, currency="EUR")))
    assert [p.kind for p in other.pending] == ["confirmation"]
    await audit_ok(env)


async def test_a_reps_daily_refunds_across_customers_route_to_a_supervisor(any_db: Database) -> None:
    """S-1 refunds 2000 on C-7 and then asks 1500 on C-9: over the per-staff cap (3000), so a
    supervisor decides; another rep is unaffected; the approved refund then moves."""
    policy = policy_with(limits={"max_refund_minor_per_staff_per_day": {"USD": 3000}})
    env = await make_env(any_db, model=CompromisedModel(), policy=policy)

    async def flow(who: Principal, args: dict[str, Any]) -> Any:
        r = await env.runtime.chat(principal=who, channel="api", message=ask(args))
        assert [p.kind for p in r.pending] == ["confirmation"], r.reply
        return await env.runtime.confirm(r.pending[0].id, actor=who, accept=True)

    first = await flow(REP, refund("O-1042", 2000))
    assert "refund_id" in first.result
    second = await flow(REP_ON_C9, refund("O-1060", 1500))
    assert second.approval is not None and second.approval.status == "pending"
    events = await env.services.audit.list(kind="approval.requested")
    assert events[-1].data["reason"] == "staff_daily_over_cap"
    assert len((await store_state(any_db))["refunds"]) == 1
    other = await flow(REP2_ON_C9, refund("O-1060", 1000))
    assert "refund_id" in other.result
    sup = Principal(kind="supervisor", id=SUP.id, customer_id="C-9")
    decided = await env.runtime.decide(
        second.approval.id, expected_version=second.approval.version, decision="approve", actor=sup
    )
    assert decided.result is not None and decided.result["status"] == "REFUNDED"
    assert len((await store_state(any_db))["refunds"]) == 3
    await audit_ok(env)


async def test_one_persons_refunds_as_rep_and_as_supervisor_share_one_daily_cap(any_db: Database) -> None:
    """S-1 refunds 2000 as a rep, then asks 1500 acting as a supervisor: one person, one budget
    (3000), so the second is routed to approval rather than counted in a fresh bucket."""
    policy = policy_with(limits={"max_refund_minor_per_staff_per_day": {"USD": 3000}})
    env = await make_env(any_db, model=CompromisedModel(), policy=policy)
    r = await env.runtime.chat(principal=REP, channel="api", message=ask(refund("O-1042", 2000)))
    first = await env.runtime.confirm(r.pending[0].id, actor=REP, accept=True)
    assert "refund_id" in first.result
    same_person = Principal(kind="supervisor", id=REP.id, customer_id="C-9")
    r = await env.runtime.chat(principal=same_person, channel="api", message=ask(refund("O-1060", 1500)))
    second = await env.runtime.confirm(r.pending[0].id, actor=same_person, accept=True) if r.pending else None
    events = await env.services.audit.list(kind="approval.requested")
    assert events and events[-1].data["reason"] == "staff_daily_over_cap", (r.reply, second)
    assert len((await store_state(any_db))["refunds"]) == 1


def _with_staff_email(email: str) -> dict[str, Any]:
    ds = copy.deepcopy(base_dataset())
    for m in ds["staff"]:
        if m["id"] == "S-1":
            m["email"] = email
    return ds


async def test_a_rep_cannot_act_on_an_account_linked_to_their_own_email(any_db: Database) -> None:
    env = await make_env(any_db, model=CompromisedModel(), dataset=_with_staff_email("MAYA.Chen@Example.COM"))
    staff = await env.services.people.staff("S-1")
    assert staff is not None and staff.email == "MAYA.Chen@Example.COM"
    r = await env.runtime.chat(principal=REP, channel="api", message=ask(refund("O-1042", 1000)))
    assert r.pending == ()
    refused = await last_refund_proposal(env, r.conversation_id)
    assert refused.reason == "own_account" and refused.result["error"] == "own_account"
    assert (await store_state(any_db))["refunds"] == base_dataset().get("refunds", [])
    # the same rep on someone else's account, and another rep on this one, proceed
    ok = await env.runtime.chat(principal=REP_ON_C8, channel="api", message=ask(refund("O-1050", 1000, currency="EUR")))
    assert [p.kind for p in ok.pending] == ["confirmation"]
    rep2 = Principal(kind="rep", id="S-2", customer_id="C-7")
    ok2 = await env.runtime.chat(principal=rep2, channel="api", message=ask(refund("O-1042", 1000)))
    assert [p.kind for p in ok2.pending] == ["confirmation"]
    exported = await store_state(any_db)
    assert [m.get("email") for m in exported["staff"] if m["id"] == "S-1"] == ["MAYA.Chen@Example.COM"]
    await audit_ok(env)


def test_staff_emails_are_checked_in_the_dataset() -> None:
    ds = _with_staff_email("priya@example.com")
    ds["staff"][1]["email"] = "Priya@example.com"
    with pytest.raises(DatasetError, match=r"staff\[1\]\.email: duplicate email"):
        parse_dataset(ds)
    bad = _with_staff_email("not an email")
    with pytest.raises(Exception, match="email"):
        parse_dataset(bad)


async def test_the_api_answers_429_with_a_json_error_and_stores_nothing(any_db: Database) -> None:
    env = await make_env(any_db, model=CompromisedModel(), policy=limited(max_new_conversations_per_hour=1))
    h = Harness(db=env.db, runtime=env.runtime, services=env.services, notifier=env.notifier, clock=env.clock)
    async with client_for(h) as c:
        r = await c.post("/api/chat", json={"message": "hello"}, headers=bearer("C-7", "customer"))
        assert r.status == 200, await r.text()
        before = await counts(any_db)
        r = await c.post("/api/chat", json={"message": "again"}, headers=bearer("C-7", "customer"))
        body = await r.json()
        assert (r.status, body["error"]) == (429, "rate_limited") and body["message"]
        assert await counts(any_db) == before
        r = await c.post("/api/chat", json={"message": "hello"}, headers=bearer("C-8", "customer"))
        assert r.status == 200
