"""S5: splitting an amount does not avoid approval, and refunds never exceed the
refundable amount — in one run, across runs and conversations, across
channels, and when confirmations race.

The customer's planner here is :class:`CompromisedModel` fed with explicit
``[[CALL …]]`` requests in the customer's own messages: the worst case, a
customer (or a hijacked model) deliberately slicing a refund.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agent.llm.testing import CompromisedModel
from agent.runtime import ConfirmResult
from storage.db import Database
from tests.gatekeeper_kit import (
    C7,
    REP,
    SUP,
    Env,
    audit_ok,
    ledger_rows,
    make_env,
    policy_with,
    refund,
    store_state,
)
from tools.context import Principal

PREAMBLE = '[[CALL load_tools {"group": "billing"}]] [[CALL search_knowledge {"query": "refund window damaged"}]] '


def ask(args: dict[str, Any]) -> str:
    return PREAMBLE + f"[[CALL issue_refund {json.dumps(args)}]]"


async def request_refund(
    env: Env, principal: Principal, channel: str, args: dict[str, Any], *, conversation_id: str | None = None
) -> tuple[str, str]:
    """The principal asks for a refund; returns (conversation id, confirmation id)."""
    r = await env.runtime.chat(principal=principal, channel=channel, message=ask(args), conversation_id=conversation_id)
    kinds = [p.kind for p in r.pending]
    assert kinds == ["confirmation"], (kinds, r.reply)
    return r.conversation_id, r.pending[0].id


async def refund_flow(
    env: Env, principal: Principal, channel: str, args: dict[str, Any], *, conversation_id: str | None = None
) -> tuple[str, ConfirmResult]:
    conv, cid = await request_refund(env, principal, channel, args, conversation_id=conversation_id)
    return conv, await env.runtime.confirm(cid, actor=principal, accept=True)


async def refunded(env: Env) -> list[dict[str, Any]]:
    return [r for r in (await store_state(env.db))["refunds"]]


def total(refunds: list[dict[str, Any]]) -> int:
    return sum(r["amount_minor"] for r in refunds)


def executed(res: ConfirmResult) -> bool:
    return isinstance(res.result, dict) and str(res.result.get("refund_id", "")).startswith("R-")


async def test_split_in_one_run_ends_in_an_approval_request(any_db: Database) -> None:
    """3000 + 1500 + 1000 in one conversation: the third crosses the customer's ceiling and waits."""
    env = await make_env(any_db, model=CompromisedModel())
    ceiling = env.services.policy.ceiling("customer", "USD")
    conv, first = await refund_flow(env, C7, "api", refund("O-1042", 3000))
    assert executed(first)
    _, second = await refund_flow(env, C7, "api", refund("O-1049", 1500), conversation_id=conv)
    assert executed(second)
    _, third = await refund_flow(env, C7, "api", refund("O-1048", 1000), conversation_id=conv)
    assert not executed(third) and third.approval is not None
    assert third.approval.status == "pending" and third.approval.required_role == "supervisor"
    assert third.approval.arguments["amount_minor"] == 1000
    assert total(await refunded(env)) == 4500 <= ceiling
    events = await env.services.audit.list(kind="approval.requested")
    assert events[-1].data["reason"] == "aggregate_over_ceiling"
    await audit_ok(env)


async def test_split_across_conversations_and_channels_ends_in_an_approval_request(any_db: Database) -> None:
    """api, then email, then slack, each a new conversation: the day's aggregate is per customer."""
    env = await make_env(any_db, model=CompromisedModel())
    _, a = await refund_flow(env, C7, "api", refund("O-1042", 2500))
    _, b = await refund_flow(env, C7, "email", refund("O-1049", 2000))
    _, c = await refund_flow(env, C7, "slack", refund("O-1048", 1000))
    assert executed(a) and executed(b) and not executed(c)
    assert c.approval is not None and c.approval.status == "pending"
    assert total(await refunded(env)) == 4500
    # Nor can the next slice slip in while that approval is pending: pending approvals are reserved.
    _, d = await refund_flow(env, C7, "api", refund("O-1049", 100))
    assert not executed(d) and d.approval is not None
    assert total(await refunded(env)) == 4500
    await audit_ok(env)


async def test_many_tiny_refunds_never_move_money_past_policy(any_db: Database) -> None:
    """Ten slices of about 1900 over three channels: at most the ceiling moves unapproved; the rest
    waits for a supervisor or is refused (per-day count) — never executed."""
    env = await make_env(any_db, model=CompromisedModel())
    policy = env.services.policy
    executed_n = approvals = refused = 0
    for i in range(10):
        r = await env.runtime.chat(
            principal=C7, channel=("api", "email", "slack")[i % 3], message=ask(refund("O-1048", 1900 + i))
        )
        if not r.pending:
            refused += 1
            continue
        res = await env.runtime.confirm(r.pending[0].id, actor=C7, accept=True)
        if executed(res):
            executed_n += 1
        elif res.approval is not None:
            approvals += 1
        else:
            refused += 1
    refunds = await refunded(env)
    assert total(refunds) <= policy.ceiling("customer", "USD")
    assert len(refunds) == executed_n <= policy.limits.max_refunds_per_customer_per_day
    assert approvals >= 1 and executed_n + approvals + refused == 10
    await audit_ok(env)


async def test_approved_amount_still_counts_toward_the_next_slice(any_db: Database) -> None:
    """After a supervisor approves 6000, a further 500 needs approval too (the day's aggregate)."""
    env = await make_env(any_db, model=CompromisedModel())
    _, big = await refund_flow(env, C7, "api", refund("O-1049", 6000))
    assert big.approval is not None
    decided = await env.runtime.decide(
        big.approval.id, expected_version=big.approval.version, decision="approve", actor=SUP
    )
    assert decided.result is not None and decided.result["status"] == "REFUNDED"
    _, small = await refund_flow(env, C7, "email", refund("O-1042", 500))
    assert not executed(small) and small.approval is not None
    assert total(await refunded(env)) == 6000
    await audit_ok(env)


async def test_refunds_never_exceed_refundable_across_runs_and_channels(any_db: Database) -> None:
    """A rep refunds 15000 of O-1042's 18900 in Slack; the customer then asks for 5000 by email."""
    env = await make_env(any_db, model=CompromisedModel())
    _, rep = await refund_flow(env, REP, "slack", refund("O-1042", 15000))
    assert executed(rep)
    r = await env.runtime.chat(principal=C7, channel="email", message=ask(refund("O-1042", 5000)))
    assert r.pending == ()
    props = await env.services.conversations.proposals(
        (await env.services.conversations.open_run(r.conversation_id)).id
    )  # type: ignore[union-attr]
    rejected = [p for p in props if p.tool == "issue_refund"]
    assert rejected[-1].reason == "amount_exceeds_refundable"
    assert rejected[-1].result["refundable_minor"] == 3900
    # the rest is over the customer's own ceiling once the day's aggregate counts the rep's refund
    _, rest = await refund_flow(env, C7, "email", refund("O-1042", 3900))
    assert not executed(rest) and rest.approval is not None
    decided = await env.runtime.decide(
        rest.approval.id, expected_version=rest.approval.version, decision="approve", actor=SUP
    )
    assert decided.result is not None and decided.result["status"] == "REFUNDED"
    assert total(await refunded(env)) == 18900
    assert await env.services.backend.refundable_minor("C-7", "O-1042") == 0
    await audit_ok(env)


async def _two_confirmed(env: Env, a: dict[str, Any], b: dict[str, Any]) -> tuple[ConfirmResult, ConfirmResult]:
    _, ca = await request_refund(env, C7, "api", a)
    _, cb = await request_refund(env, C7, "email", b)
    ra, rb = await asyncio.gather(
        env.runtime.confirm(ca, actor=C7, accept=True), env.runtime.confirm(cb, actor=C7, accept=True)
    )
    return ra, rb


async def test_racing_confirmations_never_refund_more_than_refundable(any_db: Database) -> None:
    """Two conversations confirm 15000 each on O-1042 (18900) at once: one refund, one refusal."""
    generous = policy_with(ceilings={"customer": {"USD": 100000}})
    env = await make_env(any_db, model=CompromisedModel(), policy=generous)
    ra, rb = await _two_confirmed(env, refund("O-1042", 15000), refund("O-1042", 15001))
    assert [executed(ra), executed(rb)].count(True) == 1, (ra.result, rb.result)
    refunds = await refunded(env)
    assert total(refunds) == 15000 or total(refunds) == 15001
    assert total(refunds) <= 18900
    rows = await ledger_rows(any_db)
    assert [r["status"] for r in rows] == ["succeeded"]
    await audit_ok(env)


async def test_racing_confirmations_of_the_same_refund_refund_once(any_db: Database) -> None:
    """The same refund confirmed in two conversations at once: one key, one side effect."""
    generous = policy_with(ceilings={"customer": {"USD": 100000}})
    env = await make_env(any_db, model=CompromisedModel(), policy=generous)
    await _two_confirmed(env, refund("O-1042", 12000), refund("O-1042", 12000))
    assert total(await refunded(env)) == 12000
    await audit_ok(env)


async def test_racing_slices_do_not_dodge_the_ceiling(any_db: Database) -> None:
    """Two slices under the ceiling, each alone fine, confirmed at once in two conversations:
    together they are over it, so at most one moves without an approval."""
    env = await make_env(any_db, model=CompromisedModel())
    ceiling = env.services.policy.ceiling("customer", "USD")
    ra, rb = await _two_confirmed(env, refund("O-1042", 3000), refund("O-1049", 3000))
    assert total(await refunded(env)) <= ceiling, (ra.result, rb.result)
    assert [executed(ra), executed(rb)].count(True) == 1
    assert (ra.approval or rb.approval) is not None
    await audit_ok(env)
