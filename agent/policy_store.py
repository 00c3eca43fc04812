"""The versioned policy in the database: which one is active, what a new file changes,
applying it (refusals, the audit event) and picking up a newly applied one while running.

The active policy is the newest version applied to the database (``signoff policy apply``);
until one is applied it is ``SIGNOFF_POLICY_FILE``, else the bundled default. Applying
never edits: each apply adds a row and its ``policy.applied`` audit event in one transaction.
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
from storage.audit import AuditEvent, sha256_hex
from storage.policies import NewPolicyVersion, PolicyVersion, PolicyVersions

log = logging.getLogger(__name__)

#: How often a running process checks for a newly applied version (one ``max(id)`` query).
REFRESH_EVERY_S = 5.0


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


async def active_policy(versions: PolicyVersions, path: Path | None) -> ActivePolicy:
    """The newest applied version, else the policy file (``path``), else the bundled default."""
    try:
        row = await versions.latest()
    except Exception as exc:  # the table is missing: migrations were not run
        raise ConfigError(
            f"SIGNOFF_DATABASE_URL: cannot read policy_versions ({type(exc).__name__}); run `signoff db upgrade`"
        ) from None
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


def refusal(active: ActivePolicy, new: Policy, new_text: str, earlier: list[PolicyVersion]) -> str | None:
    """Why ``new`` must not be applied over ``active`` (``None``: it may).

    ``earlier``: the applied rows that carried ``new.version`` before."""
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
        return (
            f"version {new.version!r} was applied before with different content "
            f"(policy_versions #{clash.id}, {clash.applied_at:%Y-%m-%d %H:%M}Z, sha256 {clash.sha256[:12]}…): "
            "choose a new version"
        )
    return None


async def apply_policy(
    versions: PolicyVersions, active: ActivePolicy, new: NewPolicyVersion, *, source: str
) -> tuple[PolicyVersion, list[Change]]:
    """Validate and store ``new`` after ``active`` with its ``policy.applied`` audit event.

    Raises :class:`ConfigError` for an invalid file and :class:`PolicyRefused` for a refused apply."""
    policy = parse_policy(new.yaml, source=source, setting="")
    if policy.version != new.version:
        raise AssertionError("NewPolicyVersion.version must be the file's version")
    why = refusal(active, policy, new.yaml, await versions.with_version(policy.version))
    if why is not None:
        raise PolicyRefused(why)
    delta = changes(active.policy, policy)

    def event(row_id: int, at: datetime) -> AuditEvent:
        return AuditEvent(
            kind="policy.applied",
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

    row = await versions.apply(new, after=active.row, audit=event)
    return row, delta


# -- picking up a newly applied version --------------------------------------------------------


class PolicyRefresher:
    """Polls the newest applied row id; when it moves, parses that version and hands it to ``use``.

    One ``max(id)`` query per period, outside any turn; a version that fails to parse is logged
    and the running policy kept."""

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

    async def check(self) -> bool:
        """Pick up a newer applied version now; whether one was taken."""
        newest = await self.versions.latest_id()
        if newest is None or newest == self.seen_id:
            return False
        row = await self.versions.latest()
        if row is None:
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
