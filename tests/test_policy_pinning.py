"""One decision, one policy version (C16): a run pins the version it started with, and every
decision reads ONE snapshot of it for the stage, the limits, the business rules and its version
stamp — however often a new version is swapped in while the decision awaits."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from agent import steps
from agent.llm.base import ModelRequest
from agent.llm.testing import FunctionModel, Reply, make_response, text_block, tool_use_block
from agent.policy import Policy
from agent.policy_refresher import PolicyRefresher
from agent.policy_store import active_policy, apply_policy, approve_policy
from agent.services import Services
from storage.audit import AuditLog
from storage.db import Database
from storage.models import ProposalRow, RunRow
from storage.policies import NewPolicyVersion, PolicyVersions
from tests.gatekeeper_kit import C7, EVIDENCE, bundled_policy_dict, gate_turn, make_env, policy_with, refund, retrieve

#: The start version: api customers in shadow, ceilings high (a refund would need no approval).
SHADOW = policy_with(
    version="2030.1.1",
    rollout={"channels": {"api": {"customer": "shadow"}}},
    ceilings={"customer": {"USD": 100000}},
)


def _swapped(n: int) -> Policy:
    """Version ``2030.2.n``: api customers in full, every refund over the ceiling."""
    return policy_with(
        version=f"2030.2.{n}",
        rollout={"channels": {"api": {"customer": "full"}}},
        ceilings={"customer": {"USD": 0}},
        limits={"refund_window_days": 0},
    )


class Swapping:
    """A real collaborator (the shop, a repository) whose every awaited call swaps a new policy
    version in before and after it: so one is swapped in between every await of a decision,
    whether or not the database driver ever yields to the event loop."""

    def __init__(self, inner: Any, swap: Callable[[], None]) -> None:
        self._inner = inner
        self._swap = swap

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(value):
            return value

        async def swapped(*args: Any, **kwargs: Any) -> Any:
            self._swap()
            try:
                return await value(*args, **kwargs)
            finally:
                self._swap()

        return swapped


def swap_everywhere(services: Services) -> list[str]:
    """Wrap what a decision awaits; the versions swapped in (one per swap)."""
    swapped: list[str] = []

    def swap() -> None:
        policy = _swapped(len(swapped) + 1)
        services.use_policy(policy)
        swapped.append(policy.version)

    for name in ("backend", "conversations", "confirmations", "approvals", "ledger", "locks", "usage", "people"):
        object.__setattr__(services, name, Swapping(getattr(services, name), swap))
    gate = services.gatekeeper
    for name in ("confirmations", "approvals", "usage", "people"):
        setattr(gate, name, Swapping(getattr(gate, name), swap))
    return swapped


async def _stamps(db: Database, run_id: str) -> tuple[set[str], set[str]]:
    """(policy versions of the run's audit events, of its proposals)."""
    events = [e for e in await AuditLog(db).list(limit=1000) if e.run_id == run_id]
    async with db.reader() as s:
        proposals = (await s.execute(select(ProposalRow.policy_version).where(ProposalRow.run_id == run_id))).scalars()
        return {str(e.policy_version) for e in events}, set(proposals)


async def test_a_policy_swapped_between_every_await_leaves_one_version_in_every_stamp(any_db: Database) -> None:
    env = await make_env(any_db, policy=SHADOW)
    turn = await gate_turn(env, C7)
    await retrieve(turn, EVIDENCE)
    use = tool_use_block("issue_refund", refund(amount=2000))
    response = make_response([text_block("Refunding."), use], model="m")
    swapped = swap_everywhere(env.services)
    await steps.run_tools(turn, response, [use])
    assert len(swapped) >= 10, swapped  # the decision did span many swaps
    assert env.services.policy.version == swapped[-1]
    events, proposals = await _stamps(any_db, turn.run.id)
    assert events == {"2030.1.1"} and proposals == {"2030.1.1"}
    async with any_db.reader() as s:
        (row,) = (await s.execute(select(ProposalRow).where(ProposalRow.run_id == turn.run.id))).scalars()
    # decided entirely under the start version: recorded (shadow), and it would not have needed
    # an approval (that version's ceiling), nor was it refused (that version's refund window)
    assert row.decision == "record" and row.result["would_need"] == "execute", row.result


def _refund_then_answer(on_first: Any) -> FunctionModel:
    """Searches the refund policy, then refunds $20 on O-1042, then answers; ``on_first`` runs
    while the turn is under way (after its run started, before the refund is proposed)."""

    async def fn(request: ModelRequest) -> Reply:
        called = [b.get("name") for m in request.messages if m.role == "assistant" for b in m.content]
        if "search_knowledge" not in called:
            return [tool_use_block("search_knowledge", {"query": "refund damaged"})]
        if "issue_refund" not in called:
            await on_first()
            return [tool_use_block("issue_refund", refund(amount=2000))]
        return "A colleague will carry out the refund."

    return FunctionModel(fn)


async def test_a_turn_spanning_an_apply_is_decided_under_its_start_version(any_db: Database) -> None:
    """A real apply (and its second supervisor) lands while the turn is running, and the
    refresher swaps it in: the turn's proposal is still recorded under the start version; the
    next conversation runs under the new one."""
    versions = PolicyVersions(any_db)
    start = _yaml(bundled_policy_dict(), version="2030.1.1", api_customer="shadow")
    full = _yaml(bundled_policy_dict(), version="2030.3.1", api_customer="full")
    refresher: list[PolicyRefresher] = []  # the refresher, then a mark once applied

    async def apply_full() -> None:
        if refresher[1:]:
            return  # once
        refresher.append(None)  # type: ignore[arg-type]
        active = await active_policy(versions, None)
        new = NewPolicyVersion(version="2030.3.1", yaml=full, applied_by="S-3", operator="t")
        done = await apply_policy(versions, active, new, source="full.yaml")
        await approve_policy(versions, active, done.row.id, approver="S-4", operator="t")
        assert await refresher[0].check() is True

    await _apply_start(versions, start)
    env = await make_env(
        any_db, model=_refund_then_answer(apply_full), policy=(await active_policy(versions, None)).policy
    )
    refresher.append(PolicyRefresher(versions, env.services.use_policy, seen_id=1))
    result = await env.runtime.chat(principal=C7, channel="api", message="O-1042 arrived damaged, refund $20 please")
    assert env.services.policy.version == "2030.3.1"
    async with any_db.reader() as s:
        run = (await s.execute(select(RunRow).where(RunRow.conversation_id == result.conversation_id))).scalar_one()
        props = (await s.execute(select(ProposalRow).where(ProposalRow.run_id == run.id))).scalars().all()
    assert run.policy_version == "2030.1.1"
    refund_row = next(p for p in props if p.tool == "issue_refund")
    assert refund_row.decision == "record"
    events, stamps = await _stamps(any_db, run.id)
    assert events == {"2030.1.1"} and stamps == {"2030.1.1"}
    # a run started after the apply is under the new version
    later = await env.runtime.chat(principal=C7, channel="api", message="hello again")
    async with any_db.reader() as s:
        later_run = (
            await s.execute(select(RunRow).where(RunRow.conversation_id == later.conversation_id))
        ).scalar_one()
    assert later_run.policy_version == "2030.3.1"


def _yaml(data: dict[str, Any], *, version: str, api_customer: str) -> str:
    import yaml

    data = {**data, "version": version}
    data["rollout"] = {**data["rollout"], "channels": {**data["rollout"]["channels"]}}
    data["rollout"]["channels"]["api"] = {**data["rollout"]["channels"]["api"], "customer": api_customer}
    return yaml.safe_dump(data, sort_keys=False)


async def _apply_start(versions: PolicyVersions, text: str) -> None:
    active = await active_policy(versions, None)
    done = await apply_policy(
        versions, active, NewPolicyVersion(version="2030.1.1", yaml=text, applied_by="S-3", operator="t"), source="s"
    )
    await approve_policy(versions, active, done.row.id, approver="S-4", operator="t")
