"""What a policy version string means: one text for ever, and an order (CalVer).

The version a process starts with (``SIGNOFF_POLICY_FILE`` or the bundled default) is recorded
as a ``policy_versions`` row the first time it is seen (:func:`record_start`), so no later apply
can give that version string other content. Versions compare as CalVer (``2026.12.4`` <
``2026.12.10`` < ``2027.1``): an apply of a version lower than one already recorded is refused,
except the identical text of a recorded version again (a rollback). A run pins the version it
started with; :func:`stored_version` reads one back by its string.
"""

from __future__ import annotations

import logging
import re
from datetime import date

from agent.errors import ConfigError
from agent.policy import Policy, parse_policy
from storage.audit import sha256_hex
from storage.db import Database
from storage.policies import AT_START, PolicyVersion, PolicyVersions

log = logging.getLogger(__name__)

_CALVER = re.compile(r"^\d{4}(\.\d{1,4}){1,3}$")


def calver(version: str) -> tuple[int, ...] | None:
    """``2026.12.4`` as ``(2026, 12, 4)``; ``None`` for a version that is not CalVer (year first)."""
    return tuple(int(part) for part in version.split(".")) if _CALVER.match(version) else None


def order_refusal(
    version: str, text: str, recorded: list[PolicyVersion], *, active: tuple[str, str] | None = None
) -> str | None:
    """Why ``version`` must not be applied given every ``recorded`` row and the ``active``
    (version, where) (``None``: it may)."""
    key = calver(version)
    if key is None:
        return f"version {version!r} is not CalVer (YYYY.MM.N, e.g. 2026.12.4): versions must be ordered"
    sha = sha256_hex(text)
    if any(r.version == version and r.sha256 == sha for r in recorded):
        return None  # the identical text of a recorded version: a rollback
    if active is not None and (calver(active[0]) or ()) >= key:
        return f"version {version!r} is not above the active {active[0]!r} ({active[1]}): choose a higher version"
    higher = [r for r in recorded if (calver(r.version) or ()) >= key]
    if higher:
        top = max(higher, key=lambda r: calver(r.version) or ())
        return f"version {version!r} is not above {top.version!r} (policy_versions #{top.id}): choose a higher version"
    return None


def next_version(version: str, today: date) -> str:
    """The version after ``version``: this month's first (``YYYY.M.1``) or, when that is not
    higher, ``version`` with its last part one higher."""
    key = calver(version) or (today.year, today.month, 0)
    bumped = (*key[:-1], key[-1] + 1) if len(key) > 2 else (*key, 1)
    month = (today.year, today.month, 1)
    return ".".join(str(n) for n in (month if month > bumped else bumped))


async def record_start(versions: PolicyVersions, version: str, text: str, *, source: str) -> PolicyVersion:
    """Record the start-up version (its row and ``policy.recorded`` event) the first time it is
    seen; a :class:`ConfigError` when that version string is stored with other content."""
    row = await versions.record_seen(version, text, source=source)
    if row.sha256 != sha256_hex(text):
        how = "recorded at start-up" if row.applied_by == AT_START else f"applied by {row.applied_by}"
        raise ConfigError(
            f"SIGNOFF_POLICY_FILE: {source}: version {version!r} was {how} with other content "
            f"(policy_versions #{row.id}, sha256 {row.sha256[:12]}…): bump `version`"
        )
    return row


async def stored_version(db: Database, version: str) -> Policy | None:
    """The policy a stored version string names (its newest row: they all hold one text)."""
    rows = await PolicyVersions(db).with_version(version)
    if not rows:
        return None
    row = rows[-1]
    try:
        return parse_policy(row.yaml, source=f"policy_versions #{row.id} (version {row.version})", setting="")
    except ConfigError as exc:
        log.error("policy version %s cannot be read back: %s", version, exc)
        return None
