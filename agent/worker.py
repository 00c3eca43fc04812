"""The worker: resume jobs, the expiry sweep, and crash recovery.

Safe with several workers on one database: jobs are claimed with ``SKIP
LOCKED`` (PostgreSQL) or an atomic ``UPDATE … RETURNING`` (SQLite), approval
transitions are compare-and-set, and every write goes through the ledger.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta

from agent.approvals import RESUME_JOB
from agent.loop import run_loop
from agent.runtime import Runtime
from storage.records import LedgerEntry

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    poll_s: float = 0.5
    expiry_every_s: float = 30.0
    #: An ``executing`` ledger entry older than this is presumed orphaned by a crash.
    orphan_after_s: float = 60.0
    batch: int = 10


class Worker:
    def __init__(self, runtime: Runtime, *, config: WorkerConfig | None = None, worker_id: str | None = None) -> None:
        self.rt = runtime
        self.config = config or WorkerConfig()
        self.worker_id = worker_id or f"w-{uuid.uuid4().hex[:8]}"
        self._last_sweep = 0.0

    async def run_once(self) -> int:
        """Claim and handle due jobs once; run the expiry sweep when due. Returns jobs handled."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._last_sweep >= self.config.expiry_every_s:
            self._last_sweep = loop.time()
            expired = await self.rt.expire_stale()
            if expired:
                log.info("expired %d approvals", expired)
        jobs = await self.rt.s.jobs.claim(self.worker_id, kinds=[RESUME_JOB], limit=self.config.batch)
        for job in jobs:
            try:
                await self.rt.resume(str(job.payload["approval_id"]))
            except Exception as exc:
                log.exception("job %s failed", job.id)
                await self.rt.s.jobs.fail(job.id, f"{type(exc).__name__}: {exc}"[:500])
            else:
                await self.rt.s.jobs.complete(job.id)
        return len(jobs)

    async def run_forever(self, stop: asyncio.Event) -> None:
        await recover(self.rt, orphan_after_s=self.config.orphan_after_s)
        while not stop.is_set():
            try:
                handled = await self.run_once()
            except Exception:
                log.exception("worker iteration failed")
                handled = 0
            if handled == 0:
                try:
                    await asyncio.wait_for(stop.wait(), timeout=self.config.poll_s)
                except TimeoutError:
                    pass


async def recover(rt: Runtime, *, orphan_after_s: float = 60.0) -> int:
    """After a crash: settle orphaned ledger entries, then finish interrupted turns.

    Each ``executing`` entry is reconciled with the downstream by its key (no
    second side effect); each turn left ``running`` is repaired (its unanswered
    tool calls answered from the ledger) and the agent completes its reply.
    """
    s = rt.s
    cutoff = s.clock() - timedelta(seconds=orphan_after_s)
    settled = 0
    for entry in await s.ledger.in_flight():
        if await _reconcile(rt, entry, cutoff):
            settled += 1
    for run in await s.conversations.stale_runs(older_than=cutoff):
        conv = await s.conversations.get(run.conversation_id)
        if conv is None:
            continue
        principal = rt.acting_principal(conv, _principal(conv))
        async with rt.lock(conv.id):
            turn = await rt.turn(conv, principal, run=run)
            reply = await run_loop(turn)
        if reply.reply:
            await s.notifier.follow_up(conv, reply.reply)
    return settled


async def _reconcile(rt: Runtime, entry: LedgerEntry, cutoff: object) -> bool:
    s = rt.s
    tool = s.registry.get(entry.tool)
    prop = await s.conversations.get_proposal(entry.proposal_id) if entry.proposal_id else None
    if tool is None or prop is None:
        return False
    if prop.created_at > cutoff:  # type: ignore[operator]
        return False  # possibly still in flight in another process
    conv = await s.conversations.get(prop.conversation_id)
    run = await s.conversations.get_run(prop.run_id)
    if conv is None or run is None:
        return False
    kind, _, ident = prop.principal.partition(":")
    from tools.context import Principal

    principal = Principal(kind=kind, id=ident, customer_id=conv.customer_id)  # type: ignore[arg-type]
    turn = await rt.turn(conv, principal, run=run)
    base = turn._event("execution", proposal_id=prop.id, tool=prop.tool, args_hash=prop.args_hash)
    outcome = await s.executor.reconcile(entry, tool, turn.tool_context(), audit=base)
    if outcome.needs_human:
        await turn.escalate("needs_human", f"{entry.tool} with key {entry.key} may have run; check it.")
    return True


def _principal(conv: object) -> object:
    from tools.context import Principal

    c = conv
    return Principal(kind=c.principal_kind, id=c.principal_id, customer_id=c.customer_id)  # type: ignore[attr-defined]
