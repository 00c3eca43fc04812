"""Execution behind the idempotency ledger (C9): insert the key, then call.

A repeated key returns the stored result and calls nothing. An ``executing``
entry left by a crash is reconciled with the downstream by the same key: if
the downstream has a record of the write, the handler is re-invoked with that
key (the backend answers from its record; no second side effect); if it has
none, a retryable tool is released to run once, and a non-retryable one is
routed to a person.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from agent.tracing import traced_execution
from storage.audit import AuditEvent
from storage.faults import rerunnable
from storage.holders import process_id
from storage.ledger import Ledger
from storage.records import LedgerEntry
from tools.context import ToolContext, ToolFailure
from tools.registry import ToolDef

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class ExecOutcome:
    result: Any
    is_error: bool
    latency_ms: float
    deduplicated: bool = False
    #: The key had already executed for an earlier operation: nothing new happened now.
    replayed: bool = False
    #: Reconciling found no downstream record and gave the key back: the call never happened.
    released: bool = False
    needs_human: bool = False


#: How long a request waits for the database to take an outcome before a background task takes over.
SETTLE_BUDGET_S = 3.0


class Executor:
    def __init__(self, ledger: Ledger, *, settle_budget_s: float = SETTLE_BUDGET_S) -> None:
        self.ledger = ledger
        self.settle_budget_s = settle_budget_s
        #: Outcomes of done side effects the database has not taken yet (owned here, logged).
        self._settling: dict[str, asyncio.Task[None]] = {}
        #: Keys this executor is calling or settling right now (a claim of ours not among them was
        #: stranded by a fault in this very process: nobody else will finish it).
        self._busy: set[str] = set()

    @traced_execution
    async def run(
        self,
        tool: ToolDef,
        args: dict[str, Any],
        ctx: ToolContext,
        *,
        key: str | None,
        proposal_id: str | None,
        run_id: str | None,
        audit: AuditEvent | None = None,
    ) -> ExecOutcome:
        """Execute a decided proposal; reads and runtime tools skip the ledger."""
        start = time.perf_counter()
        if key is None:
            return await self._call(tool, args, ctx, start)
        held = await self.ledger.claim(key=key, tool=tool.name, arguments=args, proposal_id=proposal_id, run_id=run_id)
        if (
            held is not None
            and held.proposal_id == proposal_id
            and (self.ledger.abandoned(held) or self._stranded(held))
        ):
            # Our own claim, left by a process that died mid-call: settle it with the downstream
            # now; if the call provably never happened, make it (once) under the same key.
            outcome = await self.reconcile(held, tool, ctx, audit=audit, start=start)
            if not outcome.released:
                return outcome
            held = await self.ledger.claim(
                key=key, tool=tool.name, arguments=args, proposal_id=proposal_id, run_id=run_id
            )
        if held is not None:
            return self._already(held, tool, proposal_id, start)
        self._busy.add(key)
        try:
            return await self._call_keyed(tool, args, replace(ctx, idempotency_key=key), key, start, audit)
        finally:
            if key not in self._settling:
                self._busy.discard(key)

    def _stranded(self, held: LedgerEntry) -> bool:
        """Our process's own ``executing`` claim that nothing here is calling or settling: a
        database fault cut its call short (the same click, sent again, reconciles it now)."""
        return held.status == "executing" and held.holder == process_id() and held.key not in self._busy

    async def _call(self, tool: ToolDef, args: dict[str, Any], ctx: ToolContext, start: float) -> ExecOutcome:
        """A read or runtime tool: every failure becomes a result the model can act on."""
        try:
            result = await asyncio.wait_for(tool.handler(args, ctx), timeout=tool.meta.timeout_s)
        except ToolFailure as f:
            return ExecOutcome(result=f.as_result(), is_error=True, latency_ms=_ms(start))
        except TimeoutError:
            log.warning("tool %s timed out after %ss", tool.name, tool.meta.timeout_s)
            return ExecOutcome(
                result={
                    "error": "tool_timeout",
                    "message": "This lookup took too long; try once "
                    "more, or tell the person you could not check it and escalate.",
                },
                is_error=True,
                latency_ms=_ms(start),
            )
        except Exception:
            log.exception("tool %s failed", tool.name)
            return ExecOutcome(
                result={
                    "error": "tool_unavailable",
                    "message": "This lookup failed on our side; "
                    "try once more, or tell the person you could not check it and escalate.",
                },
                is_error=True,
                latency_ms=_ms(start),
            )
        return ExecOutcome(result=result, is_error=False, latency_ms=_ms(start))

    async def _call_keyed(
        self, tool: ToolDef, args: dict[str, Any], ctx: ToolContext, key: str, start: float, audit: AuditEvent | None
    ) -> ExecOutcome:
        try:
            result = await asyncio.wait_for(tool.handler(args, ctx), timeout=tool.meta.timeout_s)
        except ToolFailure as f:
            # A business refusal: nothing happened downstream, so the key is free again.
            await self.ledger.release(key)
            return ExecOutcome(result=f.as_result(), is_error=True, latency_ms=_ms(start))
        except Exception as exc:  # infrastructure: outcome unknown until reconciled
            if self.ledger.db.fault(exc) is not None:
                # Our own database went away under the call: whether the write happened is
                # unknown and cannot be asked now. The claim stays ``executing``; the worker's
                # reconciliation settles it once the database is back (agent/reconcile.py).
                log.warning("tool %s with key %s: database unavailable during the call", tool.name, key)
                raise
            log.exception("tool %s failed with key %s", tool.name, key)
            entry = await self.ledger.get(key)
            if entry is None:
                raise
            return await self.reconcile(entry, tool, ctx, audit=audit, start=start)
        audit_events = [_executed(audit, tool, key, result, start)] if audit else []
        await self.record(key, status="succeeded", result=result, audit=audit_events)
        return ExecOutcome(result=result, is_error=False, latency_ms=_ms(start))

    async def record(self, key: str, *, status: str, result: Any, audit: list[AuditEvent]) -> None:
        """Record the outcome of a side effect that is done, whatever the database does: tried
        again with backoff for ``settle_budget_s`` on the caller's path, then by a background
        task until the database takes it (the caller goes on with the true result either way)."""

        @rerunnable  # the ledger row moves only from executing: a second run changes nothing
        async def settle() -> None:
            await self.ledger.settle(key, status=status, result=result, audit=audit)

        try:
            await self.ledger.db.until_available(settle, budget_s=self.settle_budget_s, what=f"settling {key}")
        except Exception as exc:
            if self.ledger.db.fault(exc) is None:
                raise
            log.error("ledger %s: %s, but the database is unavailable; settling in the background", key, status)
            task = asyncio.create_task(
                self.ledger.db.until_available(settle, budget_s=None, what=f"settling {key}"),
                name=f"signoff-settle-{key}",
            )
            self._settling[key] = task
            task.add_done_callback(lambda done: self._settled(key, done))

    def _settled(self, key: str, task: asyncio.Task[None]) -> None:
        self._settling.pop(key, None)
        self._busy.discard(key)
        if not task.cancelled() and task.exception() is not None:
            log.error("settling in the background failed", exc_info=task.exception())

    async def drain(self, *, timeout_s: float | None = None) -> list[str]:
        """Wait for the outcomes still being settled in the background (at shutdown, in tests), at
        most ``timeout_s``; the keys still unsettled then (the worker's reconciliation settles them
        from the backend's record once the database is back)."""
        try:
            async with asyncio.timeout(timeout_s):
                while self._settling:
                    await asyncio.gather(*self._settling.values(), return_exceptions=True)
        except TimeoutError:
            log.error("shutting down with unsettled ledger keys: %s", sorted(self._settling))
        return sorted(self._settling)

    def _already(self, held: LedgerEntry, tool: ToolDef, proposal_id: str | None, start: float) -> ExecOutcome:
        """The key is taken. Our own proposal's entry (a retry after a crash) answers with its
        result; an earlier operation's answers too, marked as a replay so no surface reports
        that something new happened."""
        if held.status == "succeeded":
            if held.proposal_id is not None and held.proposal_id == proposal_id:
                return ExecOutcome(result=held.result, is_error=False, latency_ms=_ms(start), deduplicated=True)
            return ExecOutcome(
                result=replayed(held, tool), is_error=False, latency_ms=_ms(start), deduplicated=True, replayed=True
            )
        if held.status == "needs_human":
            return _needs_human(start)
        return ExecOutcome(
            result={"error": "in_progress", "message": "This action is already being carried out."},
            is_error=True,
            latency_ms=_ms(start),
        )

    async def reconcile(
        self,
        entry: LedgerEntry,
        tool: ToolDef,
        ctx: ToolContext,
        *,
        audit: AuditEvent | None = None,
        start: float | None = None,
    ) -> ExecOutcome:
        """Settle an ``executing`` entry against the downstream's own record of the key."""
        start = time.perf_counter() if start is None else start
        record = await ctx.backend.lookup_write(entry.key)
        keyed = replace(ctx, idempotency_key=entry.key)
        if record is not None:
            # The side effect happened; the backend answers from its record.
            result = await asyncio.wait_for(tool.handler(entry.arguments, keyed), timeout=tool.meta.timeout_s)
            audit_events = [_executed(audit, tool, entry.key, result, start)] if audit else []
            await self.record(entry.key, status="succeeded", result=result, audit=audit_events)
            return ExecOutcome(result=result, is_error=False, latency_ms=_ms(start), deduplicated=True)
        if tool.meta.retryable:
            await self.ledger.release(entry.key)
            return ExecOutcome(
                result={
                    "error": "temporarily_unavailable",
                    "message": "The action did not go through; you may retry once.",
                },
                is_error=True,
                latency_ms=_ms(start),
                released=True,
            )
        await self.ledger.settle(
            entry.key, status="needs_human", result=None, audit=[_flagged(audit, entry.key)] if audit else ()
        )
        return _needs_human(start)


def replayed(held: LedgerEntry, tool: ToolDef) -> dict[str, Any]:
    """An earlier execution's result, saying plainly that it is one (the original id and time)."""
    body = held.result if isinstance(held.result, dict) else {"result": held.result}
    return {
        **body,
        "replayed": True,
        "original_id": tool.action_id(held.result),
        "original_at": held.created_at.isoformat() if held.created_at else None,
        "message": "This was already done earlier with exactly these details; nothing new happened now.",
    }


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


def _needs_human(start: float) -> ExecOutcome:
    return ExecOutcome(
        result={"error": "needs_human", "message": "A person must check whether this went through; escalate."},
        is_error=True,
        latency_ms=_ms(start),
        needs_human=True,
    )


def _executed(base: AuditEvent, tool: ToolDef, key: str, result: Any, start: float) -> AuditEvent:
    return replace(
        base,
        kind="execution.succeeded",
        idempotency_key=key,
        latency_ms=_ms(start),
        data={**base.data, "action_id": tool.action_id(result)},
    )


def _flagged(base: AuditEvent, key: str) -> AuditEvent:
    return replace(base, kind="execution.needs_human", idempotency_key=key)
