"""The catalogue against the bundled demo dataset: every read works for every
customer, ids the store returns fit the tool schemas, and the injected names
and notes of the demo arrive wrapped as untrusted data (C3, C11, S7)."""

from __future__ import annotations

import json
import re
from typing import Any

from sandbox.dataset import DEMO_DATASET_PATH, load_dataset_file
from sandbox.io import load_dataset
from sandbox.store import SandboxStore
from storage.db import Database
from tests.catalogue_harness import call, make_ctx
from tools.schemas import EVIDENCE_ID_PATTERN


async def _demo(db: Database) -> tuple[SandboxStore, Any]:
    data = load_dataset_file(DEMO_DATASET_PATH)
    await load_dataset(db, data)
    assert data.as_of is not None
    return SandboxStore(db, clock=lambda: data.as_of), data


def _untrusted_texts(value: Any) -> list[str]:
    if isinstance(value, dict):
        if "untrusted_data" in value:
            return [value["untrusted_data"]["text"]]
        return [t for v in value.values() for t in _untrusted_texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _untrusted_texts(v)]
    return []


def _plain_texts(value: Any) -> list[str]:
    if isinstance(value, dict):
        if "untrusted_data" in value:
            return []
        return [t for v in value.values() for t in _plain_texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _plain_texts(v)]
    return [value] if isinstance(value, str) else []


async def test_every_read_tool_works_for_every_demo_customer(db: Database) -> None:
    """Reads succeed, are JSON, and every id they return is accepted by the schemas."""
    store, data = await _demo(db)
    for customer in data.customers:
        ctx = make_ctx(store, customer.id, now=data.as_of)
        results: list[dict[str, Any]] = [
            await call(name, {}, ctx)
            for name in (
                "get_account",
                "list_payment_methods",
                "list_orders",
                "list_returns",
                "get_invoices",
                "list_payments",
            )
        ]
        for order in results[2]["orders"]:
            oid = order["order_id"]
            results += [
                await call("get_order", {"order_id": oid}, ctx),
                await call("track_shipment", {"order_id": oid}, ctx),
                await call("list_payments", {"order_id": oid}, ctx),
            ]
        for ret in results[3]["returns"]:
            results.append(await call("get_return", {"return_id": ret["return_id"]}, ctx))
        for inv in results[4]["invoices"]:
            results.append(await call("get_invoices", {"invoice_id": inv["invoice_id"]}, ctx))
        json.dumps(results)
        assert not [r for r in results if "error" in r], customer.id


async def test_every_demo_knowledge_section_is_citable(db: Database) -> None:
    """Evidence ids of the demo knowledge fit the pattern issue_refund's evidence accepts."""
    store, data = await _demo(db)
    ctx = make_ctx(store, "C-7", now=data.as_of)
    seen: set[str] = set()
    for doc in data.knowledge:
        out = await call("search_knowledge", {"query": doc.title}, ctx)
        seen |= {h["evidence_id"] for h in out["hits"]}
    assert seen
    assert all(re.fullmatch(EVIDENCE_ID_PATTERN, e) for e in seen)


async def test_demo_injections_only_ever_appear_inside_untrusted_data(db: Database) -> None:
    """The demo's injected names and notes never reach the model outside the wrapper (S7)."""
    store, data = await _demo(db)
    marker = "[[CALL"
    hits = 0
    for customer in data.customers:
        ctx = make_ctx(store, customer.id, now=data.as_of)
        results = [await call("get_account", {}, ctx)]
        listing = await call("list_orders", {}, ctx)
        results += [await call("get_order", {"order_id": o["order_id"]}, ctx) for o in listing["orders"]]
        assert not [t for t in _plain_texts(results) if marker in t], customer.id
        hits += sum(marker in t for t in _untrusted_texts(results))
    assert hits >= 1
