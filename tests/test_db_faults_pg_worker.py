"""Recovery measured with a real ``signoff worker`` (its own process, on the test's own PostgreSQL
server): a confirmed refund is stranded ``executing`` by a dropped connection in this process
(alive: its claim is not a dead holder's), and the worker's periodic pass, with the bound and the
period set (``SIGNOFF_RECONCILE_AFTER_S``, ``SIGNOFF_RECONCILE_EVERY_S``), settles it from the
shop's record and tells the conversation within the bound plus one period; its own ``/metrics``
(``SIGNOFF_METRICS_PORT``) counts the reconciliation."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from agent.errors import Unavailable
from tests.fault_kit import ask, assert_exactly_once_and_told, refund_env, refund_fault, told_in
from tests.gatekeeper_kit import C7, Env, ledger_rows
from tests.pg_fault_kit import audit_verifies, fresh, signoff
from tests.pg_server import PgServer, available, make_server, remove

pytestmark = [
    pytest.mark.skipif(available() is not None, reason=available() or ""),
    pytest.mark.asyncio(loop_scope="module"),
]

#: The bound and the period the worker runs with here (the defaults are 60 s and 10 s).
AFTER_S, EVERY_S = 3.0, 0.5
#: Slack for a loaded CI machine on top of the bound and one period.
SLACK_S = 3.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[PgServer]:
    s = await make_server()
    yield s
    await remove(s)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as r:
        return r.status, await r.text()


async def _until_up(url: str, proc: asyncio.subprocess.Process) -> None:
    for _ in range(600):
        assert proc.returncode is None, "the worker exited"
        try:
            if (await _get(url))[0] == 200:
                return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError("the worker's metrics never answered")


async def _recovered(env: Env, conf_id: str, told: Callable[[str], Awaitable[bool]]) -> bool:
    """The claim settled, the confirmation's outcome stored and the conversation told."""
    rows = await ledger_rows(env.db)
    if [r["status"] for r in rows] != ["succeeded"]:
        return False
    conf = await env.services.confirmations.get(conf_id)
    return conf is not None and conf.outcome is not None and await told(rows[0]["result"]["refund_id"])


async def test_a_running_worker_recovers_a_stranded_claim_within_the_bound(server: PgServer, tmp_path: Path) -> None:
    name, db = await fresh(server)
    env = await refund_env(db)
    port = _free_port()
    settings = {
        "SIGNOFF_RECONCILE_AFTER_S": str(AFTER_S),
        "SIGNOFF_RECONCILE_EVERY_S": str(EVERY_S),
        "SIGNOFF_METRICS_PORT": str(port),
    }
    proc = await signoff(server.url(name), tmp_path, "worker", env=settings)
    logs: asyncio.Task[bytes] | None = None
    try:
        assert proc.stderr is not None
        logs = asyncio.create_task(proc.stderr.read())  # its logs never fill the pipe
        await _until_up(f"http://127.0.0.1:{port}/healthz", proc)
        env.clock.now = datetime.now(UTC)
        conv_id, conf_id = await ask(env)
        env.clock.now = datetime.now(UTC)  # the claim is stamped now, on the worker's clock (asking took a while)
        stranded_at = time.monotonic()
        with refund_fault(after_effect=True), pytest.raises(Unavailable):
            await env.runtime.confirm(conf_id, actor=C7, accept=True)
        told = told_in(env, conv_id, answered=True)
        while not await _recovered(env, conf_id, told):
            assert time.monotonic() - stranded_at < AFTER_S + EVERY_S + SLACK_S, "not recovered within the bound"
            await asyncio.sleep(0.05)
        recovered_s = time.monotonic() - stranded_at
        print(f"settled and told {recovered_s:.2f} s after the fault (bound {AFTER_S:g} s, every {EVERY_S:g} s)")
        assert recovered_s >= AFTER_S - 0.5, recovered_s  # not before the bound: a live holder may still finish
        await assert_exactly_once_and_told(env, conf_id, told)
        status, text = await _get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert 'signoff_reconciliations_total{result="done"} 1.0' in text, text[-2000:]
        assert "signoff_ledger_stuck 0.0" in text
        await audit_verifies(server.url(name), tmp_path)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), timeout=20)
        if logs is not None:
            await logs
        await db.dispose()
