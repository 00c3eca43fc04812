"""The worker: resume jobs, the expiry sweep, and crash recovery.

Safe with several workers on one database: jobs are claimed with ``SKIP
LOCKED`` (PostgreSQL) or an atomic ``UPDATE … RETURNING`` (SQLite), approval
transitions are compare-and-set, and every write goes through the ledger.

Each job runs within a time budget (``job_budget_s``): past it, it is cancelled and the
attempt counts as failed; its claim's lease outlasts the budget, so no other claim takes a
job that is still running. A job that fails ``max_attempts`` times (a raise, the budget, or
its process dying while it ran) is quarantined — terminal, logged, listed by ``signoff jobs``
— never retried forever or on every restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from agent import continuation, gates, steps
from agent.approvals import RESUME_JOB
from agent.confirmations import CONFIRM_JOB
from agent.loop import run_loop
from agent.outcomes import TurnResult
from agent.runtime import Runtime
from storage.holders import is_dead, process_id
from storage.jobs import Job
from storage.locks import LockBusy
from storage.records import Conversation, LedgerEntry, Proposal, Run
from tools.context import Principal

log = logging.getLogger(__name__)

#: A face's handler for its own job kind (e.g. the Slack face's ``inbound`` turns).
JobHandler = Callable[[Job], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    poll_s: float = 0.5
    expiry_every_s: float = 30.0
    #: An ``executing`` ledger entry older than this is presumed orphaned by a crash.
    orphan_after_s: float = 60.0
    batch: int = 10
    #: Jobs run at once by ``run_forever`` (turns wait on the model: they overlap; one
    #: conversation's turns still take its lock one at a time).
    concurrency: int = 32
    #: How often ``checkpoint`` runs (signing the audit head); ``None``: never.
    checkpoint_every_s: float | None = None
    #: The longest one job may run before it is cancelled (a failed attempt).
    job_budget_s: float = 300.0
    #: Attempts (claims) before a job is quarantined.
    max_attempts: int = 5

    @property
    def lease_s(self) -> float:
        """A claim's lease: past the budget, so a job still within it is never claimed twice."""
        return self.job_budget_s + 30.0


class Worker:
    def __init__(
        self,
        runtime: Runtime,
        *,
        config: WorkerConfig | None = None,
        worker_id: str | None = None,
        checkpoint: Callable[[], Awaitable[object]] | None = None,
        handlers: Mapping[str, JobHandler] | None = None,
    ) -> None:
        self.rt = runtime
        self.handlers = dict(handlers or {})
        self.config = config or WorkerConfig()
        # The process as holder: a crashed process's claimed jobs are taken over at once.
        self.worker_id = worker_id or process_id()
        self._last_sweep = 0.0
        self._checkpoint = checkpoint
        self._last_checkpoint: float | None = None

    async def run_once(self, *, limit: int | None = None) -> int:
        """Claim due jobs once and run them together; the expiry sweep when due. Returns jobs handled."""
        jobs = await self._claim(limit or self.config.batch)
        await asyncio.gather(*(self._run(job) for job in jobs))
        return len(jobs)

    async def _claim(self, limit: int) -> list[Job]:
        loop = asyncio.get_running_loop()
        if loop.time() - self._last_sweep >= self.config.expiry_every_s:
            self._last_sweep = loop.time()
            expired = await self.rt.expire_stale()
            if expired:
                log.info("expired %d approvals", expired)
        await self._maybe_checkpoint(loop.time())
        return await self.rt.s.jobs.claim(
            self.worker_id,
            kinds=[RESUME_JOB, CONFIRM_JOB, *self.handlers],
            limit=limit,
            lease_s=self.config.lease_s,
            max_attempts=self.config.max_attempts,
        )

    async def _run(self, job: Job) -> None:
        budget = self.config.job_budget_s
        try:
            async with asyncio.timeout(budget):
                await self._handle(job)
        except TimeoutError:
            log.error("job %s (%s) ran over its %g s budget and was cancelled", job.id, job.kind, budget)
            await self._fail(job, f"over its time budget of {budget:g} s")
        except Exception as exc:
            log.exception("job %s failed", job.id)
            await self._fail(job, f"{type(exc).__name__}: {exc}"[:500])
        else:
            await self.rt.s.jobs.complete(job.id)

    async def _fail(self, job: Job, error: str) -> None:
        status = await self.rt.s.jobs.fail(job.id, error, max_attempts=self.config.max_attempts)
        if status == "quarantined":
            log.error("job %s (%s) quarantined after %d attempts: %s", job.id, job.kind, job.attempts, error)

    async def _handle(self, job: Job) -> None:
        match job.kind:
            case "resume":
                await self.rt.resume(str(job.payload["approval_id"]))
            case "confirmation":
                await self.rt.carry_out_confirmation(str(job.payload["confirmation_id"]), deliver=True)
            case kind if kind in self.handlers:
                await self.handlers[kind](job)
            case _:
                raise ValueError(f"unknown job kind {job.kind!r}")

    async def _maybe_checkpoint(self, now: float) -> None:
        every = self.config.checkpoint_every_s
        if self._checkpoint is None or every is None:
            return
        if self._last_checkpoint is not None and now - self._last_checkpoint < every:
            return
        self._last_checkpoint = now
        try:
            await self._checkpoint()
        except Exception:  # a refused or failed checkpoint is loud but never stops the jobs
            log.exception("audit checkpoint failed")

    async def run_forever(self, stop: asyncio.Event) -> None:
        """Until ``stop``: keep up to ``concurrency`` jobs running, claiming more as slots free up."""
        released = await self.rt.s.jobs.release_abandoned(is_dead)
        if released:
            log.info("took over %d jobs of a process that died", released)
        quarantined = await self.rt.s.jobs.quarantined()
        if quarantined:
            log.warning("%d jobs are quarantined (newest %s); see `signoff jobs`", len(quarantined), quarantined[0].id)
        await recover(self.rt, orphan_after_s=self.config.orphan_after_s)
        running: set[asyncio.Task[None]] = set()
        done = asyncio.Event()
        while not stop.is_set():
            free = self.config.concurrency - len(running)
            jobs: list[Job] = []
            if free > 0:
                try:
                    jobs = await self._claim(min(free, self.config.batch))
                except Exception:
                    log.exception("worker iteration failed")
            for job in jobs:
                task = asyncio.create_task(self._run(job), name=f"signoff-job-{job.id}")
                running.add(task)
                task.add_done_callback(running.discard)
                task.add_done_callback(lambda _t: done.set())
            if jobs and len(running) < self.config.concurrency:
                continue  # more may be due right away
            done.clear()
            waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(done.wait())]
            await asyncio.wait(waits, timeout=self.config.poll_s, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)


async def recover(rt: Runtime, *, orphan_after_s: float = 60.0) -> int:
    """After a crash: settle abandoned ledger claims, finish what people had settled, then
    finish interrupted turns.

    Each abandoned ``executing`` entry (its process is gone, or it is older than
    ``orphan_after_s``) is reconciled with the downstream by its key (no second side
    effect); each runtime proposal a crash left undecided (a confirmation's, an approval's)
    is carried out through the same path a live request takes; each turn left ``running``
    is repaired (its unanswered tool calls answered from the ledger) and the agent
    completes its reply.
    """
    s = rt.s
    cutoff = s.clock() - timedelta(seconds=orphan_after_s)
    settled = 0
    for entry in await s.ledger.in_flight():
        if s.ledger.abandoned(entry, older_than=cutoff) and await _reconcile(rt, entry):
            settled += 1
    for prop in await s.conversations.undecided_runtime_proposals(older_than=cutoff):
        await _finish_settled(rt, prop)
    for run in await s.conversations.stale_runs(older_than=cutoff):
        conv = await s.conversations.get(run.conversation_id)
        if conv is None:
            continue
        try:
            reply = await _finish_run(rt, conv, run)
        except LockBusy:
            continue  # another replica holds the conversation right now: its turn is not ours to finish
        if reply is not None:
            await continuation.deliver(rt, conv, reply)
    return settled


async def _finish_run(rt: Runtime, conv: Conversation, run: Run) -> TurnResult | None:
    """Take over a run a crash left ``running`` and let the agent complete its reply."""
    s = rt.s
    async with rt.lock(conv.id):
        if not await s.conversations.take_over_run(run):
            return None  # finished meanwhile, or another process took it over
        fresh = await s.conversations.get_run(run.id) or run
        turn = await rt.turn(conv, _principal(conv), run=fresh)
        return await run_loop(turn)


async def _finish_settled(rt: Runtime, prop: Proposal) -> None:
    """A runtime proposal whose decision a crash interrupted: finish it the way a live
    request would (the whole gate, the ledger's key, the outcome told once)."""
    kind, _, origin_id = (prop.origin or "").partition(":")
    if kind == "confirmation":
        await rt.carry_out_confirmation(origin_id, deliver=True)
    elif kind == "approval":
        await rt.resume(origin_id)
    elif kind == "edit":
        conv = await rt.s.conversations.get(prop.conversation_id)
        run = await rt.s.conversations.get_run(prop.run_id)
        if conv is None or run is None:
            return
        async with rt.lock(conv.id):
            turn = await rt.turn(conv, Principal.from_key(prop.principal, conv.customer_id), run=run)
            await rt.apply(turn, tool=prop.tool, args=prop.arguments, origin=prop.origin or "", proposal_id=prop.id)


async def _reconcile(rt: Runtime, entry: LedgerEntry) -> bool:
    s = rt.s
    tool = s.registry.get(entry.tool)
    prop = await s.conversations.get_proposal(entry.proposal_id) if entry.proposal_id else None
    if tool is None or prop is None:
        return False
    conv = await s.conversations.get(prop.conversation_id)
    run = await s.conversations.get_run(prop.run_id)
    if conv is None or run is None:
        return False
    principal = Principal.from_key(prop.principal, conv.customer_id)
    turn = await rt.turn(conv, principal, run=run)
    base = turn.event("execution", proposal_id=prop.id, tool=prop.tool, args_hash=prop.args_hash)
    outcome = await s.executor.reconcile(entry, tool, steps.tool_context(turn, prop.id), audit=base)
    if outcome.needs_human:
        await gates.escalate(turn, "needs_human", f"{entry.tool} with key {entry.key} may have run; check it.")
    return True


def _principal(conv: Conversation) -> Principal:
    return Principal(kind=conv.principal_kind, id=conv.principal_id, customer_id=conv.customer_id)  # type: ignore[arg-type]
