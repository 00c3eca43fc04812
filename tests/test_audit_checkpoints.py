"""Signed checkpoints of the audit head (storage/checkpoints.py): the tampering a bare
hash chain cannot see — a wiped log, a truncated tail with the head rewritten, an edit or a
row swap re-chained to the end — fails `verify` against the checkpoints, naming what is
wrong; an untampered busy log passes; bad signatures and malformed lines are refused."""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Table, delete, select, text, update

from storage import checkpoints as cps
from storage.audit import JOIN_KIND, ROOT, AuditEvent, AuditLog, chain_hash, genesis, partition_of
from storage.db import Database
from storage.models import AuditEventRow, AuditHeadRow

EVENTS = cast(Table, AuditEventRow.__table__)
HEAD = cast(Table, AuditHeadRow.__table__)
N = 40


def ev(i: int, run_id: str | None = None) -> AuditEvent:
    """An event of the root partition (no run), or of ``run_id``'s."""
    return AuditEvent(kind="proposal", run_id=run_id, proposal_id=f"prop_{i}", data={"i": i})


async def append_n(log: AuditLog, start: int, n: int, run_id: str | None = None) -> None:
    for i in range(start, start + n):
        await log.append(ev(i, run_id))


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "keys" / "audit.pem", tmp_path / "elsewhere" / "checkpoints.jsonl"


async def checkpointed(db: Database, files: tuple[Path, Path]) -> AuditLog:
    """40 events with signed checkpoints at seq 20 and seq 40."""
    key_file, cp_file = files
    log = AuditLog(db)
    await append_n(log, 1, 20)
    assert (await cps.take(log, key_file=key_file, checkpoint_file=cp_file)) is not None
    await append_n(log, 21, 20)
    cp = await cps.take(log, key_file=key_file, checkpoint_file=cp_file)
    assert cp is not None and cp.seq == N
    return log


async def tamper(db: Database, work: Callable[[Any], Awaitable[None]]) -> None:
    """Run ``work`` as someone who can switch the PostgreSQL guards off (a superuser)."""
    async with db.sessions() as s, s.begin():
        if db.is_postgres:
            await s.execute(text("ALTER TABLE audit_events DISABLE TRIGGER USER"))
            await s.execute(text("ALTER TABLE audit_head DISABLE TRIGGER USER"))
        await work(s)
        if db.is_postgres:
            await s.execute(text("ALTER TABLE audit_events ENABLE TRIGGER USER"))
            await s.execute(text("ALTER TABLE audit_head ENABLE TRIGGER USER"))


async def rechain(s: Any, from_seq: int, part: int = ROOT) -> None:
    """Recompute prev_hash and hash from ``from_seq`` to the end of ``part``, and its head: a forger's finish."""
    mine = EVENTS.c.part == part
    prev = genesis(part)
    if from_seq > 1:
        prev = (await s.execute(select(EVENTS.c.hash).where(mine, EVENTS.c.pseq == from_seq - 1))).scalar_one()
    rows = (await s.execute(select(EVENTS).where(mine, EVENTS.c.pseq >= from_seq).order_by(EVENTS.c.pseq))).all()
    seq = from_seq - 1
    for r in rows:
        values = dict(r._mapping)
        new_hash = chain_hash(prev, values)
        await s.execute(update(EVENTS).where(EVENTS.c.seq == values["seq"]).values(prev_hash=prev, hash=new_hash))
        prev, seq = new_hash, values["pseq"]
    await s.execute(update(HEAD).where(HEAD.c.id == part).values(seq=seq, hash=prev))


Tamper = Callable[[Any, int], Awaitable[None]]


async def wipe(s: Any, part: int = ROOT) -> None:
    await s.execute(delete(EVENTS).where(EVENTS.c.part == part))
    await s.execute(update(HEAD).where(HEAD.c.id == part).values(seq=0, hash=genesis(part)))


async def truncate_tail(s: Any, part: int = ROOT) -> None:
    mine = EVENTS.c.part == part
    await s.execute(delete(EVENTS).where(mine, EVENTS.c.pseq > 30))
    h30 = (await s.execute(select(EVENTS.c.hash).where(mine, EVENTS.c.pseq == 30))).scalar_one()
    await s.execute(update(HEAD).where(HEAD.c.id == part).values(seq=30, hash=h30))


async def edit_and_rechain(s: Any, part: int = ROOT) -> None:
    where = (EVENTS.c.part == part) & (EVENTS.c.pseq == 17)
    await s.execute(update(EVENTS).where(where).values(kind="forged", data={"i": 999}))
    await rechain(s, 17, part)


async def swap_and_rechain(s: Any, part: int = ROOT) -> None:
    at = {q: (EVENTS.c.part == part) & (EVENTS.c.pseq == q) for q in (10, 25)}
    a, b = [dict((await s.execute(select(EVENTS).where(at[q]))).one()._mapping) for q in (10, 25)]
    for q, src in ((10, b), (25, a)):
        values = {c: v for c, v in src.items() if c not in {"seq", "part", "pseq", "hash", "prev_hash"}}
        await s.execute(update(EVENTS).where(at[q]).values(values))
    await rechain(s, 10, part)


@pytest.mark.parametrize(
    ("work", "needle", "broken_seq"),
    [
        (wipe, "checkpointed seq 40 is gone: the log ends at seq 0", 1),
        (truncate_tail, "checkpointed seq 40 is gone: the log ends at seq 30", 31),
        (edit_and_rechain, "history between seq 1 and 20 was rewritten", 20),
        (swap_and_rechain, "history between seq 1 and 20 was rewritten", 20),
    ],
    ids=["wipe", "tail-truncated-head-rewritten", "edit-rechained", "swap-rechained"],
)
async def test_tampering_the_chain_cannot_see_fails_against_the_checkpoints(
    any_db: Database, files: tuple[Path, Path], work: Any, needle: str, broken_seq: int
) -> None:
    """The bare chain verifies after each of these (that is the gap); the checkpoints do not,
    and the reason names the problem and the checkpoint's line."""
    log = await checkpointed(any_db, files)
    await tamper(any_db, work)
    assert (await log.verify()).ok, "the bare chain should not notice this tampering"
    result, count = await cps.verify_against(log, key_file=files[0], checkpoint_file=files[1])
    assert count == 2
    assert not result.ok and result.broken_seq == broken_seq
    assert needle in (result.reason or "") and "checkpoint on line" in (result.reason or "")


RUN = "run_checkpointed"
PART = partition_of(RUN)


@pytest.mark.parametrize(
    ("work", "needle", "broken_seq", "line"),
    [
        (wipe, "checkpointed seq 40 is gone: the log ends at seq 0", 1, 2),
        (truncate_tail, "checkpointed seq 40 is gone: the log ends at seq 30", 31, 2),
        (edit_and_rechain, "history between seq 1 and 20 was rewritten", 20, 1),
        (swap_and_rechain, "history between seq 1 and 20 was rewritten", 20, 1),
    ],
    ids=["wipe", "tail-truncated-head-rewritten", "edit-rechained", "swap-rechained"],
)
async def test_tampering_a_partition_fails_against_the_join_its_checkpoint_signed(
    any_db: Database, files: tuple[Path, Path], work: Tamper, needle: str, broken_seq: int, line: int
) -> None:
    """A run's partition, checkpointed through the joins at 20 and 40 events, then wiped,
    truncated or rewritten and re-chained with its head to match: verify names the partition,
    the position, and the checkpoint whose join vouched for it."""
    key_file, cp_file = files
    log = AuditLog(any_db)
    await append_n(log, 1, 20, RUN)
    assert (await cps.take(log, key_file=key_file, checkpoint_file=cp_file)) is not None
    await append_n(log, 21, 20, RUN)
    await append_n(log, 100, 3)  # the root moves on past the last join too
    assert (await cps.take(log, key_file=key_file, checkpoint_file=cp_file)) is not None
    assert (await log.verify()).ok

    await tamper(any_db, lambda s: work(s, PART))
    result, count = await cps.verify_against(log, key_file=key_file, checkpoint_file=cp_file)
    assert count == 2
    assert (result.ok, result.part, result.broken_seq) == (False, PART, broken_seq)
    assert needle in (result.reason or "") and f"checkpoint on line {line} " in (result.reason or "")


async def test_a_partition_without_a_join_still_verifies_against_its_head(
    any_db: Database, files: tuple[Path, Path]
) -> None:
    """Rows appended after the last checkpoint are held by their partition's head: deleting
    one is caught even before any join names it."""
    key_file, cp_file = files
    log = AuditLog(any_db)
    await append_n(log, 1, 3)
    await cps.take(log, key_file=key_file, checkpoint_file=cp_file)
    await append_n(log, 1, 5, RUN)

    async def work(s: Any) -> None:
        await s.execute(delete(EVENTS).where(EVENTS.c.part == PART, EVENTS.c.pseq == 3))

    await tamper(any_db, work)
    result, _ = await cps.verify_against(log, key_file=key_file, checkpoint_file=cp_file)
    assert (result.ok, result.part, result.broken_seq) == (False, PART, 3)
    assert "missing" in (result.reason or "")


async def test_an_untampered_busy_log_passes_with_checkpoints_taken_while_it_grows(
    any_db: Database, files: tuple[Path, Path]
) -> None:
    """Appenders, checkpoint takers and verifiers all at once: every verify passes."""
    key_file, cp_file = files
    log = AuditLog(any_db)
    await append_n(log, 1, 5)
    await cps.take(log, key_file=key_file, checkpoint_file=cp_file)
    results = []

    async def writer(w: int) -> None:  # the root's, and two runs' partitions (joined at each checkpoint)
        run_id = None if w == 1 else f"run_{w}"
        for i in range(30):
            await log.append_many([ev(1000 * w + i, run_id), ev(1000 * w + i + 500, run_id)])

    async def checkpointer() -> None:
        for _ in range(8):
            await cps.take(log, key_file=key_file, checkpoint_file=cp_file)
            await asyncio.sleep(0)

    async def verifier() -> None:
        for _ in range(6):
            results.append(await cps.verify_against(log, key_file=key_file, checkpoint_file=cp_file))
            await asyncio.sleep(0)

    await asyncio.gather(writer(1), writer(2), writer(3), checkpointer(), verifier())
    await cps.take(log, key_file=key_file, checkpoint_file=cp_file)
    final, count = await cps.verify_against(log, key_file=key_file, checkpoint_file=cp_file)
    joins = await log.list(kind=JOIN_KIND)
    assert final.ok and final.count == 185 + len(joins) and count >= 2 and joins
    assert results and all(r.ok for r, _ in results), results


async def test_a_checkpoint_is_never_taken_of_a_log_that_does_not_extend_the_last(
    any_db: Database, files: tuple[Path, Path]
) -> None:
    """Taking a checkpoint verifies the rows since the last one: a re-chained log is not signed."""
    log = await checkpointed(any_db, files)
    await tamper(any_db, edit_and_rechain)
    with pytest.raises(cps.CheckpointError, match="refusing to sign"):
        await cps.take(log, key_file=files[0], checkpoint_file=files[1])
    assert len(files[1].read_text().splitlines()) == 2


async def test_an_unchanged_head_is_not_checkpointed_twice_on_the_schedule(
    db: Database, files: tuple[Path, Path]
) -> None:
    """skip_if_unchanged (the worker) writes nothing when the head has not moved."""
    log = AuditLog(db)
    await append_n(log, 1, 3)
    assert await cps.take(log, key_file=files[0], checkpoint_file=files[1], skip_if_unchanged=True)
    assert await cps.take(log, key_file=files[0], checkpoint_file=files[1], skip_if_unchanged=True) is None
    await log.append(ev(4))
    cp = await cps.take(log, key_file=files[0], checkpoint_file=files[1], skip_if_unchanged=True)
    assert cp is not None and cp.seq == 4
    assert len(files[1].read_text().splitlines()) == 2


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("field,value", [("seq", 39), ("hash", "a" * 64), ("ts", "2020-01-01T00:00:00.000000Z")])
async def test_an_altered_checkpoint_has_a_bad_signature(
    db: Database, files: tuple[Path, Path], field: str, value: Any
) -> None:
    """Changing any signed field of a line is refused, naming the line."""
    log = await checkpointed(db, files)
    rows = _lines(files[1])
    rows[1][field] = value
    _write(files[1], rows)
    with pytest.raises(cps.CheckpointError, match="line 2: bad signature"):
        await cps.verify_against(log, key_file=files[0], checkpoint_file=files[1])


@pytest.mark.parametrize(
    "line",
    ["not json", "{}", '{"v":1}', "[1,2]", '{"v":1,"seq":-1,"hash":"' + "a" * 64 + '","ts":"x","key":"k","sig":"s"}'],
)
async def test_a_malformed_checkpoint_line_is_refused(db: Database, files: tuple[Path, Path], line: str) -> None:
    """Anything but a well-formed signed line fails verification, naming the line."""
    log = await checkpointed(db, files)
    with files[1].open("a") as f:
        f.write(line + "\n")
    with pytest.raises(cps.CheckpointError, match="line 3: malformed checkpoint"):
        await cps.verify_against(log, key_file=files[0], checkpoint_file=files[1])


async def test_a_checkpoint_signed_by_another_key_is_refused(
    db: Database, files: tuple[Path, Path], tmp_path: Path
) -> None:
    """Whoever can write the file but not read the key cannot add a checkpoint of their own."""
    log = await checkpointed(db, files)
    forged = cps.sign(Ed25519PrivateKey.generate(), seq=1, hash_="b" * 64)
    cps.append(files[1], forged)
    with pytest.raises(cps.CheckpointError, match="line 3: signed by key"):
        await cps.verify_against(log, key_file=files[0], checkpoint_file=files[1])


async def test_two_checkpoints_that_disagree_about_a_seq_are_reported(db: Database, files: tuple[Path, Path]) -> None:
    """Two validly signed heads for one seq mean the log was rewritten between them."""
    log = await checkpointed(db, files)
    key = cps.load_or_create_signing_key(files[0])
    cps.append(files[1], cps.sign(key, seq=20, hash_="c" * 64))
    with pytest.raises(cps.CheckpointError, match="lines 1 and 3 sign different hashes for seq 20"):
        await cps.verify_against(log, key_file=files[0], checkpoint_file=files[1])


async def test_the_key_is_created_once_private_to_its_owner_with_a_public_half(files: tuple[Path, Path]) -> None:
    """First use creates a 0600 key in a 0700 directory and a .pub; later uses load the same key."""
    key_file, _ = files
    key = cps.load_or_create_signing_key(key_file)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    again = cps.load_or_create_signing_key(key_file)
    assert cps.key_id(again.public_key()) == cps.key_id(key.public_key())
    public_only = cps.load_verify_key(Path(f"{key_file}.pub"))
    assert cps.key_id(public_only) == cps.key_id(key.public_key())
    with pytest.raises(cps.CheckpointError, match="not an Ed25519 private key"):
        cps.load_or_create_signing_key(Path(f"{key_file}.pub"))
