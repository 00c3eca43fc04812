"""The audit anchor the app host cannot rewrite: a signer that only moves forward.

A checkpoint file beside the app, signed with a key beside the app, can be deleted or trimmed
together with the log's tail by whoever controls the app host. The signer closes that: it runs
as another OS user (``signoff audit signer``, reachable over a unix socket or loopback HTTP,
:mod:`bot.signer`), holds the only signing key, and keeps its own state file of every head it
ever signed (the checkpoint file format, :mod:`storage.checkpoints`). It refuses to sign a seq
below the highest it signed, or another hash at that seq: a truncated or rewritten log can no
longer be blessed, and ``signoff audit verify --signer`` checks the log against the signer's
whole history, which the app user can neither read-modify nor delete.

The key is a small seam, :class:`SigningKey`: ``public_key()`` and ``sign(message)``. The
local implementation is an Ed25519 key file readable only by the signer's user
(``cryptography``'s ``Ed25519PrivateKey`` satisfies it as is). A KMS key plugs in as an object
with the same two methods: ``sign`` calls the KMS ``Sign`` operation on the message (AWS KMS
``ECC_NIST_EDWARDS25519`` with ``ED25519_SHA_512``, Google Cloud KMS ``EC_SIGN_ED25519``) and
``public_key`` loads the KMS ``GetPublicKey`` answer once; the private half never leaves the KMS.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from pathlib import Path

from storage.checkpoints import Checkpoint, CheckpointError, SigningKey, anchors, append, read_all, sign

_HASH = re.compile(r"^[0-9a-f]{64}$")
#: A seq the signer will consider (a bigint column; anything larger is a garbled request).
MAX_SEQ = 2**62


class SignerRefused(CheckpointError):
    """The signer will not sign this head (it would move the anchor backwards or fork it)."""


@dataclass(kw_only=True)
class Signer:
    """Signs heads in seq order only, remembering each one in ``state_file`` before answering."""

    key: SigningKey
    state_file: Path
    _last: Checkpoint | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @classmethod
    def open(cls, key: SigningKey, state_file: Path) -> Signer:
        """The signer over ``state_file`` (its history checked against ``key``; created on first sign)."""
        signer = cls(key=key, state_file=state_file)
        history = signer.history()
        anchors(history)  # two signed heads that disagree: refuse to start
        signer._last = max(history, key=lambda c: c.seq) if history else None
        return signer

    def history(self) -> list[Checkpoint]:
        """Every head signed so far (an absent state file: none)."""
        if not self.state_file.exists():
            return []
        return read_all(self.state_file, self.key.public_key())

    @property
    def highest(self) -> Checkpoint | None:
        """The highest head ever signed."""
        return self._last

    async def sign(self, *, seq: int, hash_: str) -> Checkpoint:
        """Sign ``(seq, hash_)`` if it does not go back: a lower seq, or another hash at the
        highest seq, raises :class:`SignerRefused`; the same head again returns the checkpoint
        signed before."""
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= MAX_SEQ:
            raise SignerRefused("seq must be a non-negative integer")
        if not isinstance(hash_, str) or not _HASH.match(hash_):
            raise SignerRefused("hash must be 64 lowercase hex digits")
        async with self._lock:
            last = self._last
            if last is not None and seq < last.seq:
                raise SignerRefused(f"seq {seq} is below seq {last.seq}, already signed: the log went backwards")
            if last is not None and seq == last.seq:
                if hash_ != last.hash:
                    raise SignerRefused(f"seq {seq} was signed with another hash: the log was rewritten")
                return last
            checkpoint = sign(self.key, seq=seq, hash_=hash_)
            await asyncio.to_thread(append, self.state_file, checkpoint)
            self._last = checkpoint
            return checkpoint


__all__ = ["MAX_SEQ", "Signer", "SignerRefused", "SigningKey"]
