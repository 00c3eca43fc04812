"""What the database-fault tests share: a confirmed refund to fault, and the checks that every
fault must pass (exactly one refund, the true outcome told, the click not used up, the chain)."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from agent.llm.testing import CompromisedModel
from sandbox.store import SandboxStore
from storage.db import Database
from tests.crash.refund_driver import request_text
from tests.gatekeeper_kit import C7, Env, audit_ok, ledger_rows, make_env, store_state

#: What a dropped SQLite connection looks like to the runtime (``storage.faults``: an outage).
LOST = "disk I/O error"


async def refund_env(db: Database) -> Env:
    """A runtime over ``db`` whose planner proposes a 20.00 refund of O-1042 that needs confirming."""
    return await make_env(db, model=CompromisedModel(final_text="Please confirm."))


async def ask(env: Env) -> tuple[str, str]:
    """The customer asks; the ids of the conversation and of its one pending confirmation."""
    first = await env.runtime.chat(principal=C7, channel="api", message=request_text("issue_refund"))
    pending = [p for p in first.pending if p.kind == "confirmation"]
    assert len(pending) == 1, first
    return first.conversation_id, pending[0].id


@contextmanager
def refund_fault(*, after_effect: bool, error: Callable[[], BaseException] | None = None) -> Iterator[list[int]]:
    """The sandbox's refund call fails as if the database connection dropped: after its write
    committed (``after_effect``) or before it. Yields the list of calls it faulted."""
    original = SandboxStore.issue_refund
    faulted: list[int] = []

    async def faulty(self: SandboxStore, *a: Any, **kw: Any) -> Any:
        if after_effect:
            await original(self, *a, **kw)
        faulted.append(1)
        raise (error or (lambda: sqlite3.OperationalError(LOST)))()

    SandboxStore.issue_refund = faulty  # type: ignore[method-assign]
    try:
        yield faulted
    finally:
        SandboxStore.issue_refund = original  # type: ignore[method-assign]


def told_in(env: Env, conversation_id: str, *, answered: bool = False) -> Callable[[str], Awaitable[bool]]:
    """The outcome is in the conversation (the runtime's event) and reached the customer: in the
    answer to their own request (``answered``), or as a follow-up through the notifier."""

    async def told(refund_id: str) -> bool:
        history = await env.services.conversations.history(conversation_id)
        said = " ".join(str(b.get("content") or b.get("text") or "") for m in history for b in m.content)
        followed = [c for c, _reply in env.notifier.of("follow_up") if c == conversation_id]
        return refund_id in said and (answered or bool(followed))

    return told


async def refunds_of(db: Database, order_id: str = "O-1042") -> list[dict[str, Any]]:
    return [r for r in (await store_state(db))["refunds"] if r["order_id"] == order_id]


async def assert_exactly_once_and_told(env: Env, confirmation_id: str, told: Callable[[str], Awaitable[bool]]) -> None:
    """One refund, one ``succeeded`` ledger row carrying it, the confirmation's outcome the true
    one (executed, not used up by the fault), the outcome told, and the audit chain verifying."""
    refunds = await refunds_of(env.db)
    assert len(refunds) == 1 and refunds[0]["amount_minor"] == 2000, refunds
    rows = [r for r in await ledger_rows(env.db) if r["tool"] == "issue_refund"]
    assert [r["status"] for r in rows] == ["succeeded"], rows
    assert rows[0]["result"]["refund_id"] == refunds[0]["id"]
    conf = await env.services.confirmations.get(confirmation_id)
    assert conf is not None and conf.outcome is not None, conf
    assert conf.outcome["decision"] == "execute" and not conf.outcome["is_error"], conf.outcome
    assert await told(refunds[0]["id"]), "the conversation was never told the outcome"
    await audit_ok(env)
