"""The seal on a ``policy.applied`` audit event: proof the database alone cannot forge.

The audit chain needs no secret: whoever can write the audit table as the app's role can append
a well-formed ``policy.applied`` event with the right sha256. So when an audit signer or key is
configured, the event that puts a version in force also carries a seal, an Ed25519 signature
by that key (the separate signer's, ``bot.signer``, or the key file's) over
:data:`DOMAIN` + the canonical JSON of :data:`SEALED` taken from the event's data: the text's
sha256, the sha256 of the version it replaces and the seq of the event that put that one in force
(so a sealed event replayed later does not follow the version then in force), its version, who
applied it and who approved it.
A version is in force only with a seal the configured key verifies (``agent.policy_store``).

The domain differs from the checkpoints' (``storage.checkpoints``), so a checkpoint signature is
never a seal and a seal never a checkpoint.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from storage.audit import canonical_json
from storage.checkpoints import SigningKey, key_id

DOMAIN = b"signoff/policy-applied/v1\n"
#: The event data's fields a seal covers (``approved_by`` is ``None`` for a change one supervisor
#: may make; ``from_seq`` is ``None`` over the file or bundled policy).
SEALED = ("sha256", "from_sha256", "from_seq", "to_version", "applied_by", "approved_by")

#: Makes the seal of an event's data (the key file here, or the separate signer).
Sealer = Callable[[Mapping[str, Any]], Awaitable[dict[str, str]]]


def sealed_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``data`` a seal covers."""
    return {name: data.get(name) for name in SEALED}


def message(data: Mapping[str, Any]) -> bytes:
    """What a seal signs for the event data ``data``."""
    return DOMAIN + canonical_json(sealed_fields(data)).encode()


def seal(key: SigningKey, data: Mapping[str, Any]) -> dict[str, str]:
    """The seal of ``data`` by ``key``: ``{"key": <key id>, "sig": <base64url signature>}``."""
    sig = key.sign(message(data))
    return {"key": key_id(key.public_key()), "sig": base64.urlsafe_b64encode(sig).decode()}


def problem(public_key: Ed25519PublicKey, data: Mapping[str, Any]) -> str | None:
    """Why ``data["seal"]`` does not prove ``data`` was sealed by ``public_key`` (``None``: it does)."""
    found = data.get("seal")
    if not isinstance(found, dict) or not isinstance(found.get("sig"), str):
        return "it carries no seal by the configured audit key (written outside `signoff policy`?)"
    if found.get("key") != key_id(public_key):
        return f"it is sealed by key {found.get('key')!r}, not by the configured audit key {key_id(public_key)}"
    try:
        public_key.verify(base64.urlsafe_b64decode(found["sig"].encode()), message(data))
    except (InvalidSignature, ValueError):
        return "its seal does not verify (the event was altered or forged)"
    return None


__all__ = ["DOMAIN", "SEALED", "Sealer", "message", "problem", "seal", "sealed_fields"]
