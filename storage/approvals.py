"""Approvals: requested, decided (once per person), expired or superseded — compare-and-set
on version, as ``storage/gates.py`` moves confirmations: a writer that loses the race changes
nothing, and a transition's audit events (and its resume job) commit with it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, Table, bindparam, select, update

from storage.audit import AuditEvent, append_audit_many
from storage.db import Database
from storage.fastsql import prepared
from storage.gates import at_utc, record_fields, set_surface
from storage.jobs import JobQueue
from storage.models import ApprovalRow
from storage.records import Approval, ApprovalStatus, Decision, NewApproval, aware

_APPR: Table = ApprovalRow.__table__  # type: ignore[assignment]
_PENDING_FOR_CUSTOMER = prepared(
    select(_APPR).where(_APPR.c.customer_id == bindparam("c"), _APPR.c.status == "pending")
)


def to_approval(r: ApprovalRow) -> Approval:
    """The frozen record of an approval row."""
    return Approval(
        id=r.id,
        proposal_id=r.proposal_id,
        run_id=r.run_id,
        conversation_id=r.conversation_id,
        tool=r.tool,
        arguments=r.arguments,
        args_hash=r.args_hash,
        customer_id=r.customer_id,
        summary=r.summary,
        status=cast(ApprovalStatus, r.status),
        version=r.version,
        required_role=r.required_role,
        approvals_required=r.approvals_required,
        decisions=tuple(Decision(**d) for d in (r.decisions or [])),
        requester=r.requester,
        decider=r.decider,
        comment=r.comment,
        rationale=r.rationale,
        evidence=tuple(r.evidence or ()),
        provenance=dict(r.provenance or {}),
        idempotency_key=r.idempotency_key,
        policy_version=r.policy_version,
        result=r.result,
        superseded_by=r.superseded_by,
        surfaces=dict(r.surfaces or {}),
        expires_at=at_utc(r.expires_at),
        created_at=at_utc(r.created_at),
        decided_at=aware(r.decided_at),
        amount_minor=r.amount_minor,
        currency=r.currency,
        routing=r.routing,
    )


class ApprovalRepo:
    """Approvals: requested, decided (once per person), expired or superseded, compare-and-set on version."""

    def __init__(self, db: Database, jobs: JobQueue) -> None:
        self.db = db
        self.jobs = jobs

    async def create(self, new: NewApproval, *, audit: Sequence[AuditEvent] = ()) -> Approval:
        """Insert a pending approval (version 1, no decisions yet) with its audit events."""
        fields = record_fields(new)
        row = ApprovalRow(**{**fields, "evidence": list(new.evidence)}, status="pending", version=1, decisions=[])
        async with self.db.sessions() as s, s.begin():
            s.add(row)
            await s.flush()
            if audit:
                await append_audit_many(s, list(audit))
        return to_approval(row)

    async def get(self, approval_id: str) -> Approval | None:
        """The approval ``approval_id``, if it exists."""
        async with self.db.reader() as s:
            r = await s.get(ApprovalRow, approval_id)
            return to_approval(r) if r else None

    async def list_approvals(self, *, status: str | None = None, limit: int = 200) -> list[Approval]:
        """Approvals, newest first, optionally of one ``status``."""
        async with self.db.reader() as s:
            q = select(ApprovalRow).order_by(ApprovalRow.created_at.desc()).limit(limit)
            if status:
                q = q.where(ApprovalRow.status == status)
            return [to_approval(r) for r in (await s.execute(q)).scalars().all()]

    async def pending_for_customer(self, customer_id: str) -> list[Approval]:
        """The customer's pending approvals (their money counts in every later aggregate)."""
        rows = await self.db.read(lambda conn: conn.execute(_PENDING_FOR_CUSTOMER, {"c": customer_id}).all())
        return [to_approval(r) for r in rows]  # type: ignore[arg-type]

    async def find_approved(self, run_id: str, tool: str, args_hash: str) -> Approval | None:
        """The run's approved approval of exactly this call, if any."""
        async with self.db.reader() as s:
            r = (
                await s.execute(
                    select(ApprovalRow)
                    .where(
                        ApprovalRow.run_id == run_id,
                        ApprovalRow.tool == tool,
                        ApprovalRow.args_hash == args_hash,
                        ApprovalRow.status == "approved",
                    )
                    .limit(1)
                )
            ).scalar_one_or_none()
            return to_approval(r) if r else None

    async def expired_pending(self, now: datetime, limit: int = 100) -> list[Approval]:
        """Pending approvals whose ``expires_at`` is at or before ``now``."""
        async with self.db.reader() as s:
            rows = (
                (
                    await s.execute(
                        select(ApprovalRow)
                        .where(ApprovalRow.status == "pending", ApprovalRow.expires_at <= now)
                        .limit(limit)
                    )
                )
                .scalars()
                .all()
            )
            return [to_approval(r) for r in rows]

    async def transition(
        self,
        approval_id: str,
        *,
        expected_version: int,
        values: dict[str, Any],
        audit: Sequence[AuditEvent] = (),
        job: tuple[str, dict[str, Any], str, float] | None = None,
        new_row: ApprovalRow | None = None,
    ) -> Approval | None:
        """CAS from ``pending`` at ``expected_version``; ``None`` if the row moved on.

        ``job`` (kind, payload, dedup key, delay in seconds) is enqueued in the same transaction, so a
        decision is never recorded without its resume work, nor the reverse.
        """
        async with self.db.sessions() as s, s.begin():
            res = await s.execute(
                update(ApprovalRow)
                .where(
                    ApprovalRow.id == approval_id,
                    ApprovalRow.version == expected_version,
                    ApprovalRow.status == "pending",
                )
                .values(version=expected_version + 1, **values)
            )
            if cast(CursorResult[Any], res).rowcount != 1:
                return None
            if new_row is not None:
                s.add(new_row)
            await s.flush()
            if audit:
                await append_audit_many(s, list(audit))
            if job is not None:
                kind, payload, dedup, delay = job
                run_after = self.jobs._now() + timedelta(seconds=delay)  # the queue's (injectable) clock
                await self.jobs.enqueue(kind, payload, dedup_key=dedup, run_after=run_after, session=s)
            r = await s.get(ApprovalRow, approval_id)
            assert r is not None
            return to_approval(r)

    async def set_result(self, approval_id: str, result: Any, *, audit: Sequence[AuditEvent] = ()) -> None:
        """Store what executing the approved action returned (with its audit events)."""
        async with self.db.sessions() as s, s.begin():
            await s.execute(update(ApprovalRow).where(ApprovalRow.id == approval_id).values(result=result))
            if audit:
                await append_audit_many(s, list(audit))

    async def set_superseded_by(self, approval_id: str, new_id: str) -> None:
        """Record the approval that replaced this one."""
        async with self.db.sessions() as s, s.begin():
            await s.execute(
                update(ApprovalRow)
                .where(ApprovalRow.id == approval_id, ApprovalRow.status == "superseded")
                .values(superseded_by=new_id)
            )

    async def set_surface(self, approval_id: str, surface: str, ref: dict[str, Any] | None) -> None:
        """Record where ``surface`` shows this approval (``None`` forgets it); other surfaces' refs stay."""
        await set_surface(self.db, ApprovalRow, approval_id, surface, ref)
