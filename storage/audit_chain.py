"""The audit log's records and how its chains are made: what an event is, which partition
it belongs to, and the hash that links it to the one before (:mod:`storage.audit` appends
and reads them, and re-exports all of this).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from storage.canonical import canonical_json, iso_utc, jsonable, sha256_hex, utc
from storage.records import wall_clock

GENESIS_HASH = "0" * 64
STR_FIELDS = (
    "run_id", "proposal_id", "trace_id", "principal", "tool", "args_hash",
    "idempotency_key", "model", "prompt_version", "policy_version",
)  # fmt: skip


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, kw_only=True)
class AuditEvent:
    """One thing that happened: a proposal, gate decision, confirmation, approval
    transition or execution. ``data`` must be JSON-safe and carry personal data
    only as :func:`hash_personal` references."""

    kind: str
    run_id: str | None = None
    proposal_id: str | None = None
    trace_id: str | None = None
    principal: str | None = None
    tool: str | None = None
    args_hash: str | None = None
    idempotency_key: str | None = None
    model: str | None = None
    prompt_version: str | None = None
    policy_version: str | None = None
    latency_ms: float | None = None
    data: dict[str, Any] = field(default_factory=dict)
    #: When it happened: the injected clock's time (``Services.clock``); the real time if none is given.
    ts: datetime = field(default_factory=wall_clock)

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not self.kind:
            raise ValueError("AuditEvent.kind must be a non-empty str")
        for name in STR_FIELDS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"AuditEvent.{name} must be str or None, got {type(value).__name__}")


@dataclass(frozen=True, kw_only=True)
class AuditRecord(AuditEvent):
    """A stored audit event: its global ``seq``, its partition ``part`` and position ``pseq``
    there, and its link in that partition's chain (``ts`` in UTC)."""

    seq: int
    part: int
    pseq: int
    prev_hash: str
    hash: str


@dataclass(frozen=True, kw_only=True)
class VerifyResult:
    """Outcome of :meth:`AuditLog.verify`.

    ``count`` is the number of rows verified (all when ``ok``, else those
    before the break); ``broken_seq`` is the position in partition ``part``
    at which a chain is wrong. ``head_seq`` and ``head_hash`` are the root
    partition's verified head: what a checkpoint signs.
    """

    ok: bool
    count: int
    broken_seq: int | None = None
    reason: str | None = None
    head_hash: str | None = None
    #: The checkpointed root seq that vouched for what the log failed to match, when one did.
    checkpoint_seq: int | None = None
    #: The partition of the break (``None`` when ``ok``).
    part: int | None = None
    head_seq: int = 0


# --------------------------------------------------------------------------- partitions and hashing

#: The partition of events without a run, of the joins and of every event from before partitions.
ROOT = 1
#: How many partitions runs are spread over (ids ``ROOT + 1`` .. ``ROOT + PARTITIONS``; the
#: migration creates their head rows, so changing it needs a migration).
PARTITIONS = 16
#: The root event that records every other partition's head.
JOIN_KIND = "audit.join"
_GENESIS_PREFIX = "signoff/audit-partition/v1\x00"
_HASHED_FIELDS = ("ts", "kind", *STR_FIELDS, "latency_ms", "data")


def partition_of(run_id: str | None) -> int:
    """The partition a run's events go to (the root for events without a run)."""
    if run_id is None:
        return ROOT
    return ROOT + 1 + zlib.crc32(run_id.encode("utf-8")) % PARTITIONS


def genesis(part: int) -> str:
    """The hash a partition's first event links to (the root's is :data:`GENESIS_HASH`, as
    the single chain's always was)."""
    return GENESIS_HASH if part == ROOT else sha256_hex(f"{_GENESIS_PREFIX}{part}")


def row_values(part: int, pseq: int, prev_hash: str, event: AuditEvent) -> dict[str, Any]:
    """Column values for ``event`` at position ``pseq`` of ``part``, normalised so they hash
    identically before insert and after reading back on either database (``seq`` is the
    database's)."""
    values: dict[str, Any] = {name: getattr(event, name) for name in STR_FIELDS}
    values["part"] = part
    values["pseq"] = pseq
    values["kind"] = event.kind
    values["ts"] = utc(event.ts)
    values["latency_ms"] = None if event.latency_ms is None else float(event.latency_ms)
    values["data"] = jsonable(event.data)
    values["prev_hash"] = prev_hash
    values["hash"] = chain_hash(prev_hash, values)
    return values


def chain_hash(prev_hash: str, fields: dict[str, Any]) -> str:
    """``sha256(prev_hash + canonical_json(event fields incl. its position and ts))``.

    The position is hashed under the name ``seq`` (``fields["pseq"]``): a row written before
    partitions hashes exactly as it did. ``fields`` may hold extra keys (``prev_hash``,
    ``hash``, the global ``seq``); only the event's own fields are hashed.
    """
    body = {name: fields[name] for name in _HASHED_FIELDS}
    body["seq"] = fields["pseq"]
    body["ts"] = iso_utc(body["ts"])
    return sha256_hex(prev_hash + canonical_json(body))
