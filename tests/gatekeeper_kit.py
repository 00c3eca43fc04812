"""Shared helpers for the gatekeeper, scope, splitting, injection and crash tests.

A small hand-written dataset (fast to load, every fixture placed on purpose),
a runtime over it, and ``judge`` — one proposal through the real gatekeeper
with the real repositories, without a model.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml
from sqlalchemy import select

from agent import steps
from agent.decisions import Decision
from agent.gatekeeper import Proposed, args_hash
from agent.llm.base import ModelClient
from agent.notify import RecordingNotifier
from agent.policy import Policy, parse_policy
from agent.runtime import Runtime
from agent.services import Services
from agent.turn import Turn
from bot.app import sandbox_services
from sandbox.dataset import parse_dataset
from sandbox.io import export_dataset, load_dataset
from storage.db import Database
from storage.models import ToolExecutionRow
from tools.context import LOADABLE_GROUPS, Principal

AS_OF = datetime(2025, 6, 10, 12, 0, tzinfo=UTC)

C7 = Principal(kind="customer", id="C-7", customer_id="C-7")
C8 = Principal(kind="customer", id="C-8", customer_id="C-8")
REP = Principal(kind="rep", id="S-1", customer_id="C-7")
SUP = Principal(kind="supervisor", id="S-3", customer_id="C-7")
SUP_B = Principal(kind="supervisor", id="S-4", customer_id="C-7")
SYSTEM = Principal(kind="system", id="worker", customer_id="C-7")

ADDRESS = {"line1": "1 Main St", "city": "Springfield", "postal_code": "12345", "country": "US"}
EVIDENCE = "refund-policy@7#window"
CANCEL_EVIDENCE = "cancellation-policy@3#unshipped"
CONTACT_EVIDENCE = "account-security@2#contact-change"

#: Personal data of customers other than C-7: must never reach C-7's principal.
FOREIGN_MARKERS = (
    "O-1050",
    "O-1051",
    "O-1060",
    "Jonas",
    "Weber",
    "jonas.weber@example.de",
    "Eve Mallory",
    "eve@example.net",
    "RT-50",
    "INV-3001",
    "+4930123456",
)


def _t(delta: timedelta) -> str:
    return (AS_OF - delta).isoformat().replace("+00:00", "Z")


D, H = timedelta(days=1), timedelta(hours=1)


def _order(
    oid: str,
    cust: str,
    status: str,
    total: int,
    placed: timedelta,
    *,
    delivered: timedelta | None = None,
    currency: str = "USD",
    sku: str = "SKU-1",
    notes: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": oid,
        "customer_id": cust,
        "status": status,
        "currency": currency,
        "total_minor": total,
        "placed_at": _t(placed),
        "items": [{"sku": sku, "name": f"Item {sku}", "qty": 1, "unit_minor": total}],
        "shipping_address": ADDRESS,
    }
    if delivered is not None:
        out["delivered_at"] = _t(delivered)
    if notes is not None:
        out["notes"] = notes
    return out


def _pay(
    pid: str, oid: str, amount: int, placed: timedelta, status: str = "captured", currency: str = "USD"
) -> dict[str, Any]:
    return {
        "id": pid,
        "order_id": oid,
        "amount_minor": amount,
        "currency": currency,
        "status": status,
        "created_at": _t(placed - timedelta(minutes=5)),
    }


def base_dataset() -> dict[str, Any]:
    """C-7 (the bound customer) with orders in every state; C-8 and C-9 are strangers."""
    return {
        "as_of": AS_OF.isoformat().replace("+00:00", "Z"),
        "customers": [
            {
                "id": "C-7",
                "name": "Maya Chen",
                "email": "maya.chen@example.com",
                "phone": "+14155550123",
                "address": ADDRESS,
                "slack_user_id": "U07MAYA",
                "payment_methods": [
                    {"id": "pm-1", "brand": "visa", "last4": "4242", "exp_month": 12, "exp_year": 2030}
                ],
            },
            {"id": "C-8", "name": "Jonas Weber", "email": "jonas.weber@example.de", "phone": "+4930123456"},
            {"id": "C-9", "name": "Eve Mallory", "email": "eve@example.net"},
        ],
        "orders": [
            _order("O-1042", "C-7", "DELIVERED", 18900, 9 * D, delivered=5 * D, sku="BOOT-W8"),
            _order("O-1043", "C-7", "DELIVERED", 4200, 70 * D, delivered=64 * D, sku="SOCK-3"),
            _order("O-1044", "C-7", "PAID", 5300, 20 * H, sku="HAT-SUN"),
            _order("O-1045", "C-7", "SHIPPED", 8100, 3 * D, sku="LAMP-HD"),
            _order("O-1046", "C-7", "PENDING", 6900, 26 * H, sku="STV-CMP"),
            _order("O-1048", "C-7", "DELIVERED", 129900, 8 * D, delivered=3 * D, sku="ESP-PRO"),
            _order("O-1049", "C-7", "DELIVERED", 30000, 6 * D, delivered=2 * D, sku="TNT-2P"),
            _order("O-1050", "C-8", "DELIVERED", 24900, 20 * D, delivered=14 * D, currency="EUR", sku="JKT-DWN"),
            _order("O-1051", "C-8", "PAID", 3400, 30 * H, currency="EUR", sku="BTL-750"),
            _order("O-1060", "C-9", "DELIVERED", 27900, 15 * D, delivered=11 * D, sku="BINO-10"),
        ],
        "payments": [
            _pay("P-1042", "O-1042", 18900, 9 * D),
            _pay("P-1043", "O-1043", 4200, 70 * D),
            _pay("P-1044", "O-1044", 5300, 20 * H),
            _pay("P-1045", "O-1045", 8100, 3 * D),
            _pay("P-1046", "O-1046", 6900, 26 * H, status="failed"),
            _pay("P-1048", "O-1048", 129900, 8 * D),
            _pay("P-1049", "O-1049", 30000, 6 * D),
            _pay("P-1050", "O-1050", 24900, 20 * D, currency="EUR"),
            _pay("P-1051", "O-1051", 3400, 30 * H, currency="EUR"),
            _pay("P-1060", "O-1060", 27900, 15 * D),
        ],
        "returns": [
            {
                "id": "RT-50",
                "order_id": "O-1050",
                "items": [{"sku": "JKT-DWN", "qty": 1}],
                "status": "requested",
                "created_at": _t(2 * D),
            },
        ],
        "invoices": [
            {"id": "INV-2001", "order_id": "O-1042", "amount_minor": 18900, "currency": "USD", "issued_at": _t(9 * D)},
            {"id": "INV-3001", "order_id": "O-1050", "amount_minor": 24900, "currency": "EUR", "issued_at": _t(20 * D)},
        ],
        "knowledge": [
            {
                "id": "refund-policy",
                "version": 7,
                "kind": "policy",
                "title": "Refund policy",
                "sections": [
                    {
                        "id": "window",
                        "text": "Refunds for delivered orders are possible within the "
                        "refund window after delivery, for damaged items.",
                    },
                    {"id": "damaged", "text": "Damaged or defective items are refunded in full."},
                ],
            },
            {
                "id": "cancellation-policy",
                "version": 3,
                "kind": "policy",
                "title": "Cancellation policy",
                "sections": [{"id": "unshipped", "text": "Orders can be cancelled until they ship."}],
            },
            {
                "id": "account-security",
                "version": 2,
                "kind": "policy",
                "title": "Account security",
                "sections": [
                    {
                        "id": "contact-change",
                        "text": "Contact details change only after staff verified the account holder's identity.",
                    }
                ],
            },
        ],
        "staff": [
            {"id": "S-1", "name": "Priya Raman", "role": "rep", "slack_user_id": "U01PRIYA"},
            {"id": "S-2", "name": "Tomas Ortega", "role": "rep"},
            {"id": "S-3", "name": "Grace Liu", "role": "supervisor", "slack_user_id": "U03GRACE"},
            {"id": "S-4", "name": "Owen Baptiste", "role": "supervisor"},
        ],
    }


# -- policy ------------------------------------------------------------------------------------


def bundled_policy_dict() -> dict[str, Any]:
    from importlib import resources

    text = resources.files("agent").joinpath("data/policy.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in changes.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def policy_with(**changes: Any) -> Policy:
    """The bundled policy with ``changes`` deep-merged in, parsed like a policy file."""
    return parse_policy(yaml.safe_dump(_merge(bundled_policy_dict(), changes)), source="test")


# -- the runtime -------------------------------------------------------------------------------


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now = self.now + delta


@dataclass(frozen=True, kw_only=True)
class Env:
    db: Database
    runtime: Runtime
    services: Services
    notifier: RecordingNotifier
    clock: Clock


class NoModel:
    """A model that must not be called (gate unit tests never run the loop)."""

    model_name = "none"

    async def complete(self, request: Any) -> Any:
        raise AssertionError("the gate tests never call a model")


async def make_env(
    db: Database,
    *,
    model: ModelClient | None = None,
    policy: Policy | None = None,
    dataset: dict[str, Any] | None = None,
    clock: Clock | None = None,
) -> Env:
    clock = clock or Clock(datetime.now(UTC).replace(microsecond=0))
    await load_dataset(db, parse_dataset(dataset or base_dataset()), rebase_to=clock.now)
    notifier = RecordingNotifier()
    services = sandbox_services(
        db=db,
        model=model or NoModel(),
        policy=policy,
        notifier=notifier,  # type: ignore[arg-type]
        clock=clock,
    )
    return Env(db=db, runtime=Runtime(services), services=services, notifier=notifier, clock=clock)


async def gate_turn(
    env: Env, principal: Principal, *, channel: str = "api", groups: tuple[str, ...] = LOADABLE_GROUPS
) -> Turn:
    """A turn in a fresh conversation of ``principal`` with ``groups`` loaded."""
    rt = env.runtime
    conv = await rt.open_conversation(principal=principal, channel=channel)
    turn = await rt.turn(conv, rt.acting_principal(conv, principal))
    turn.facts.loaded_groups = set(groups)
    return turn


def proposed(tool: str, args: Any) -> Proposed:
    return Proposed(tool=tool, args=args, hash=args_hash(tool, args))


async def judge(env: Env, turn: Turn, tool: str, args: Any, **kw: Any) -> Decision:
    """One proposal through the real gatekeeper (no side effects)."""
    return await env.services.gatekeeper.judge(proposed(tool, args), turn.facts, steps.tool_context(turn), **kw)


async def confirm_exact(env: Env, turn: Turn, tool: str, args: dict[str, Any]) -> str:
    """Record that the turn's principal confirmed exactly ``tool(args)``; returns the confirmation id."""
    from agent import gates
    from agent.decisions import NeedsConfirmation

    p = proposed(tool, args)
    t = env.services.registry.tools[tool]
    asked = NeedsConfirmation(summary=t.describe(args), target=t.target_of(args), key=None)
    conf = (await gates.request_confirmation(turn, p, "prop_test", asked)).confirmation
    await turn.commit(turn.step())  # a confirmation is stored with the turn's next step
    moved = await env.services.confirmations.transition(
        conf.id, expected_version=conf.version, from_status="pending", to_status="confirmed", at=env.clock()
    )
    assert moved is not None
    return conf.id


async def retrieve(turn: Turn, *evidence: str) -> None:
    """As if search_knowledge had returned these evidence ids in this run."""
    turn.facts.knowledge_ids.update(evidence)


def refund(
    order_id: str = "O-1042",
    amount: int = 2000,
    *,
    currency: str = "USD",
    evidence: tuple[str, ...] = (EVIDENCE,),
    **extra: Any,
) -> dict[str, Any]:
    args: dict[str, Any] = {
        "order_id": order_id,
        "amount_minor": amount,
        "currency": currency,
        "reason_code": "damaged",
        **extra,
    }
    if evidence:
        args["evidence"] = list(evidence)
    return args


# -- what happened -----------------------------------------------------------------------------


async def store_state(db: Database) -> dict[str, Any]:
    """The sandbox store as a dataset (refunds, outbox, orders…)."""
    return await export_dataset(db)


async def ledger_rows(db: Database) -> list[dict[str, Any]]:
    async with db.sessions() as s:
        rows = (await s.execute(select(ToolExecutionRow))).scalars().all()
        return [{"key": r.key, "tool": r.tool, "status": r.status, "result": r.result} for r in rows]


async def audit_ok(env: Env) -> None:
    """The chain verifies and every persisted proposal has a gate event."""
    verdict = await env.services.audit.verify()
    assert verdict.ok, verdict
    events = await env.services.audit.list(limit=100_000)
    proposals = {e.proposal_id for e in events if e.kind == "proposal"}
    gated = {e.proposal_id for e in events if e.kind.startswith("gate.")}
    assert proposals <= gated, f"proposals without a gate event: {sorted(proposals - gated)}"


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
