"""Signed checkpoints of the audit log's root head, kept outside the database.

The chain alone proves that rows were not edited *unless* someone rewrites the
rows and the head together (or empties the table). A checkpoint closes that gap
the way Certificate Transparency's signed tree heads do: the head (seq, hash,
time) is signed with an Ed25519 key that is not in the database and appended to
a file that is meant to live elsewhere. Because every hash commits to all rows
before it, a log that still contains each checkpointed ``(seq, hash)`` has not
had its history changed; one that does not was wiped, truncated or rewritten.

The file is JSON lines, one checkpoint per line::

    {"v": 1, "seq": 41, "hash": "<64 hex>", "ts": "2024-05-01T12:00:00.000000Z",
     "key": "<key id: 16 hex>", "sig": "<base64url Ed25519 signature>"}

``sig`` signs :data:`DOMAIN` + the canonical JSON of the other five fields.
Verification uses the configured key, never a key named in the file.

The log is partitioned (:mod:`storage.audit`): a checkpoint signs the root
partition's head, and taking one first appends a join to the root naming every
other partition's head, so the signature covers the whole log up to then.

Taking a checkpoint verifies the rows added since the file's last checkpoint
(the whole log for the first one), so a checkpoint never blesses a log that
does not extend the one signed before it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from storage.audit import AuditLog, VerifyResult, canonical_json, iso_utc
from storage.records import wall_clock

DOMAIN = b"signoff/audit-checkpoint/v1\n"
VERSION = 1
_HASH = re.compile(r"^[0-9a-f]{64}$")
_TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
_FIELDS = {"v", "seq", "hash", "ts", "key", "sig"}
_MAX_LINE = 1024
_TAIL = 4096
T = TypeVar("T")


class CheckpointError(Exception):
    """A checkpoint could not be made, read or trusted; the message is one line."""


class SigningKey(Protocol):
    """What signs a checkpoint: an Ed25519 key (``Ed25519PrivateKey`` is one as is), or a KMS
    key behind the same two methods (see :mod:`storage.signer`)."""

    def public_key(self) -> Ed25519PublicKey:
        """The public half verifiers check signatures with."""
        ...

    def sign(self, data: bytes) -> bytes:
        """The Ed25519 signature of ``data``."""
        ...


class CheckpointSigner(Protocol):
    """Who signs a head for :func:`take`: a key file on this host (:class:`KeyFileSigner`) or
    the separate signer process (``bot.signer.RemoteSigner``), which refuses to go backwards."""

    async def public_key(self) -> Ed25519PublicKey:
        """The key the checkpoints it signs verify with."""
        ...

    async def checkpoint(self, *, seq: int, hash_: str) -> Checkpoint:
        """The signed checkpoint of head ``(seq, hash_)``."""
        ...


#: Sends a checkpoint off-host to an append-only place (``bot.signer.publisher``).
Publish = Callable[["Checkpoint"], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """One signed head: the chain had ``hash`` at ``seq`` at time ``ts``."""

    seq: int
    hash: str
    ts: datetime
    key_id: str
    sig: str
    #: Line number in the file it was read from (0: not read from a file).
    line: int = 0

    def to_line(self) -> str:
        """The checkpoint as one JSON line (what the checkpoint file holds)."""
        body = {**_body(self.seq, self.hash, self.ts, self.key_id), "sig": self.sig}
        return json.dumps(body, sort_keys=True, separators=(",", ":")) + "\n"


def _body(seq: int, hash_: str, ts: datetime, key_id: str) -> dict[str, Any]:
    return {"v": VERSION, "seq": seq, "hash": hash_, "ts": iso_utc(ts), "key": key_id}


def _message(seq: int, hash_: str, ts: datetime, key_id: str) -> bytes:
    return DOMAIN + canonical_json(_body(seq, hash_, ts, key_id)).encode()


# --------------------------------------------------------------------------- keys


def key_id(public_key: Ed25519PublicKey) -> str:
    """The first 16 hex digits of SHA-256 over the raw public key."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def load_or_create_signing_key(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key at ``path``; created (mode 0600, directory 0700) on first use,
    with its public half beside it at ``path.pub`` for verifiers that must not hold the secret."""
    if not path.exists():
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process created it first: use theirs
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(pem)
                f.flush()
                os.fsync(f.fileno())
            pub = key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            with contextlib.suppress(OSError):
                Path(f"{path}.pub").write_bytes(pub)
            return key
    key_obj = _load_pem(path)
    if not isinstance(key_obj, Ed25519PrivateKey):
        raise CheckpointError(f"{path}: not an Ed25519 private key (a public key can verify, not sign)")
    return key_obj


def load_verify_key(path: Path) -> Ed25519PublicKey:
    """The public key to check signatures with: from a private or a public PEM at ``path``."""
    if not path.exists():
        raise CheckpointError(f"{path}: no audit key here, so no checkpoint signature can be checked")
    key_obj = _load_pem(path)
    if isinstance(key_obj, Ed25519PrivateKey):
        return key_obj.public_key()
    if isinstance(key_obj, Ed25519PublicKey):
        return key_obj
    raise CheckpointError(f"{path}: not an Ed25519 key")


def _load_pem(path: Path) -> object:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read the audit key ({exc.strerror})") from None
    try:
        if b"PRIVATE KEY" in data:
            return serialization.load_pem_private_key(data, password=None)
        return serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        raise CheckpointError(f"{path}: not a PEM key") from None


# --------------------------------------------------------------------------- signing and files


def sign(key: SigningKey, *, seq: int, hash_: str, ts: datetime | None = None) -> Checkpoint:
    """A checkpoint of head ``(seq, hash_)`` at ``ts`` (default now), signed with ``key``."""
    when = (ts or wall_clock()).astimezone(UTC)
    when = datetime.fromisoformat(iso_utc(when).replace("Z", "+00:00"))  # what the file will hold
    kid = key_id(key.public_key())
    sig = key.sign(_message(seq, hash_, when, kid))
    return Checkpoint(seq=seq, hash=hash_, ts=when, key_id=kid, sig=base64.urlsafe_b64encode(sig).decode())


def append(path: Path, checkpoint: Checkpoint) -> None:
    """Append one line to ``path`` (created with its directory), flushed to disk.

    One ``write`` with ``O_APPEND``: concurrent writers never interleave inside a line.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, checkpoint.to_line().encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def parse_line(text: str, line: int, public_key: Ed25519PublicKey, *, where: str = "") -> Checkpoint:
    """One line of a checkpoint file, its signature checked; :class:`CheckpointError` names the line."""
    at = f"{where} line {line}".strip()
    if len(text) > _MAX_LINE:
        raise CheckpointError(f"{at}: malformed checkpoint (line too long)")
    try:
        obj = json.loads(text)
    except ValueError:
        raise CheckpointError(f"{at}: malformed checkpoint (not JSON)") from None
    if not isinstance(obj, dict) or set(obj) != _FIELDS:
        raise CheckpointError(f"{at}: malformed checkpoint (fields must be {', '.join(sorted(_FIELDS))})")
    seq, hash_, ts, kid, sig = obj["seq"], obj["hash"], obj["ts"], obj["key"], obj["sig"]
    if obj["v"] != VERSION:
        raise CheckpointError(f"{at}: malformed checkpoint (unknown version {obj['v']!r})")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise CheckpointError(f"{at}: malformed checkpoint (seq must be a non-negative integer)")
    if not isinstance(hash_, str) or not _HASH.match(hash_):
        raise CheckpointError(f"{at}: malformed checkpoint (hash must be 64 lowercase hex digits)")
    if not isinstance(ts, str) or not _TS.match(ts):
        raise CheckpointError(f"{at}: malformed checkpoint (ts must be UTC ISO 8601 with microseconds)")
    if not isinstance(kid, str) or not isinstance(sig, str):
        raise CheckpointError(f"{at}: malformed checkpoint (key and sig must be strings)")
    when = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    if kid != key_id(public_key):
        raise CheckpointError(f"{at}: signed by key {kid}, not by the configured audit key {key_id(public_key)}")
    try:
        raw = base64.urlsafe_b64decode(sig.encode())
        public_key.verify(raw, _message(seq, hash_, when, kid))
    except (InvalidSignature, ValueError):
        raise CheckpointError(f"{at}: bad signature (the checkpoint was altered or forged)") from None
    return Checkpoint(seq=seq, hash=hash_, ts=when, key_id=kid, sig=sig, line=line)


def read_all(path: Path, public_key: Ed25519PublicKey) -> list[Checkpoint]:
    """Every checkpoint in ``path``, each signature checked; the first bad line raises."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read the checkpoint file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise CheckpointError(f"{path}: malformed checkpoint file (not UTF-8)") from None
    if lines and lines[-1] == "":
        lines.pop()
    return [parse_line(text, n, public_key, where=str(path)) for n, text in enumerate(lines, start=1)]


def read_last(path: Path, public_key: Ed25519PublicKey) -> Checkpoint | None:
    """The file's last checkpoint (signature checked), reading only its tail; ``None`` if no file."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _TAIL))
            tail = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read the checkpoint file ({exc.strerror})") from None
    text = tail.decode("utf-8", errors="replace").rstrip("\n")
    if not text:
        return None
    last = text.rsplit("\n", 1)[-1]
    return parse_line(last, 0, public_key, where=f"{path} (last line)")


def anchors(checkpoints: Iterable[Checkpoint]) -> dict[int, Checkpoint]:
    """Checkpoints by seq; two that disagree about one seq mean the log was rewritten between them."""
    out: dict[int, Checkpoint] = {}
    for cp in checkpoints:
        seen = out.get(cp.seq)
        if seen is not None and seen.hash != cp.hash:
            raise CheckpointError(
                f"checkpoints on lines {seen.line} and {cp.line} sign different hashes for "
                f"seq {cp.seq}: the log was rewritten between {iso_utc(seen.ts)} and "
                f"{iso_utc(cp.ts)}"
            )
        out.setdefault(cp.seq, cp)
    return out


# --------------------------------------------------------------------------- taking one


@dataclass(frozen=True)
class KeyFileSigner:
    """Signs with the Ed25519 key file at ``key_file`` on this host (created on first use)."""

    key_file: Path

    async def public_key(self) -> Ed25519PublicKey:
        """The key file's public half."""
        return (await asyncio.to_thread(load_or_create_signing_key, self.key_file)).public_key()

    async def checkpoint(self, *, seq: int, hash_: str) -> Checkpoint:
        """``(seq, hash_)`` signed with the key file (no memory of earlier heads: see the signer)."""
        key = await asyncio.to_thread(load_or_create_signing_key, self.key_file)
        return sign(key, seq=seq, hash_=hash_)


async def take(
    log: AuditLog,
    *,
    checkpoint_file: Path,
    key_file: Path | None = None,
    signer: CheckpointSigner | None = None,
    publish: Sequence[Publish] = (),
    skip_if_unchanged: bool = False,
) -> Checkpoint | None:
    """Join the partitions into the root (:meth:`AuditLog.join`), verify the rows since the
    file's last checkpoint, then have ``signer`` (default: the key file ``key_file``) sign the
    root's head, append it to the file and ``publish`` it.

    Raises :class:`CheckpointError` when the log does not extend the last checkpoint (so a
    tampered log is never signed), when the signer refuses or answers for another head, and
    when publishing fails (the checkpoint is then in the file, not yet off-host). With
    ``skip_if_unchanged``, returns ``None`` instead of writing a checkpoint identical in seq
    and hash to the last one (the worker's schedule).
    """
    if signer is None:
        if key_file is None:
            raise CheckpointError("no signer and no audit key file: nothing can sign a checkpoint")
        signer = KeyFileSigner(key_file)
    public_key = await signer.public_key()
    last = await asyncio.to_thread(read_last, checkpoint_file, public_key)
    since = (last.seq, last.hash) if last is not None else None
    await log.join()
    result = await log.verify(since=since)
    if not result.ok:
        base = f"the last checkpoint (seq {last.seq})" if last is not None else "the genesis"
        raise CheckpointError(
            f"refusing to sign: the log does not extend {base}: broken at seq {result.broken_seq}: {result.reason}"
        )
    assert result.head_hash is not None
    head = (result.head_seq, result.head_hash)
    if skip_if_unchanged and last is not None and (last.seq, last.hash) == head:
        return None
    checkpoint = await signer.checkpoint(seq=head[0], hash_=head[1])
    checked = parse_line(checkpoint.to_line().rstrip("\n"), 0, public_key, where="the signer's answer")
    if (checked.seq, checked.hash) != head:
        raise CheckpointError(f"the signer signed seq {checked.seq}, not the head (seq {head[0]})")
    await asyncio.to_thread(append, checkpoint_file, checked)
    for send in publish:
        await send(checked)
    return checked


async def verify_anchored(log: AuditLog, sources: Sequence[tuple[str, Sequence[Checkpoint]]]) -> VerifyResult:
    """Verify the chain against the checkpoints of every source (``(name, checkpoints)``: a
    file, the signer's history); two sources that disagree about a seq are a rewritten log."""
    by_seq: dict[int, tuple[str, Checkpoint]] = {}
    for name, cps in sources:
        for cp in cps:
            seen = by_seq.get(cp.seq)
            if seen is not None and seen[1].hash != cp.hash:
                raise CheckpointError(
                    f"{seen[0]} and {name} sign different hashes for seq {cp.seq}: the log was rewritten"
                )
            by_seq.setdefault(cp.seq, (name, cp))
    result = await log.verify(anchors={seq: cp.hash for seq, (_, cp) in by_seq.items()})
    hit = _covering(by_seq, result.checkpoint_seq)
    if hit is not None:
        where = f"line {hit[1].line} of {hit[0]}" if hit[1].line else hit[0]
        result = dataclasses.replace(
            result, reason=f"{result.reason} (checkpoint in {where}, signed {iso_utc(hit[1].ts)})"
        )
    return result


async def verify_against(log: AuditLog, *, key_file: Path, checkpoint_file: Path) -> tuple[VerifyResult, int]:
    """Verify the chain and that it still holds every checkpointed head; returns the result and
    the number of checkpoints read. The file is read before the log, so every checkpoint in it
    names a head that was committed before verification began (a busy log is no false alarm)."""
    public_key = await asyncio.to_thread(load_verify_key, key_file)
    checkpoints = await asyncio.to_thread(read_all, checkpoint_file, public_key)
    by_seq = anchors(checkpoints)
    result = await log.verify(anchors={seq: cp.hash for seq, cp in by_seq.items()})
    cp = _covering(by_seq, result.checkpoint_seq)
    if cp is not None:
        result = dataclasses.replace(
            result,
            reason=f"{result.reason} (checkpoint on line {cp.line} of {checkpoint_file}, signed {iso_utc(cp.ts)})",
        )
    return result, len(checkpoints)


def _covering(by_seq: Mapping[int, T], seq: int | None) -> T | None:
    """The first checkpoint at or after root seq ``seq`` (it covers what that seq vouched for:
    a join's partition heads, or the row itself)."""
    if seq is None:
        return None
    after = [s for s in by_seq if s >= seq]
    return by_seq[min(after)] if after else None


__all__ = [
    "Checkpoint",
    "CheckpointError",
    "CheckpointSigner",
    "KeyFileSigner",
    "Publish",
    "SigningKey",
    "verify_anchored",
    "anchors",
    "append",
    "key_id",
    "load_or_create_signing_key",
    "load_verify_key",
    "parse_line",
    "read_all",
    "read_last",
    "sign",
    "take",
    "verify_against",
]
