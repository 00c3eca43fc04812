"""The versioned policy in the database: which one is in force, what a new file changes,
applying it (refusals, the audit event, the second supervisor); picking up a newly applied
one while running is :mod:`agent.policy_refresher`.

The policy in force is the newest row put there by a ``policy.applied`` audit event that
:func:`refusal_to_force` lets through: its row id and sha256 match the row, its audit row is
intact, it follows the version in force before it, a change to approvers, ceilings or rollout
names a second supervisor, and, when an audit signer or key is configured, its seal verifies
(:mod:`storage.policy_seal`: the chain alone needs no secret, so without a key a version in
force rests on the database). Until one exists it is ``SIGNOFF_POLICY_FILE``, else the
bundled default. A row without such an event (one inserted straight into ``policy_versions``)
is ignored and logged. A change to approvers, ceilings or rollout is stored as
``policy.proposed`` and comes into force only when a second supervisor approves it
(:func:`approve_policy`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agent.errors import ConfigError
from agent.policy import Policy, parse_policy, read_policy_text
from agent.policy_diff import Change, changes, unified_diff
from agent.policy_versions import order_refusal
from storage import policy_seal
from storage.audit import AuditEvent, AuditLog, sha256_hex
from storage.policies import APPLIED, AT_START, PROPOSED, NewPolicyVersion, PolicyEvent, PolicyVersion, PolicyVersions
from storage.policy_seal import Sealer

log = logging.getLogger(__name__)

#: How often a running process checks for a newly applied version (one indexed ``max(seq)``).
REFRESH_EVERY_S = 5.0
#: Top-level sections whose change needs a second supervisor before it is in force.
SENSITIVE = ("approvers", "ceilings", "rollout")


@dataclass(frozen=True, kw_only=True)
class ActivePolicy:
    """The policy in force, its text, and where it came from."""

    policy: Policy
    yaml: str
    source: Literal["database", "file", "bundled"]
    #: The file's path (``file``), ``bundled default``, or ``policy_versions #N`` (``database``).
    where: str
    #: The applied row when ``source`` is ``database``.
    row: PolicyVersion | None = None
    #: The newest ``policy.applied`` event's seq when this was read (in force or not): an apply
    #: over this policy is refused if another comes after it meanwhile.
    applied_seq: int | None = None
    #: The seq of the ``policy.applied`` event that put :attr:`row` in force (``None``: no row).
    in_force_seq: int | None = None

    @property
    def sha256(self) -> str:
        return sha256_hex(self.yaml)


def parse_stored(row: PolicyVersion) -> Policy:
    """The policy an applied row holds (a row this code can no longer read is a clear error)."""
    return parse_policy(row.yaml, source=f"policy_versions #{row.id} (version {row.version})", setting="")


@dataclass(frozen=True, kw_only=True)
class PolicyState:
    """The stored versions as the audit chain sees them: the row in force and the proposals
    waiting for a second supervisor."""

    in_force: PolicyVersion | None
    pending: tuple[tuple[PolicyVersion, PolicyEvent], ...]
    #: The newest policy event's seq and the newest row id when this was read (the refresher's marks).
    event_seq: int | None
    row_id: int | None
    #: The newest ``policy.applied`` event's seq, in force or not.
    applied_seq: int | None = None
    #: The seq of the event that put :attr:`in_force` there.
    in_force_seq: int | None = None


async def policy_state(
    versions: PolicyVersions, audit: AuditLog, *, seal_key: Ed25519PublicKey | None = None, start: str | None = None
) -> PolicyState:
    """Read the policy events and rows: the in-force row is the newest ``policy.applied`` event
    that :func:`refusal_to_force` lets through, walking the events in order (each must follow
    the one before); rows no event names are logged, ignored. ``seal_key``: the configured
    audit key every event must be sealed by; ``start``: the file or bundled policy text now."""
    events = await versions.events()
    rows = {r.id: r for r in await versions.history(10_000)}
    in_force: tuple[PolicyVersion, int] | None = None
    applied: set[int] = set()  # rows an event let through put in force (a refused one hides no proposal)
    for event in (e for e in events if e.kind == APPLIED):
        why = await refusal_to_force(event, rows, in_force, audit, seal_key=seal_key, start=start)
        if why is None:
            in_force = (rows[event.row], event.seq)
            applied.add(event.row)
        elif why == _MISMATCH:
            log.error(
                "policy.applied at audit seq %s does not match policy_versions #%s: ignored", event.seq, event.row
            )
        else:
            log.error(
                "policy.applied at audit seq %s (policy_versions #%s) is not in force: %s", event.seq, event.row, why
            )
    pending = []
    for event in events:
        row = rows.get(event.row)
        if event.kind == PROPOSED and event.row not in applied and row is not None and row.sha256 == event.sha256:
            pending.append((row, event))
    named = {e.row for e in events}
    for raw in (i for i in sorted(rows) if i not in named):
        log.warning("policy_versions #%s has no policy audit event (inserted outside `signoff policy`): ignored", raw)
    return PolicyState(
        in_force=in_force[0] if in_force is not None else None,
        in_force_seq=in_force[1] if in_force is not None else None,
        pending=tuple(pending),
        event_seq=events[-1].seq if events else None,
        row_id=max(rows) if rows else None,
        applied_seq=max((e.seq for e in events if e.kind == APPLIED), default=None),
    )


_MISMATCH = "mismatch"


async def refusal_to_force(
    event: PolicyEvent,
    rows: dict[int, PolicyVersion],
    current: tuple[PolicyVersion, int] | None,
    audit: AuditLog,
    *,
    seal_key: Ed25519PublicKey | None,
    start: str | None,
) -> str | None:
    """Why ``event`` does not put its row in force after ``current`` (the row in force and the seq
    of its event; ``None``: it does): its row and sha256 must match and its audit row be intact;
    with ``seal_key``, its seal must verify; it must have been applied over ``current`` (with a
    seal, over that very event: a sealed event replayed later does not follow); and a change to
    approvers, ceilings or rollout (against the version it replaced) needs a second supervisor,
    other than the proposer."""
    row = rows.get(event.row)
    if row is None or not row.sha256 == event.sha256 == sha256_hex(row.yaml) or not await audit.row_intact(event.seq):
        return _MISMATCH
    data = event.data
    if seal_key is not None and (why := policy_seal.problem(seal_key, data)) is not None:
        return why
    before_sha = data.get("from_sha256")
    now, now_seq = current if current is not None else (None, None)
    if (now is not None and before_sha != now.sha256) or (seal_key is not None and data.get("from_seq") != now_seq):
        over = f"policy_versions #{now.id} (audit seq {now_seq})" if now is not None else "the file or bundled policy"
        return f"it was applied over another version than {over}, in force then"
    before = now.yaml if now is not None else None
    if before is None:
        known = [r.yaml for r in rows.values() if r.sha256 == before_sha] + [start or ""]
        before = next((t for t in known if sha256_hex(t) == before_sha), None)
    if _sensitive(before, row) and not _second_supervisor(data, row):
        return "it changes approvers, ceilings or rollout without a second supervisor's approval"
    return None


def _sensitive(before: str | None, row: PolicyVersion) -> bool:
    """Whether going from ``before`` to ``row`` needs a second supervisor (unknown or unreadable: yes)."""
    if before is None:
        return True
    try:
        old = parse_policy(before, source="the version replaced", setting="")
        return needs_second_supervisor(changes(old, parse_stored(row)))
    except ConfigError:
        return True


def _second_supervisor(data: dict[str, Any], row: PolicyVersion) -> bool:
    approver, proposer = data.get("approved_by"), data.get("applied_by")
    return proposer == row.applied_by and isinstance(approver, str) and bool(approver) and approver != proposer


def start_text(path: Path | None) -> str | None:
    """The policy file's text (the bundled default's without one); ``None`` when it cannot be read."""
    try:
        return read_policy_text(path)[0]
    except ConfigError:
        return None


async def active_policy(
    versions: PolicyVersions,
    path: Path | None,
    audit: AuditLog | None = None,
    *,
    seal_key: Ed25519PublicKey | None = None,
) -> ActivePolicy:
    """The version in force (see :func:`policy_state`), else the policy file (``path``), else the
    bundled default."""
    unreadable: ConfigError | None = None
    try:
        text, where = read_policy_text(path)
    except ConfigError as exc:  # wanted only when no version is in force
        text, where, unreadable = "", "", exc
    try:
        state = await policy_state(versions, audit or AuditLog(versions.db), seal_key=seal_key, start=text)
    except Exception as exc:  # the table is missing: migrations were not run
        raise ConfigError(
            f"SIGNOFF_DATABASE_URL: cannot read policy_versions ({type(exc).__name__}); run `signoff db upgrade`"
        ) from None
    row = state.in_force
    if row is not None:
        return ActivePolicy(
            policy=parse_stored(row),
            yaml=row.yaml,
            source="database",
            where=f"policy_versions #{row.id}",
            row=row,
            applied_seq=state.applied_seq,
            in_force_seq=state.in_force_seq,
        )
    if unreadable is not None:
        raise unreadable
    policy = parse_policy(text, source=where)
    source: Literal["file", "bundled"] = "file" if path else "bundled"
    return ActivePolicy(policy=policy, yaml=text, source=source, where=where, applied_seq=state.applied_seq)


# -- applying --------------------------------------------------------------------------------


class PolicyRefused(Exception):
    """An apply that must not happen (nothing was stored); the message says why."""


def refusal(
    active: ActivePolicy, new: Policy, new_text: str, earlier: list[PolicyVersion], recorded: list[PolicyVersion]
) -> str | None:
    """Why ``new`` must not be applied over ``active`` (``None``: it may).

    ``earlier``: the rows that carried ``new.version`` before (applied, or recorded at start-up);
    ``recorded``: every row (versions are ordered: a lower one is refused)."""
    sha = sha256_hex(new_text)
    if active.source == "database" and sha == active.sha256:
        return f"nothing changed: this is the active policy (version {new.version}, {active.where})"
    if new.version == active.policy.version and sha != active.sha256:
        return (
            f"the content differs from the active policy but its version is still {new.version!r}: "
            "bump `version` to apply a change"
        )
    clash = next((r for r in earlier if r.sha256 != sha), None)
    if clash is not None:
        how = "in force at start-up" if clash.applied_by == AT_START else "applied before"
        return (
            f"version {new.version!r} was {how} with different content "
            f"(policy_versions #{clash.id}, {clash.applied_at:%Y-%m-%d %H:%M}Z, sha256 {clash.sha256[:12]}…): "
            "choose a new version"
        )
    return order_refusal(new.version, new_text, recorded, active=(active.policy.version, active.where))


def needs_second_supervisor(delta: list[Change]) -> bool:
    """Whether a change touches approvers, ceilings or rollout (:data:`SENSITIVE`)."""
    return any(c.path.split(".", 1)[0] in SENSITIVE for c in delta)


@dataclass(frozen=True, kw_only=True)
class Applied:
    """What an apply stored: the row, what it changes, and whether it waits for a second supervisor."""

    row: PolicyVersion
    changes: list[Change]
    pending: bool


async def apply_policy(
    versions: PolicyVersions, active: ActivePolicy, new: NewPolicyVersion, *, source: str, seal: Sealer | None = None
) -> Applied:
    """Validate and store ``new`` over ``active`` with its audit event: ``policy.applied`` (in
    force now; sealed by ``seal`` when an audit key is configured), or ``policy.proposed`` when
    it changes approvers, ceilings or rollout (in force once another supervisor approves).
    ``new.applied_by`` is an authenticated supervisor.

    Raises :class:`ConfigError` for an invalid file and :class:`PolicyRefused` for a refused apply."""
    policy = parse_policy(new.yaml, source=source, setting="")
    if policy.version != new.version:
        raise AssertionError("NewPolicyVersion.version must be the file's version")
    why = refusal(active, policy, new.yaml, await versions.with_version(policy.version), await versions.history(10_000))
    if why is not None:
        raise PolicyRefused(why)
    delta = changes(active.policy, policy)
    pending = needs_second_supervisor(delta)

    data: dict[str, Any] = {
        "from_version": active.policy.version,
        "from_source": active.where,
        "from_sha256": active.sha256,
        "from_seq": active.in_force_seq,
        "to_version": policy.version,
        "sha256": new.sha256,
        "changed": [c.path for c in delta if c.path != "version"],
        "applied_by": new.applied_by,
        "operator": new.operator,
        "file": source,
    }
    if seal is not None and not pending:
        data["seal"] = await seal(data)

    def event(row_id: int, at: datetime) -> AuditEvent:
        return AuditEvent(
            kind=PROPOSED if pending else APPLIED,
            principal=f"supervisor:{new.applied_by}",
            policy_version=policy.version,
            ts=at,
            data={**data, "row": row_id},
        )

    row = await versions.add(new, in_force=active.row, audit=event, after_seq=active.applied_seq)
    return Applied(row=row, changes=delta, pending=pending)


async def approve_policy(
    versions: PolicyVersions,
    active: ActivePolicy,
    row_id: int,
    *,
    approver: str,
    operator: str,
    seal: Sealer | None = None,
) -> PolicyVersion:
    """A second supervisor puts proposal ``row_id`` in force (``policy.applied`` naming the row,
    its sha256, who proposed and who approved; sealed by ``seal`` when configured). Refused
    (:class:`PolicyRefused`) when it is not pending, when the approver proposed it, or when
    another version came into force since."""
    state = await policy_state(versions, AuditLog(versions.db))
    found = next(((r, e) for r, e in state.pending if r.id == row_id), None)
    if found is None:
        raise PolicyRefused(f"policy_versions #{row_id} is not a proposal waiting for approval")
    row, proposed = found
    if row.applied_by == approver:
        raise PolicyRefused(f"{approver} proposed policy_versions #{row_id}; another supervisor must approve it")
    if proposed.data.get("from_sha256") != active.sha256:
        raise PolicyRefused(
            f"the policy in force changed since policy_versions #{row_id} was proposed: propose it again"
        )
    data = {
        **proposed.data,
        "from_seq": active.in_force_seq,
        "approved_by": approver,
        "approver_operator": operator,
        "proposed_at_seq": proposed.seq,
    }
    if seal is not None:
        data["seal"] = await seal(data)
    event = AuditEvent(kind=APPLIED, principal=f"supervisor:{approver}", policy_version=row.version, data=data)
    await versions.record(event=event, after_seq=active.applied_seq)
    return row


#: ``Change``, ``changes`` and ``unified_diff`` live in :mod:`agent.policy_diff`; imported from here too.
__all__ = [
    "REFRESH_EVERY_S",
    "SENSITIVE",
    "ActivePolicy",
    "Applied",
    "Change",
    "PolicyRefused",
    "PolicyState",
    "active_policy",
    "apply_policy",
    "approve_policy",
    "changes",
    "needs_second_supervisor",
    "parse_stored",
    "policy_state",
    "refusal",
    "refusal_to_force",
    "start_text",
    "unified_diff",
]
