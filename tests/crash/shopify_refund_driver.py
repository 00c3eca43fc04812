"""Crash driver for the Shopify backend: a real process that executes one refund through the
ledger against a Shopify store (the test's fake) and is SIGKILLed by the test while
``refundCreate`` is in flight.

    python tests/crash/shopify_refund_driver.py DB_PATH ADMIN_URL

It prints ``claimed`` once the ledger holds the key, then waits on the store; it never settles.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.executor import Executor  # noqa: E402
from bot.app import shopify_backend  # noqa: E402
from storage.db import create_database  # noqa: E402
from storage.ledger import Ledger  # noqa: E402
from tests.catalogue_harness import REGISTRY, make_ctx  # noqa: E402
from tests.shopify_backend_kit import C7, config  # noqa: E402

ARGS = {
    "order_id": "#1042",
    "amount_minor": 2000,
    "currency": "USD",
    "reason_code": "damaged",
    "evidence": ["refund-policy@7#window"],
}
PROPOSAL, RUN = "prop-crash-1", "run-crash-1"


def refund_key() -> str:
    """The ledger key the catalogue derives for :data:`ARGS`."""
    tool = REGISTRY.tools["issue_refund"]
    assert tool.key is not None
    return tool.key(ARGS, make_ctx(None, C7))  # type: ignore[arg-type]


async def main(db_path: str, admin_url: str) -> None:
    db = create_database(f"sqlite+aiosqlite:///{db_path}")
    backend = shopify_backend(config(admin_url))
    ctx = make_ctx(backend, C7, now=datetime.now(UTC))  # type: ignore[arg-type]
    print("claimed", flush=True)
    await Executor(Ledger(db)).run(
        REGISTRY.tools["issue_refund"], ARGS, ctx, key=refund_key(), proposal_id=PROPOSAL, run_id=RUN
    )
    print("finished", flush=True)  # never reached: the test kills the process first


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
