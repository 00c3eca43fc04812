"""Crash driver: a real process that confirms an action and SIGKILLs itself mid-way.

    python tests/crash/refund_driver.py DB_PATH

Environment:

* ``SIGNOFF_CRASH_AT`` — where the process dies during the confirmed execution:
  ``before_claim`` (before the ledger insert), ``after_claim`` (the ledger row is
  committed, the downstream not called), ``after_downstream`` (the store's write is
  committed, the ledger not settled), ``after_settle`` (the ledger holds the result,
  the turn has not recorded it), or ``never``.
* ``SIGNOFF_CRASH_TOOL`` — ``issue_refund`` (retryable) or ``retry_payment`` (not).
* ``SIGNOFF_CRASH_PATH`` — ``confirm`` (the HTTP API's confirm call) or ``chat`` (a
  "yes" reply in the conversation).

The kill points are injected here by wrapping ``Ledger.claim``, the store's write and
``Ledger.settle`` — production code is not edited for the test. Before confirming, the
driver prints one JSON line with the conversation and confirmation ids.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.llm.testing import CompromisedModel  # noqa: E402
from sandbox.store import SandboxStore  # noqa: E402
from storage.ledger import Ledger  # noqa: E402
from tests.conftest import make_sqlite  # noqa: E402
from tests.gatekeeper_kit import C7, EVIDENCE, make_env  # noqa: E402

#: The confirmed action each tool's scenario performs (under every ceiling).
ACTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "issue_refund": (
        "billing",
        {
            "order_id": "O-1042",
            "amount_minor": 2000,
            "currency": "USD",
            "reason_code": "damaged",
            "evidence": [EVIDENCE],
        },
    ),
    "retry_payment": ("billing", {"order_id": "O-1046"}),
}


def request_text(tool: str) -> str:
    group, args = ACTIONS[tool]
    calls = [("load_tools", {"group": group}), ("search_knowledge", {"query": "refund window damaged"}), (tool, args)]
    return "Please help. " + " ".join(f"[[CALL {name} {json.dumps(a)}]]" for name, a in calls)


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str, tool: str) -> None:
    """Install the kill point (only the confirmed execution reaches these calls)."""
    if point == "before_claim":

        async def claim_then_never(self: Ledger, **kw: Any) -> Any:
            die()

        Ledger.claim = claim_then_never  # type: ignore[method-assign]
    elif point == "after_claim":
        claim = Ledger.claim

        async def claim_then_die(self: Ledger, **kw: Any) -> Any:
            held = await claim(self, **kw)
            if held is None:
                die()
            return held

        Ledger.claim = claim_then_die  # type: ignore[method-assign]
    elif point == "after_downstream":
        write = getattr(SandboxStore, tool)

        async def write_then_die(self: SandboxStore, *a: Any, **kw: Any) -> Any:
            await write(self, *a, **kw)
            die()

        setattr(SandboxStore, tool, write_then_die)
    elif point == "after_settle":
        settle = Ledger.settle

        async def settle_then_die(self: Ledger, key: str, **kw: Any) -> Any:
            await settle(self, key, **kw)
            die()

        Ledger.settle = settle_then_die  # type: ignore[method-assign]
    elif point != "never":
        raise SystemExit(f"unknown SIGNOFF_CRASH_AT {point!r}")


async def main(db_path: Path) -> int:
    point = os.environ.get("SIGNOFF_CRASH_AT", "never")
    tool = os.environ.get("SIGNOFF_CRASH_TOOL", "issue_refund")
    path = os.environ.get("SIGNOFF_CRASH_PATH", "confirm")
    db = await make_sqlite(db_path)
    env = await make_env(db, model=CompromisedModel(final_text="Please confirm."))
    first = await env.runtime.chat(principal=C7, channel="api", message=request_text(tool))
    pending = [p for p in first.pending if p.kind == "confirmation"]
    assert len(pending) == 1, first
    print(json.dumps({"conversation_id": first.conversation_id, "confirmation_id": pending[0].id}), flush=True)
    arm(point, tool)
    if path == "chat":
        await env.runtime.chat(principal=C7, channel="api", message="yes", conversation_id=first.conversation_id)
    else:
        await env.runtime.confirm(pending[0].id, actor=C7, accept=True)
    await db.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(Path(sys.argv[1]))))
