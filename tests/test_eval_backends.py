"""The bundled eval suites give the same outcomes on the sandbox and on the Shopify backend (issue 21).

The Shopify runs go through the real ``ShopifyBackend`` and GraphQL client to the strict fake
Admin API, reset per run to a store seeded from the case's dataset (``bot/shopify/evaluation.py``)
and judged from the store read back as a dataset. A case that needs a tool Shopify does not offer
is reported as not applicable, and that list is pinned here. ``send_message`` is offered: the
evaluation's stores send through an in-memory sender read back as the dataset's outbox.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

import pytest

from agent.evaluation.fixtures import Clock, RunShop, Template
from agent.evaluation.judge import DIMENSIONS
from agent.evaluation.report import Report
from agent.evaluation.runner import EvalOptions, load_suites, run_suites
from bot.shopify.evaluation import ShopifyShops
from sandbox.dataset import DEMO_DATASET_PATH, load_dataset_file
from shopify.dataset_ids import key_to_dataset, key_to_shop, to_dataset, to_shop
from storage.db import Database
from tests.fakes.shopify_api import FakeShopifyAPI, Fault
from tests.shopify_backend_kit import CLIENT_ID, CLIENT_SECRET, config

#: The bundled cases Shopify cannot run, and why (the tools it does not offer).
NOT_ON_SHOPIFY = {
    ("adversarial", "knowledge-injection-update-contact-details"): ("send_password_reset",),
    ("adversarial", "cross-account-returns-and-invoices"): ("get_invoices",),
    ("adversarial", "reset-link-to-typed-address"): ("send_password_reset",),
    ("support", "payment-failed-retried"): ("retry_payment",),
    ("support", "payment-failed-declined-retry"): ("retry_payment",),
    ("support", "password-reset-to-email-on-file"): ("send_password_reset",),
}


def outcomes(report: Report) -> dict[tuple[str, str], tuple[object, ...]]:
    """Per case: pass^k, each dimension's passing runs, harmful findings, the tools proposed."""
    return {
        (c.suite, c.case): (
            c.passed,
            tuple(c.dim_runs(d) for d in DIMENSIONS),
            c.harmful,
            tuple(tuple(t for t, _ in r.tools) for r in c.runs),
            c.problems(),
        )
        for c in report.cases
    }


@pytest.fixture
async def shops() -> AsyncIterator[ShopifyShops]:
    async with FakeShopifyAPI(client_id=CLIENT_ID, client_secret=CLIENT_SECRET) as api:
        shops = ShopifyShops([config(api.base_url)])
        try:
            yield shops
        finally:
            await shops.aclose()
        assert api.operations and api.invalid_operations == []


@pytest.mark.bundled_eval
async def test_bundled_suites_have_the_same_outcomes_on_both_backends(shops: ShopifyShops) -> None:
    suites = load_suites([])
    options = EvalOptions(model="scripted", runs=2, workers=1)
    on_shopify = await run_suites(suites, options, shops=shops)
    on_sandbox = await run_suites(suites, options)
    assert {(s, c): t for s, c, t in on_shopify.not_offered} == NOT_ON_SHOPIFY
    assert on_sandbox.not_offered == ()
    sandbox = {k: v for k, v in outcomes(on_sandbox).items() if k not in NOT_ON_SHOPIFY}
    assert outcomes(on_shopify) == sandbox
    assert on_shopify.exit_code == on_sandbox.exit_code == 0, on_shopify.table()
    assert on_shopify.harmful_outcomes == on_sandbox.harmful_outcomes == 0
    assert len(on_shopify.cases) == len(sandbox) > 60


@pytest.mark.bundled_eval
async def test_the_support_suite_with_the_demo_planner_on_both_backends(shops: ShopifyShops) -> None:
    """The demo planner (``signoff eval support --model demo``, what ``signoff demo`` plays)."""
    suites = load_suites(["support"])
    options = EvalOptions(model="demo", runs=1, workers=1)
    on_shopify = await run_suites(suites, options, shops=shops)
    on_sandbox = await run_suites(suites, options)
    sandbox = {k: v for k, v in outcomes(on_sandbox).items() if k not in NOT_ON_SHOPIFY}
    assert outcomes(on_shopify) == sandbox
    assert on_shopify.exit_code == 0 and on_shopify.harmful_outcomes == 0, on_shopify.table()


def test_dataset_ids_map_both_ways() -> None:
    """Every id of the bundled dataset maps to the store's form and back to itself."""
    ds = load_dataset_file(DEMO_DATASET_PATH)
    pairs = (
        [(c.id, "C") for c in ds.customers]
        + [(o.id, "O") for o in ds.orders]
        + [(p.id, "P") for p in ds.payments]
        + [(r.id, "R") for r in ds.refunds]
        + [(r.id, "RT") for r in ds.returns]
    )
    assert all(to_dataset(to_shop(ident, kind)) == ident for ident, kind in pairs)
    assert to_shop("O-1042", "O") == "#1042" and to_shop("C-7", "C") == "gid://shopify/Customer/7"
    assert to_shop("1042", "O") == to_shop("C-7", "O") == to_shop("O-1042 ", "O") == "unknown"
    key = "refund:O-1042:5000:USD:RT-2001"
    assert key_to_shop(key, "O") == "refund:#1042:5000:USD:RT-2001"
    assert key_to_dataset(key_to_shop(key, "O")) == key
    contact = "contact:C-7:abc"
    assert key_to_shop(contact, "C") == "contact:gid://shopify/Customer/7:abc"
    assert key_to_dataset(key_to_shop(contact, "C")) == contact


@dataclass
class RefundAppliedThen502:
    """Each run's store answers its first ``refundCreate`` with a 502 after applying it."""

    inner: ShopifyShops
    api: FakeShopifyAPI

    @property
    def lanes(self) -> int:
        return self.inner.lanes

    @property
    def supported(self) -> frozenset[str] | None:
        return self.inner.supported

    async def open(self, template: Template, *, db: Database, clock: Clock, epoch: datetime) -> RunShop:
        shop = await self.inner.open(template, db=db, clock=clock, epoch=epoch)
        self.api.inject(Fault(match="refundCreate", status=502, after_apply=True))
        return shop

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_502_after_the_store_refunded_gives_one_refund_and_a_truthful_reply() -> None:
    """The customer confirms a refund; the store applies it and answers 502. The ledger reconciles
    by reading the store: the case passes as on the sandbox (one refund of 30.00 USD, the reply
    says so with the refund's id, nothing claimed that did not run), and no second refundCreate."""
    (support,) = load_suites(["support"])
    case = next(c for c in support.cases if c.id == "refund-under-ceiling")
    async with FakeShopifyAPI(client_id=CLIENT_ID, client_secret=CLIENT_SECRET) as api:
        shops = RefundAppliedThen502(ShopifyShops([config(api.base_url)]), api)
        try:
            report = await run_suites([support.model_copy(update={"cases": [case]})], EvalOptions(runs=1), shops=shops)
        finally:
            await shops.aclose()
        assert len(api.operations_named("refundCreate")) == 1
        assert [r.total_minor for r in api.shop.orders[1042].refunds] == [3000]  # exactly one, in the store
    assert report.exit_code == 0 and report.harmful_outcomes == 0, report.table()
    (run,) = report.cases[0].runs
    assert "30.00 USD" in run.final_reply and "R-9" in run.final_reply
