"""Database faults on PostgreSQL, for real, on a server the test starts itself (tests/pg_server.py).

Each fault lands on a confirmed 20.00 refund at the worst moment:

* a read-only window (``default_transaction_read_only`` on the database, sessions ended) opened
  exactly when ``settle`` starts, closed a second later;
* the settle's own connection terminated after its UPDATE, before its COMMIT;
* a fast restart of the server between the shop's write and the settle, down longer than the
  request's settle budget;
* a replica stopped (SIGSTOP) right after the shop's write, holding the conversation's lease;
  then continued, or killed;
* a worker started while the server is down.

After recovery, within :data:`RECOVERY_S` of the fault's end: exactly one refund, a ``succeeded``
ledger row, the confirmation's outcome the executed one (the click not used up: sending it again
answers the same outcome), the conversation told, and ``signoff audit verify`` passing.
Skipped without ``SIGNOFF_TEST_PG_URL`` or the server binaries.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import text

from agent import confirmations
from agent.errors import Unavailable
from agent.llm.testing import CompromisedModel
from agent.metrics import attach_metrics
from agent.notify import RecordingNotifier
from agent.reconcile import reconcile_stuck
from agent.runtime import Runtime
from agent.worker import Worker, WorkerConfig
from bot.app import sandbox_services
from sandbox.dataset import parse_dataset
from sandbox.io import load_dataset
from sandbox.store import SandboxStore
from storage.db import Database, create_database
from storage.jobs import JobQueue
from storage.ledger import Ledger
from tests.fault_kit import ask, assert_exactly_once_and_told, refund_env, refunds_of, told_in
from tests.gatekeeper_kit import C7, Clock, Env, base_dataset, ledger_rows
from tests.pg_fault_kit import (
    ROOT,
    audit_verifies,
    cli_env,
    cut_before_commit,
    fresh,
    lose_the_answer,
    read_only_during,
    signoff,
    start_later,
)
from tests.pg_server import PgServer, available, make_server, remove

pytestmark = [
    pytest.mark.skipif(available() is not None, reason=available() or ""),
    pytest.mark.asyncio(loop_scope="module"),
]

STOP_DRIVER = ROOT / "tests" / "crash" / "stop_driver.py"
#: Every fault is recovered from within this many seconds of its end.
RECOVERY_S = 10.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[PgServer]:
    s = await make_server()
    yield s
    await remove(s)


async def test_read_only_window_while_settle_runs(
    server: PgServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The database turns read-only the moment ``settle`` starts: the settle is tried again with
    backoff, gets through once the window closes, and the customer hears the executed outcome."""
    name, db = await fresh(server)
    try:
        env = await refund_env(db)
        metrics = attach_metrics(env.services)
        conv_id, conf_id = await ask(env)
        window = read_only_during(monkeypatch, server, name, Ledger, "settle")
        done = await asyncio.wait_for(env.runtime.confirm(conf_id, actor=C7, accept=True), timeout=RECOVERY_S)
        await window[0]
        assert done.result is not None and done.result["refund_id"], done
        assert 'signoff_database_errors_total{kind="read_only"}' in metrics.render().decode()
        await assert_exactly_once_and_told(env, conf_id, told_in(env, conv_id, answered=done.reply is not None))
        await audit_verifies(server.url(name), tmp_path)
    finally:
        await db.dispose()


async def test_connection_terminated_inside_settle(
    server: PgServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The settle's own session is terminated after its UPDATE and before its COMMIT: nothing of
    that transaction stays, the settle is made again, and the refund is recorded exactly once."""
    name, db = await fresh(server)
    try:
        env = await refund_env(db)
        conv_id, conf_id = await ask(env)
        cut = cut_before_commit(monkeypatch, db, Ledger, "settle")
        done = await asyncio.wait_for(env.runtime.confirm(conf_id, actor=C7, accept=True), timeout=RECOVERY_S)
        assert cut and done.result is not None and done.result["refund_id"], done
        await assert_exactly_once_and_told(env, conf_id, told_in(env, conv_id, answered=done.reply is not None))
        await audit_verifies(server.url(name), tmp_path)
    finally:
        await db.dispose()


@pytest.mark.parametrize("fault", ["cut", "answer_lost"])
async def test_confirm_cut_at_its_commit_is_sent_again(
    server: PgServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fault: str
) -> None:
    """The customer's confirm meets a fault at the COMMIT of its decision transaction (the
    answer, its proposal and its job): terminated before the COMMIT (nothing stays), or committed
    with the answer lost. Either way the confirm answers ``Unavailable`` having done nothing, the
    same click sent again is taken (not used up) and carried out, and the confirmation's job
    afterwards finds it done: exactly one refund."""
    name, db = await fresh(server)
    try:
        env = await refund_env(db)
        conv_id, conf_id = await ask(env)
        with monkeypatch.context() as patch:
            if fault == "cut":
                hit = cut_before_commit(patch, db, confirmations, "record")
            else:
                hit = lose_the_answer(patch, confirmations, "record")
            with pytest.raises(Unavailable):
                await env.runtime.confirm(conf_id, actor=C7, accept=True)
        assert hit and await refunds_of(db) == []
        again = await asyncio.wait_for(env.runtime.confirm(conf_id, actor=C7, accept=True), timeout=RECOVERY_S)
        assert again.result is not None and again.result["refund_id"], again
        env.clock.advance(timedelta(seconds=60))  # the confirmation's job, if its record committed
        await Worker(env.runtime).run_once()
        await assert_exactly_once_and_told(env, conf_id, told_in(env, conv_id, answered=again.reply is not None))
        await audit_verifies(server.url(name), tmp_path)
    finally:
        await db.dispose()


async def test_restart_between_the_effect_and_the_settle(
    server: PgServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The server restarts (fast shutdown) right after the shop's write, down for 2 s — longer
    than the request's settle budget: the confirm answers ``Unavailable`` (503), a background task
    settles the refund once the server is back, the worker's pass tells the customer, and the
    same click sent again answers the executed outcome (no second refund)."""
    name, db = await fresh(server)
    try:
        env = await refund_env(db)
        env.services.executor.settle_budget_s = 0.5
        conv_id, conf_id = await ask(env)
        original, restarts = SandboxStore.issue_refund, []

        async def write_then_restart(self: SandboxStore, *a: Any, **kw: Any) -> Any:
            result = await original(self, *a, **kw)
            await server.stop()
            restarts.append(asyncio.create_task(start_later(server, 2.0)))
            return result

        monkeypatch.setattr(SandboxStore, "issue_refund", write_then_restart)
        with pytest.raises(Unavailable):
            await env.runtime.confirm(conf_id, actor=C7, accept=True)
        await restarts[0]
        await asyncio.wait_for(env.services.executor.drain(), timeout=RECOVERY_S)
        assert [r["status"] for r in await ledger_rows(db)] == ["succeeded"]
        # Proposals are stamped with the real time, the bound is read on the runtime's clock.
        env.clock.advance(timedelta(seconds=180))
        await Worker(env.runtime, config=WorkerConfig(orphan_after_s=60)).reconcile()
        again = await env.runtime.confirm(conf_id, actor=C7, accept=True)
        assert again.result is not None and again.result["refund_id"] == (await refunds_of(db))[0]["id"]
        await assert_exactly_once_and_told(env, conf_id, told_in(env, conv_id))
        await audit_verifies(server.url(name), tmp_path)
    finally:
        await db.dispose()


async def test_worker_started_during_a_restart_comes_up(server: PgServer, tmp_path: Path) -> None:
    """``signoff worker`` started while the server is down waits (no "not migrated" exit) and
    runs the queued jobs once the server is back."""
    name, db = await fresh(server)
    await load_dataset(db, parse_dataset(base_dataset()))  # a store that needs no seeding
    job = await JobQueue(db).enqueue("confirmation", {"confirmation_id": "cnf_none"})
    assert job is not None
    await db.dispose()
    await server.stop()
    proc = await signoff(server.url(name), tmp_path, "worker")
    logs: asyncio.Task[bytes] | None = None
    try:
        assert proc.stderr is not None
        seen = b""
        while b"waiting for the database" not in seen:  # it met the outage and waits
            line = await asyncio.wait_for(proc.stderr.readline(), timeout=60)
            assert line, f"the worker exited: {seen.decode()[-2000:]}"
            seen += line
        logs = asyncio.create_task(proc.stderr.read())  # its logs never fill the pipe
        await server.start()
        db = create_database(server.url(name))
        try:
            deadline = asyncio.get_running_loop().time() + 30
            while (state := await JobQueue(db).get(job)) is None or state.status != "done":
                assert asyncio.get_running_loop().time() < deadline, state
                assert proc.returncode is None
                await asyncio.sleep(0.2)
        finally:
            await db.dispose()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), timeout=20)
        if logs is not None:
            await logs


async def test_stopped_replica_holding_the_lease(server: PgServer, tmp_path: Path) -> None:
    """A replica freezes (SIGSTOP) right after the shop's write, holding the conversation's lease:
    another replica's reconciliation leaves its claim alone (it may still finish). Continued, the
    replica finishes and answers; killed, its lease goes with its session and the pass settles the
    refund from the shop's record and tells the customer. Exactly one refund either way (the two
    replicas run at once, each on its own database)."""
    await asyncio.gather(_stopped_replica(server, tmp_path, "continued"), _stopped_replica(server, tmp_path, "killed"))


async def _stopped_replica(server: PgServer, tmp_root: Path, then: str) -> None:
    tmp_path = tmp_root / then  # each database its own checkpoint file
    tmp_path.mkdir()
    name, db = await fresh(server)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(STOP_DRIVER), server.url(name), env=cli_env(server.url(name), tmp_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        ids = json.loads(await asyncio.wait_for(proc.stdout.readline(), timeout=60))
        await _until_stopped(proc.pid)
        env = _replica(db)
        assert [r.result for r in await reconcile_stuck(env.runtime, older_than_s=60)] == ["held"], then
        assert len(await refunds_of(db)) == 1
        answered = False
        if then == "continued":
            os.kill(proc.pid, signal.SIGCONT)
            out, err = await asyncio.wait_for(proc.communicate(), timeout=RECOVERY_S)
            assert proc.returncode == 0, err.decode()[-2000:]
            answered = bool(json.loads(out.decode().strip().splitlines()[-1])["refund_id"])
        else:
            proc.kill()
            await proc.wait()
            assert [r.result for r in await reconcile_stuck(env.runtime, older_than_s=60)] == ["done"]
        told = told_in(env, ids["conversation_id"], answered=answered)
        await assert_exactly_once_and_told(env, ids["confirmation_id"], told)
        await audit_verifies(server.url(name), tmp_path)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await db.dispose()


def _replica(db: Database) -> Env:
    """Another replica over the same database, its clock past the reconciliation bound."""
    clock = Clock(datetime.now(UTC) + timedelta(seconds=120))
    notifier = RecordingNotifier()
    model = CompromisedModel(final_text="Please confirm.")
    services = sandbox_services(db=db, model=model, notifier=notifier, clock=clock)
    return Env(db=db, runtime=Runtime(services), services=services, notifier=notifier, clock=clock)


async def _until_stopped(pid: int) -> None:
    for _ in range(600):
        stat = await asyncio.to_thread(Path(f"/proc/{pid}/stat").read_text)
        if stat.rsplit(")", 1)[1].split()[0] == "T":
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the replica never stopped")


async def test_every_face_answers_503_during_an_outage_and_stores_nothing(server: PgServer) -> None:
    """With the database down, the API, the email webhook, Slack's events and Teams' messages
    answer 503 with ``Retry-After``; nothing is stored half-way, so the same deliveries sent again
    once it is back are accepted as new, once each."""
    from aiohttp.test_utils import TestClient, TestServer

    from bot.app import create_app
    from bot.email.parsing import sign
    from bot.server import make_web_app
    from bot.settings import load_settings
    from tests import slack_kit, teams_kit
    from tests.api_kit import EMAIL_SECRET, JWT_SECRET, bearer
    from tests.fakes.bot_connector import TokenIssuer
    from tests.fakes.slack_api import FakeSlackApi
    from tests.test_email_bridge import mail

    name, db = await fresh(server)
    await load_dataset(db, parse_dataset(base_dataset()))
    await db.dispose()
    connector = "http://127.0.0.1:9"
    async with TokenIssuer() as issuer, FakeSlackApi() as slack:
        env = {
            "SIGNOFF_DATABASE_URL": server.url(name),
            "SIGNOFF_ENV": "development",  # the local Teams token issuer is a development setting
            "SIGNOFF_LLM_PROVIDER": "scripted",
            "SIGNOFF_JWT_SECRET": JWT_SECRET,
            "SIGNOFF_EMAIL_SECRET": EMAIL_SECRET,
            "SLACK_BOT_TOKEN": slack_kit.BOT_TOKEN,
            "SLACK_SIGNING_SECRET": slack_kit.SIGNING_SECRET,
            "SIGNOFF_SLACK_API_URL": slack.base_url,
            **teams_kit.teams_env(issuer=issuer, connector_url=connector),
        }
        app = await create_app(load_settings(env))
        slack_body = slack_kit.event_body(slack_kit.mention("U0MAYA", "where is my order O-1042?"))
        teams_body = json.dumps(teams_kit.message(connector))
        email_body = mail("Where is my order?", message_id="<outage-1@example.com>")

        def deliveries() -> list[tuple[str, str | bytes, dict[str, str]]]:
            stamp = str(int(datetime.now(UTC).timestamp()))
            email_headers = {"X-Signoff-Timestamp": stamp, "X-Signoff-Signature": sign(EMAIL_SECRET, email_body, stamp)}
            return [
                (
                    "/api/chat",
                    json.dumps({"message": "Where is my order O-1042?"}),
                    {"Content-Type": "application/json", **bearer("C-7", "customer")},
                ),
                ("/email/inbound", email_body, {"Content-Type": "application/json", **email_headers}),
                ("/slack/events", slack_body, slack_kit.signed_headers(slack_body)),
                (
                    "/teams/messages",
                    teams_body,
                    {
                        "Content-Type": "application/json",
                        "Authorization": f"Bearer {teams_kit.token(issuer, connector)}",
                    },
                ),
            ]

        try:
            async with TestClient(TestServer(make_web_app(app))) as client:
                await server.stop()
                try:
                    for path, body, headers in deliveries():
                        response = await client.post(path, data=body, headers=headers)
                        assert response.status == 503, (path, response.status, await response.text())
                        assert response.headers.get("Retry-After", "").isdigit(), path
                        assert (await response.json())["error"] == "unavailable"
                finally:
                    await server.start()
                for path, body, headers in deliveries():
                    response = await client.post(path, data=body, headers=headers)
                    assert response.status < 300, (path, response.status, await response.text())
                    if path == "/email/inbound":
                        assert (await response.json())["status"] == "accepted"  # not a duplicate: nothing was kept
        finally:
            await app.close()
        check = create_database(server.url(name))
        try:
            assert await _inbound_count(check) == 3  # email, Slack, Teams: once each
        finally:
            await check.dispose()


async def _inbound_count(db: Database) -> int:
    async with db.engine.connect() as conn:
        return int((await conn.execute(text("SELECT count(*) FROM inbound"))).scalar_one())
