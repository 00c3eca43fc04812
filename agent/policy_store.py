"""The versioned policy in the database: which one is in force, what a new file changes,
applying it (refusals, the audit event, the second supervisor) and picking up a newly applied
one while running.

The policy in force is the row named by the newest ``policy.applied`` audit event whose row id
and sha256 match the row and whose audit row is intact in the chain; until one exists it is
``SIGNOFF_POLICY_FILE``, else the bundled default. A row without such an event (one inserted
straight into ``policy_versions``) is ignored and logged. A change to approvers, ceilings or
rollout is stored as ``policy.proposed`` and comes into force only when a second supervisor
approves it (:func:`approve_policy`).
"""

from __future__ import annotations

import asyncio
import difflib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from agent.errors import ConfigError
from agent.policy import Policy, parse_policy, read_policy_text
from agent.policy_versions import order_refusal
from storage.audit import AuditEvent, AuditLog, sha256_hex
from storage.policies import APPLIED, AT_START, PROPOSED, NewPolicyVersion, PolicyEvent, PolicyVersion, PolicyVersions

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


async def policy_state(versions: PolicyVersions, audit: AuditLog) -> PolicyState:
    """Read the policy events and rows: the in-force row is the newest ``policy.applied`` event
    that matches its row and is intact in the chain; rows no event names are logged, ignored."""
    events = await versions.events()
    in_force: PolicyVersion | None = None
    for event in reversed([e for e in events if e.kind == APPLIED]):
        row = await versions.get(event.row)
        if row is not None and row.sha256 == event.sha256 == sha256_hex(row.yaml) and await audit.row_intact(event.seq):
            in_force = row
            break
        log.error("policy.applied at audit seq %s does not match policy_versions #%s: ignored", event.seq, event.row)
    applied = {e.row for e in events if e.kind == APPLIED}
    pending = []
    for event in events:
        if event.kind == PROPOSED and event.row not in applied:
            row = await versions.get(event.row)
            if row is not None and row.sha256 == event.sha256:
                pending.append((row, event))
    named = {e.row for e in events}
    ids = await versions.ids()
    for raw in (i for i in ids if i not in named):
        log.warning("policy_versions #%s has no policy audit event (inserted outside `signoff policy`): ignored", raw)
    return PolicyState(
        in_force=in_force,
        pending=tuple(pending),
        event_seq=events[-1].seq if events else None,
        row_id=ids[-1] if ids else None,
    )


async def active_policy(versions: PolicyVersions, path: Path | None, audit: AuditLog | None = None) -> ActivePolicy:
    """The version in force (see :func:`policy_state`), else the policy file (``path``), else the
    bundled default."""
    try:
        state = await policy_state(versions, audit or AuditLog(versions.db))
    except Exception as exc:  # the table is missing: migrations were not run
        raise ConfigError(
            f"SIGNOFF_DATABASE_URL: cannot read policy_versions ({type(exc).__name__}); run `signoff db upgrade`"
        ) from None
    row = state.in_force
    if row is not None:
        return ActivePolicy(
            policy=parse_stored(row), yaml=row.yaml, source="database", where=f"policy_versions #{row.id}", row=row
        )
    text, where = read_policy_text(path)
    policy = parse_policy(text, source=where)
    return ActivePolicy(policy=policy, yaml=text, source="file" if path else "bundled", where=where)


# -- what changes ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Change:
    """One key path whose value differs (``rollout.channels.slack.customer``)."""

    path: str
    old: Any
    new: Any

    def line(self) -> str:
        if isinstance(self.old, list) and isinstance(self.new, list):
            gone = [v for v in self.old if v not in self.new]
            added = [v for v in self.new if v not in self.old]
            return f"{self.path}: " + ", ".join([*(f"+{v}" for v in added), *(f"-{v}" for v in gone)])
        return f"{self.path}: {_show(self.old)} -> {_show(self.new)}"


_ABSENT = object()


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for key in sorted(value, key=str):
            _flatten(value[key], f"{prefix}.{key}" if prefix else str(key), out)
        return
    out[prefix] = sorted(value, key=str) if isinstance(value, list | set | frozenset) else value


def changes(old: Policy, new: Policy) -> list[Change]:
    """Every key path whose value differs between ``old`` and ``new`` (defaults filled in), sorted."""
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    _flatten(old.model_dump(mode="python"), "", a)
    _flatten(new.model_dump(mode="python"), "", b)
    paths = sorted(set(a) | set(b))
    return [
        Change(path=p, old=a.get(p, _ABSENT), new=b.get(p, _ABSENT))
        for p in paths
        if a.get(p, _ABSENT) != b.get(p, _ABSENT)
    ]


def unified_diff(old_text: str, new_text: str, *, old_name: str, new_name: str) -> str:
    """A unified diff of the two YAML texts."""
    return "".join(
        difflib.unified_diff(
            old_text.splitlines(keepends=True), new_text.splitlines(keepends=True), fromfile=old_name, tofile=new_name
        )
    )


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
    versions: PolicyVersions, active: ActivePolicy, new: NewPolicyVersion, *, source: str
) -> Applied:
    """Validate and store ``new`` over ``active`` with its audit event: ``policy.applied`` (in
    force now), or ``policy.proposed`` when it changes approvers, ceilings or rollout (in force
    once another supervisor approves). ``new.applied_by`` is an authenticated supervisor.

    Raises :class:`ConfigError` for an invalid file and :class:`PolicyRefused` for a refused apply."""
    policy = parse_policy(new.yaml, source=source, setting="")
    if policy.version != new.version:
        raise AssertionError("NewPolicyVersion.version must be the file's version")
    why = refusal(active, policy, new.yaml, await versions.with_version(policy.version), await versions.history(10_000))
    if why is not None:
        raise PolicyRefused(why)
    delta = changes(active.policy, policy)
    pending = needs_second_supervisor(delta)

    def event(row_id: int, at: datetime) -> AuditEvent:
        return AuditEvent(
            kind=PROPOSED if pending else APPLIED,
            principal=f"supervisor:{new.applied_by}",
            policy_version=policy.version,
            ts=at,
            data={
                "from_version": active.policy.version,
                "from_source": active.where,
                "from_sha256": active.sha256,
                "to_version": policy.version,
                "sha256": new.sha256,
                "row": row_id,
                "changed": [c.path for c in delta if c.path != "version"],
                "applied_by": new.applied_by,
                "operator": new.operator,
                "file": source,
            },
        )

    row = await versions.add(new, in_force=active.row, audit=event)
    return Applied(row=row, changes=delta, pending=pending)


async def approve_policy(
    versions: PolicyVersions, active: ActivePolicy, row_id: int, *, approver: str, operator: str
) -> PolicyVersion:
    """A second supervisor puts proposal ``row_id`` in force (``policy.applied`` naming the row,
    its sha256, who proposed and who approved). Refused (:class:`PolicyRefused`) when it is not
    pending, when the approver proposed it, or when another version came into force since."""
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
    event = AuditEvent(
        kind=APPLIED,
        principal=f"supervisor:{approver}",
        policy_version=row.version,
        data={**proposed.data, "approved_by": approver, "approver_operator": operator, "proposed_at_seq": proposed.seq},
    )
    await versions.record(in_force=active.row, event=event)
    return row


# -- picking up a newly applied version --------------------------------------------------------


class PolicyRefresher:
    """Polls the newest policy audit event and row id; when either moves, reads which version
    is in force (:func:`policy_state`) and hands a new one to ``use``.

    Two indexed ``max`` queries per period, outside any turn; a row inserted without its audit
    event is logged and ignored; a version that fails to parse is logged and the running policy
    kept."""

    def __init__(
        self,
        versions: PolicyVersions,
        use: Callable[[Policy], None],
        *,
        seen_id: int | None,
        every_s: float = REFRESH_EVERY_S,
    ) -> None:
        self.versions = versions
        self.use = use
        self.seen_id = seen_id
        self.every_s = every_s
        self._marks: tuple[int | None, int | None] | None = None

    async def check(self) -> bool:
        """Pick up a version newly in force now; whether one was taken."""
        marks = (await self.versions.latest_event_seq(), await self.versions.latest_id())
        if marks == self._marks:
            return False
        self._marks = marks
        row = (await policy_state(self.versions, AuditLog(self.versions.db))).in_force
        if row is None or row.id == self.seen_id:
            return False
        self.seen_id = row.id
        try:
            policy = parse_stored(row)
        except ConfigError as exc:
            log.error("policy version not taken, the running policy stays: %s", exc)
            return False
        self.use(policy)
        log.info(
            "policy version %s now in force (policy_versions #%s, applied by %s)", row.version, row.id, row.applied_by
        )
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Check every ``every_s`` seconds until ``stop`` is set (a failed check is logged and retried)."""
        while not stop.is_set():
            try:
                await self.check()
            except Exception:
                log.exception("policy refresh failed; retrying")
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.every_s)
            except TimeoutError:
                pass
