"""SIGKILL while `refundCreate` is in flight: the shop applies it after the process died; the
next process reconciles through `lookup_write` (reading the shop) and answers truthfully with
exactly one refund, never a second."""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

from agent.executor import Executor
from bot.app import shopify_backend
from sandbox.dataset import DEMO_DATASET_PATH, load_dataset_file
from storage.ledger import Ledger
from tests.catalogue_harness import REGISTRY, make_ctx
from tests.conftest import make_sqlite
from tests.crash.shopify_refund_driver import ARGS, PROPOSAL, RUN, refund_key
from tests.fakes.shopify.seed import seed_shop
from tests.fakes.shopify_api import FakeShopifyAPI, Fault
from tests.shopify_backend_kit import C7, CLIENT_ID, CLIENT_SECRET, config

DRIVER = Path(__file__).resolve().parent / "crash" / "shopify_refund_driver.py"


async def test_sigkill_while_refund_create_is_in_flight_gives_one_refund_and_a_truthful_answer(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    db = await make_sqlite(path)
    shop = seed_shop(load_dataset_file(DEMO_DATASET_PATH), rebase_to=datetime.now(UTC))
    async with FakeShopifyAPI(shop, client_id=CLIENT_ID, client_secret=CLIENT_SECRET) as api:
        hold = asyncio.Event()
        fault = api.inject(Fault(match="refundCreate", hold=hold))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(DRIVER), str(path), api.base_url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        try:
            await asyncio.wait_for(fault.arrived.wait(), timeout=60)  # the refund is in flight
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        hold.set()  # the shop applies it, though the caller is gone
        for _ in range(200):
            if shop.orders[1042].refunds:
                break
            await asyncio.sleep(0.05)
        backend = shopify_backend(config(api.base_url))
        try:
            held = await Ledger(db).get(refund_key())
            assert held is not None and held.status == "executing"  # the dead process's claim
            ctx = make_ctx(backend, C7, now=datetime.now(UTC))  # type: ignore[arg-type]
            outcome = await Executor(Ledger(db)).run(
                REGISTRY.tools["issue_refund"], ARGS, ctx, key=refund_key(), proposal_id=PROPOSAL, run_id=RUN
            )
            refunds = await backend.list_refunds(C7, order_id="#1042")
            assert outcome.is_error is False, outcome.result  # it happened, and we say so
            assert len(refunds) == 1 and refunds[0].amount_minor == 2000
            assert outcome.result["refund_id"] == refunds[0].id
            assert len(api.operations_named("refundCreate")) == 1  # never sent a second time
            settled = await Ledger(db).get(refund_key())
            assert settled is not None and settled.status == "succeeded"
        finally:
            await backend.client.close()
            await db.dispose()
