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
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from agent import continuation
from agent.approvals import RESUME_JOB
from agent.confirmations import CONFIRM_JOB
from agent.errors import Busy, InProgress, Unavailable
from agent.loop_lag import LoopLag
from agent.reconcile import LEASE_WAIT_S, finish, finish_run, reconcile_stuck
from agent.runtime import Runtime
from storage.faults import rerunnable
from storage.holders import is_dead, process_id
from storage.jobs import Job
from storage.locks import LockBusy

log = logging.getLogger(__name__)

#: How long a job's end (done, or failed for a retry) waits for the database before its lease decides.
_MARK_BUDGET_S = 30.0

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
    #: No new job while the loop runs more than this late (``agent.loop_lag``; one job always
    #: runs): turns busy with the CPU then never make the loop, and a server on it, slow to
    #: answer. ``None``: only ``concurrency`` bounds them.
    lag_limit_s: float | None = 0.02
    #: How often ``checkpoint`` runs (signing the audit head); ``None``: never.
    checkpoint_every_s: float | None = None
    #: How often the reconciliation pass (:func:`recover`) runs while the worker runs.
    reconcile_every_s: float = 10.0
    #: How long the pass waits for a conversation's lease before leaving a claim to its holder.
    lease_wait_s: float = LEASE_WAIT_S
    #: The longest one job may run before it is cancelled (a failed attempt).
    job_budget_s: float = 300.0
    #: Attempts (claims) before a job is quarantined.
    max_attempts: int = 5
    #: How long in all (from its enqueueing) a job whose action another process is carrying out
    #: (a 409 "being carried out": its ledger claim is ``executing``) waits for that claim to be
    #: settled, its failed attempts not counted; the reconciliation pass settles a stuck claim within
    #: ``orphan_after_s + reconcile_every_s`` (the wait is never shorter than that plus a minute).
    #: Past it, such a failure counts like any other.
    in_progress_wait_s: float = 900.0

    @property
    def in_progress_bound_s(self) -> float:
        """``in_progress_wait_s``, never shorter than the bound plus a pass and a minute's margin."""
        return max(self.in_progress_wait_s, self.orphan_after_s + self.reconcile_every_s + 60.0)

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

    def _kinds(self) -> list[str]:
        """The job kinds this worker runs (what it claims, and what wakes it)."""
        return [RESUME_JOB, CONFIRM_JOB, *self.handlers]

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
            kinds=self._kinds(),
            limit=limit,
            lease_s=self.config.lease_s,
            max_attempts=self.config.max_attempts,
        )

    async def _run(self, job: Job) -> None:
        db = self.rt.s.db
        budget = self.config.job_budget_s
        error: str | None = None
        outage = False
        try:
            async with asyncio.timeout(budget):
                await self._handle(job)
        except TimeoutError:
            log.error("job %s (%s) ran over its %g s budget and was cancelled", job.id, job.kind, budget)
            error = f"over its time budget of {budget:g} s"
        except Exception as exc:
            outage = db.fault(exc) is not None or isinstance(exc, Unavailable) or self._waits_out(job, exc)
            if isinstance(exc, InProgress) and outage:
                log.info("job %s: its action is being carried out elsewhere; it runs again later", job.id)
            elif outage:
                log.warning("job %s: database unavailable (%s); it runs again later", job.id, type(exc).__name__)
            else:
                log.exception("job %s failed", job.id)
            error = f"{type(exc).__name__}: {exc}"[:500]

        @rerunnable  # complete and fail are (tests/test_rerunnable.py)
        async def end() -> None:
            if error is None:
                await self.rt.s.jobs.complete(job.id)
            else:  # an outage is not the job's fault: it never counts towards quarantine
                await self._fail(job, error, counted=not outage)

        try:
            await db.until_available(end, budget_s=_MARK_BUDGET_S, what=f"job {job.id}")
        except Exception:  # its lease runs out and it is claimed again (each handler is idempotent)
            log.exception("job %s: recording how it ended failed", job.id)

    def _waits_out(self, job: Job, exc: Exception) -> bool:
        """Whether ``exc`` says another process is carrying the job's action out and the job has
        waited less than ``in_progress_wait_s`` in all: not a fault of the job's, not counted."""
        if not isinstance(exc, InProgress) or job.created_at is None:
            return False
        return (self.rt.s.clock() - job.created_at).total_seconds() < self.config.in_progress_bound_s

    async def _fail(self, job: Job, error: str, *, counted: bool = True) -> None:
        """A failed attempt; the last counted one quarantines the job (logged)."""
        status = await self.rt.s.jobs.fail(job.id, error, max_attempts=self.config.max_attempts, counted=counted)
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

    async def reconcile(self) -> None:
        """One reconciliation pass: jobs of dead processes taken over, then :func:`recover`. An
        outage or a failure is logged, never raised: the next pass tries again."""
        try:
            released = await self.rt.s.jobs.release_abandoned(is_dead)
            if released:
                log.info("took over %d jobs of a process that died", released)
            await recover(self.rt, orphan_after_s=self.config.orphan_after_s, lease_wait_s=self.config.lease_wait_s)
        except Exception as exc:
            kind = self.rt.s.db.fault(exc)
            if kind is None:
                log.exception("reconciliation pass failed")
            else:
                log.warning("reconciliation pass: database unavailable (%s); trying again", kind)

    async def _reconcile_forever(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.config.reconcile_every_s)
            if not stop.is_set():
                await self.reconcile()

    async def run_forever(self, stop: asyncio.Event) -> None:
        """Until ``stop``: keep up to ``concurrency`` jobs running, claiming more as slots free up,
        with the reconciliation pass every ``reconcile_every_s`` (and once first)."""
        quarantined = await self.rt.s.jobs.quarantined()
        if quarantined:
            log.warning("%d jobs are quarantined (newest %s); see `signoff jobs`", len(quarantined), quarantined[0].id)
        await self.reconcile()
        passes = asyncio.create_task(self._reconcile_forever(stop), name="signoff-reconcile")
        try:
            await self._jobs_forever(stop)
        finally:
            passes.cancel()
            await asyncio.gather(passes, return_exceptions=True)

    async def _jobs_forever(self, stop: asyncio.Event) -> None:
        running: set[asyncio.Task[None]] = set()
        done, queued = asyncio.Event(), self.rt.s.jobs.queued
        limit = self.config.lag_limit_s
        with LoopLag().timing() as lag, self.rt.s.jobs.hearing_others(kinds=self._kinds()):
            while not stop.is_set():
                free = self.config.concurrency - len(running)
                held = bool(running) and limit is not None and lag.behind(limit)
                if held:
                    free = 0  # the loop is behind: the running jobs go first
                jobs: list[Job] = []
                if free > 0:
                    queued.clear()  # before the claim: a job queued during it wakes the wait below
                    try:
                        jobs = await self._claim(min(free, self.config.batch))
                    except Exception as exc:
                        if self.rt.s.db.fault(exc) is None:
                            log.exception("worker iteration failed")
                        else:  # the database restarts: poll again shortly (the outage is counted)
                            log.warning("worker: database unavailable (%s); waiting", type(exc).__name__)
                for job in jobs:
                    task = asyncio.create_task(self._run(job), name=f"signoff-job-{job.id}")
                    running.add(task)
                    task.add_done_callback(running.discard)
                    task.add_done_callback(lambda _t: done.set())
                if jobs and len(running) < self.config.concurrency:
                    if limit is not None:
                        await lag.tick()  # the new jobs' first steps count in the lag read next
                    continue  # more may be due right away
                done.clear()
                waits = [asyncio.ensure_future(e.wait()) for e in (stop, done)]
                if free > 0:  # a slot is free: a job queued here (or, on PostgreSQL, anywhere) is claimed at once
                    waits.append(asyncio.ensure_future(queued.wait()))
                await asyncio.wait(waits, timeout=self._wait_s(held, lag), return_when=asyncio.FIRST_COMPLETED)
                for w in waits:
                    w.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)

    def _wait_s(self, held: bool, lag: LoopLag) -> float:
        """How long to wait for a job to end before looking again: held back by the lag, only until
        the loop may have caught up."""
        return min(self.config.poll_s, 5 * lag.interval) if held else self.config.poll_s


async def recover(rt: Runtime, *, orphan_after_s: float = 60.0, lease_wait_s: float = LEASE_WAIT_S) -> int:
    """After a crash or a fault, and periodically while running: settle stuck ledger claims,
    finish what people had settled, then finish interrupted turns.

    Each ``executing`` claim older than ``orphan_after_s`` (or whose process is gone) that no live
    turn holds is reconciled with the downstream by its key (:mod:`agent.reconcile`: no second
    side effect, the conversation told the true outcome); each runtime proposal a crash left
    undecided (a confirmation's, an approval's) is carried out through the same path a live
    request takes; each turn left ``running`` is repaired (its unanswered tool calls answered
    from the ledger) and the agent completes its reply. Returns the claims resolved.
    """
    s = rt.s
    cutoff = s.clock() - timedelta(seconds=orphan_after_s)
    resolved = await reconcile_stuck(rt, older_than_s=orphan_after_s, lease_wait_s=lease_wait_s)
    for prop in await s.conversations.undecided_runtime_proposals(older_than=cutoff):
        try:
            await finish(rt, prop)
        except Busy:
            continue  # its conversation is busy right now: the next pass finishes it
    for run in await s.conversations.stale_runs(older_than=cutoff):
        conv = await s.conversations.get(run.conversation_id)
        if conv is None:
            continue
        try:
            reply = await finish_run(rt, conv, run)
        except LockBusy:
            continue  # another replica holds the conversation right now: its turn is not ours to finish
        if reply is not None:
            await continuation.deliver(rt, conv, reply)
    return sum(1 for r in resolved if r.result in ("done", "released", "needs_human"))
