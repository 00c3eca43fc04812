"""Verifying the partitioned audit log offline: every partition's chain, its head, and what
the joins and the signed checkpoints vouch for (see :mod:`storage.audit`).

The root partition is walked first, with the checkpoints' anchors; each ``audit.join`` it
holds (hash-checked like any row) names the other partitions' heads at that time, which then
anchor those partitions' walks. A checkpoint of the root therefore covers the whole log up
to its last join: a partition wiped, truncated or rewritten and re-chained below a join's
head fails, naming the root seq of the join that vouched for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, func, literal, null, select, union_all

from storage.audit import GENESIS_HASH, JOIN_KIND, ROOT, VerifyResult, chain_hash, genesis
from storage.db import Database
from storage.models import AuditEventRow, AuditHeadRow

_EVENTS = cast(Table, AuditEventRow.__table__)
_HEAD = cast(Table, AuditHeadRow.__table__)


@dataclass(frozen=True, kw_only=True)
class _Head:
    seq: int | None  # None: no head row
    hash: str | None
    max_pseq: int


@dataclass(frozen=True, kw_only=True)
class _Walked:
    """The last row a walk checked (or the trusted start): its position, hash and global seq."""

    seq: int
    hash: str
    gseq: int = 0


@dataclass(frozen=True)
class _Anchor:
    """A hash vouched for at a position, and the root seq that vouches (the checkpoint's, or the join's)."""

    hash: str
    by: int


_NO_HEAD = _Head(seq=None, hash=None, max_pseq=0)

#: Per partition: position → what vouches for its hash.
Claims = dict[int, dict[int, _Anchor]]


async def verify_log(
    db: Database, *, batch: int, anchors: Mapping[int, str], since: tuple[int, str] | None
) -> VerifyResult:
    """See :meth:`storage.audit.AuditLog.verify`."""
    heads = await _snapshot(db)
    claims: Claims = {ROOT: {seq: _Anchor(h, seq) for seq, h in anchors.items()}}
    starts = await _starts(db, since, claims)
    root = await _partition(
        db, ROOT, heads.get(ROOT, _NO_HEAD), starts.get(ROOT, _Walked(seq=0, hash=GENESIS_HASH)), batch, claims
    )
    if isinstance(root, VerifyResult):
        return root
    done = root.seq
    for part in sorted({*heads, *claims} - {ROOT}):  # the root's joins named theirs by now
        start = starts.get(part, _Walked(seq=0, hash=genesis(part)))
        walked = await _partition(db, part, heads.get(part, _NO_HEAD), start, batch, claims)
        if isinstance(walked, VerifyResult):
            return dataclasses.replace(walked, count=done + walked.count)
        done += walked.seq
    return VerifyResult(ok=True, count=done, head_hash=root.hash, head_seq=root.seq)


async def _partition(
    db: Database, part: int, head: _Head, start: _Walked, batch: int, claims: Claims
) -> VerifyResult | _Walked:
    """Walk one partition from ``start`` to its head; the root's joins add to ``claims``."""
    bound = head.seq if head.seq is not None else head.max_pseq
    if bound < start.seq:
        return _broken(
            part,
            bound + 1,
            f"the log ends at seq {bound}, before the checkpointed seq {start.seq}: rows deleted or the log wiped",
            checkpoint_seq=start.seq if part == ROOT else claims[part][start.seq].by,
        )
    walked = await _walk(db, part, start, bound, batch, claims)
    if isinstance(walked, VerifyResult):
        return walked
    return _check_end(part, head, claims.get(part, {}), walked)


async def _starts(db: Database, since: tuple[int, str] | None, claims: Claims) -> dict[int, _Walked]:
    """Where each partition's walk starts: after ``since`` in the root and, elsewhere, after the
    heads named by the last join at or before it (trusted, as ``since`` is)."""
    if since is None:
        return {}
    starts = {ROOT: _Walked(seq=since[0], hash=since[1])}
    stmt = (
        select(_EVENTS.c.pseq, _EVENTS.c.data)
        .where(_EVENTS.c.part == ROOT, _EVENTS.c.kind == JOIN_KIND, _EVENTS.c.pseq <= since[0])
        .order_by(_EVENTS.c.pseq.desc())
        .limit(1)
    )
    async with db.sessions() as s, s.begin():
        found = (await s.execute(stmt)).first()
    if found is not None:
        for part, (seq, hash_) in _join_heads(found.data).items():
            starts[part] = _Walked(seq=seq, hash=hash_)
            claims.setdefault(part, {})[seq] = _Anchor(hash_, int(found.pseq))
    return starts


def _join_heads(data: Any) -> dict[int, tuple[int, str]]:
    """The heads a join names: ``{partition: (position, hash)}`` (``ValueError`` if malformed)."""
    heads = data.get("heads") if isinstance(data, dict) else None
    if not isinstance(heads, dict):
        raise ValueError("a join without heads")
    out = {}
    for part, value in heads.items():
        seq, hash_ = value
        if not isinstance(seq, int) or not isinstance(hash_, str) or int(part) == ROOT:
            raise ValueError("a malformed join head")
        out[int(part)] = (seq, hash_)
    return out


async def _walk(
    db: Database, part: int, start: _Walked, bound: int, batch: int, claims: Claims
) -> VerifyResult | _Walked:
    """Check every row of ``part`` after ``start`` up to ``bound``: the first broken one, or where the walk ended."""
    last, matched = start, start.seq
    signed = claims.setdefault(part, {})
    while last.seq < bound:
        try:
            rows = await _batch(db, part, last.seq, bound, batch)
        except (ValueError, TypeError):  # a column the driver cannot decode (garbled JSON, time)
            return await _garbled(db, part, last.seq, min(bound, last.seq + batch))
        if not rows:
            return _broken(part, last.seq + 1, f"deleted tail: the head is at seq {bound}")
        for row in rows:
            values = dict(row._mapping)
            broken = _check_row(part, values, last, signed.get(values["pseq"]), matched)
            if broken is None and part == ROOT and values["kind"] == JOIN_KIND:
                broken = _claim(values, claims)
            if broken is not None:
                return broken
            if values["pseq"] in signed:
                matched = values["pseq"]
            last = _Walked(seq=values["pseq"], hash=values["hash"], gseq=values["seq"])
    return last


def _claim(values: dict[str, Any], claims: Claims) -> VerifyResult | None:
    """Add the heads a (hash-checked) join names to ``claims``."""
    try:
        heads = _join_heads(values["data"])
    except (ValueError, TypeError):
        return _broken(ROOT, values["pseq"], "a join names no partition heads (malformed)")
    for part, (seq, hash_) in heads.items():
        claims.setdefault(part, {}).setdefault(seq, _Anchor(hash_, values["pseq"]))
    return None


async def _garbled(db: Database, part: int, after_seq: int, upto_seq: int) -> VerifyResult:
    """The first row after ``after_seq`` that cannot be read (one batch failed to decode)."""
    for seq in range(after_seq + 1, upto_seq + 1):
        try:
            await _batch(db, part, seq - 1, seq, 1)
        except (ValueError, TypeError) as exc:
            return _broken(part, seq, f"the row cannot be read (garbled: {type(exc).__name__})")
    return _broken(part, after_seq + 1, "a row cannot be read (garbled)")


async def row_intact(db: Database, seq: int) -> bool:
    """See :meth:`storage.audit.AuditLog.row_intact`."""
    async with db.sessions() as s, s.begin():
        found = (await s.execute(select(_EVENTS.c.part, _EVENTS.c.pseq).where(_EVENTS.c.seq == seq))).first()
    if found is None:
        return False
    part, pseq = int(found.part), int(found.pseq)
    by_pos = {r._mapping["pseq"]: dict(r._mapping) for r in await _batch(db, part, max(pseq - 2, 0), pseq, 2)}
    row = by_pos.get(pseq)
    if row is None or (pseq > 1 and pseq - 1 not in by_pos):
        return False
    prev_hash = by_pos[pseq - 1]["hash"] if pseq > 1 else genesis(part)
    return _check_row(part, row, _Walked(seq=pseq - 1, hash=prev_hash), None, pseq - 1) is None


async def _snapshot(db: Database) -> dict[int, _Head]:
    """Every partition's head and highest stored position, read in one statement (one
    snapshot); a partition with rows and no head row too."""
    top = select(func.max(_EVENTS.c.pseq)).where(_EVENTS.c.part == _HEAD.c.id).scalar_subquery()
    with_head = select(_HEAD.c.id, _HEAD.c.seq, _HEAD.c.hash, func.coalesce(top, 0), literal(1))
    headless = (
        select(_EVENTS.c.part, null(), null(), func.max(_EVENTS.c.pseq), literal(0))
        .where(_EVENTS.c.part.not_in(select(_HEAD.c.id)))
        .group_by(_EVENTS.c.part)
    )
    async with db.sessions() as s, s.begin():
        rows = (await s.execute(union_all(with_head, headless))).all()
    return {
        int(part): _Head(seq=int(seq) if has else None, hash=hash_ if has else None, max_pseq=int(top_seq or 0))
        for part, seq, hash_, top_seq, has in rows
    }


async def _batch(db: Database, part: int, after_seq: int, upto_seq: int, limit: int) -> Sequence[Any]:
    where = (_EVENTS.c.part == part) & (_EVENTS.c.pseq > after_seq) & (_EVENTS.c.pseq <= upto_seq)
    stmt = select(_EVENTS).where(where).order_by(_EVENTS.c.pseq).limit(limit)
    async with db.sessions() as s, s.begin():
        return (await s.execute(stmt)).all()


def _check_row(
    part: int, values: dict[str, Any], last: _Walked, signed: _Anchor | None, matched: int
) -> VerifyResult | None:
    """The row after ``last``: in place, linked, intact and, when vouched for, the row vouched for."""
    seq = values["pseq"]
    if seq != last.seq + 1:
        return _broken(part, last.seq + 1, f"missing row: next row is seq {seq}")
    if values["prev_hash"] != last.hash:
        return _broken(part, seq, "prev_hash does not link to the previous row")
    if chain_hash(last.hash, values) != values["hash"]:
        return _broken(part, seq, "hash does not match the row's contents")
    if values["seq"] <= last.gseq:
        return _broken(part, seq, f"out of order: global seq {values['seq']} is not after {last.gseq}")
    if signed is not None and signed.hash != values["hash"]:
        return _broken(
            part,
            seq,
            f"seq {seq} is not the row its checkpoint signed: history between "
            f"seq {matched + 1} and {seq} was rewritten and re-chained",
            checkpoint_seq=signed.by,
        )
    return None


def _check_end(part: int, head: _Head, signed: Mapping[int, _Anchor], last: _Walked) -> VerifyResult | _Walked:
    """Where the walk of ``part`` ended against what vouches for it and its head row."""
    beyond = [seq for seq in signed if seq > last.seq]
    if beyond:
        top = max(beyond)
        return _broken(
            part,
            last.seq + 1,
            f"checkpointed seq {top} is gone: the log ends at seq {last.seq} "
            "(rows deleted or the log wiped, the head rewritten to match)",
            checkpoint_seq=max(signed[s].by for s in beyond),
        )
    if head.seq is None:
        if last.seq == 0:
            return last
        return _broken(part, last.seq, "the audit head row is missing")
    if head.hash != last.hash:
        return _broken(part, last.seq, "the head hash does not match the last row")
    if head.max_pseq > head.seq:
        return _broken(part, head.seq + 1, f"row beyond the head (seq {head.seq}): inserted")
    return last


def _broken(part: int, seq: int, reason: str, *, checkpoint_seq: int | None = None) -> VerifyResult:
    where = "" if part == ROOT else f"partition {part}: "
    return VerifyResult(
        ok=False, count=seq - 1, broken_seq=seq, reason=where + reason, checkpoint_seq=checkpoint_seq, part=part
    )


__all__ = ["row_intact", "verify_log"]
