"""Stop driver: a replica that stops (SIGSTOP) right after a confirmed refund's write, holding
the conversation's lease and an ``executing`` ledger claim.

    python tests/crash/stop_driver.py DATABASE_URL

The database at ``DATABASE_URL`` has the tables and nothing else; the driver loads the shop,
asks for the refund, prints one JSON line with the conversation and confirmation ids, confirms
and stops itself after the shop's write committed. Continued (SIGCONT), it finishes the confirm
and prints a second JSON line with the refund id it was told.
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
from storage.db import create_database  # noqa: E402
from tests.crash.refund_driver import request_text  # noqa: E402
from tests.gatekeeper_kit import C7, make_env  # noqa: E402


async def main(url: str) -> int:
    db = create_database(url)
    env = await make_env(db, model=CompromisedModel(final_text="Please confirm."))
    first = await env.runtime.chat(principal=C7, channel="api", message=request_text("issue_refund"))
    pending = [p for p in first.pending if p.kind == "confirmation"]
    print(json.dumps({"conversation_id": first.conversation_id, "confirmation_id": pending[0].id}), flush=True)
    write = SandboxStore.issue_refund

    async def write_then_stop(self: SandboxStore, *a: Any, **kw: Any) -> Any:
        result = await write(self, *a, **kw)
        os.kill(os.getpid(), signal.SIGSTOP)  # the replica freezes holding the lease
        return result

    SandboxStore.issue_refund = write_then_stop  # type: ignore[method-assign]
    done = await env.runtime.confirm(pending[0].id, actor=C7, accept=True)
    print(json.dumps({"refund_id": (done.result or {}).get("refund_id"), "reply": done.reply}), flush=True)
    await db.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(sys.argv[1])))
