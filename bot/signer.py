"""The audit signer over the wire, and publishing checkpoints off-host.

``signoff audit signer`` serves a :class:`storage.signer.Signer` (meant to run as another OS
user, with a key file and a state file the app's user cannot read or write) on a unix socket
(``unix:/run/signoff-signer/sock``) or a loopback port (``http://127.0.0.1:9107``):

- ``POST /sign`` ``{"seq": N, "hash": "<64 hex>"}`` → 200 ``{"checkpoint": "<line>"}``, or 409
  ``{"error": "refused", "message": …}`` for a head below (or beside) one it signed;
- ``GET /key`` → the public key (PEM); ``GET /checkpoints`` → every head it signed (JSON lines);
- ``POST /seal`` (the fields :data:`storage.policy_seal.SEALED`) → 200 ``{"seal": {…}}``: the
  seal that puts a policy version in force (:mod:`storage.policy_seal`).

:class:`RemoteSigner` is the app's side (``audit checkpoint --signer URL``, the worker's
schedule, ``audit verify --signer URL``). :func:`publisher` sends each new checkpoint to an
append-only place off the host: an HTTP(S) endpoint (``POST`` of the JSON line; any 2xx is
taken) or a directory on a WORM mount (one new file per checkpoint, never overwritten).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.errors import ConfigError
from bot.settings import Settings
from storage import policy_seal
from storage.checkpoints import (
    Checkpoint,
    CheckpointError,
    Publish,
    load_or_create_signing_key,
    load_verify_key,
    parse_line,
)
from storage.policy_seal import Sealer
from storage.signer import MAX_SEQ, Signer, SignerRefused

_MAX_BODY = 1024
_TIMEOUT = aiohttp.ClientTimeout(total=10)


class _SignRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    seq: int
    hash: str


class _SealRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    from_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    from_seq: int | None = Field(default=None, ge=0, le=MAX_SEQ)
    to_version: str = Field(min_length=1, max_length=64)
    applied_by: str = Field(min_length=1, max_length=64)
    approved_by: str | None = Field(default=None, max_length=64)


# -- the signer's side ---------------------------------------------------------------------------


def signer_app(signer: Signer) -> web.Application:
    """The signer's three routes over ``signer``."""

    async def sign(request: web.Request) -> web.Response:
        raw = await request.content.read(_MAX_BODY + 1)
        if len(raw) > _MAX_BODY:
            return _error(413, "too_large", f"the body is over {_MAX_BODY} bytes")
        try:
            body = _SignRequest.model_validate_json(raw)
        except ValidationError:
            return _error(400, "invalid", 'send {"seq": <int>, "hash": "<64 hex>"}')
        try:
            checkpoint = await signer.sign(seq=body.seq, hash_=body.hash)
        except SignerRefused as exc:
            return _error(409, "refused", str(exc))
        return web.json_response({"checkpoint": checkpoint.to_line().rstrip("\n")})

    async def key(_request: web.Request) -> web.Response:
        pem = signer.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return web.Response(body=pem, content_type="application/x-pem-file")

    async def history(_request: web.Request) -> web.Response:
        lines = "".join(cp.to_line() for cp in await asyncio.to_thread(signer.history))
        return web.Response(text=lines, content_type="application/x-ndjson")

    async def seal(request: web.Request) -> web.Response:
        raw = await request.content.read(_MAX_BODY + 1)
        try:
            body = _SealRequest.model_validate_json(raw) if len(raw) <= _MAX_BODY else None
        except ValidationError:
            body = None
        if body is None:
            return _error(400, "invalid", f"send the fields {', '.join(policy_seal.SEALED)} (under {_MAX_BODY} bytes)")
        return web.json_response({"seal": policy_seal.seal(signer.key, body.model_dump())})

    app = web.Application(client_max_size=_MAX_BODY)
    app.router.add_post("/sign", sign)
    app.router.add_post("/seal", seal)
    app.router.add_get("/key", key)
    app.router.add_get("/checkpoints", history)
    return app


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": code, "message": message}, status=status)


def listen_address(url: str) -> tuple[str, str | int]:
    """``("unix", path)`` or ``(host, port)`` for a signer URL; anything but a unix socket or a
    loopback address is refused (the signer answers only this host)."""
    if url.startswith("unix:"):
        path = url.removeprefix("unix:")
        if not path.startswith("/"):
            raise CheckpointError(f"{url}: a unix socket path must be absolute")
        return "unix", path
    if not url.startswith("http://"):
        raise CheckpointError(f"{url}: the signer is at unix:/PATH or http://127.0.0.1:PORT")
    host, sep, port = url.removeprefix("http://").rstrip("/").rpartition(":")
    host = host.strip("[]")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not sep or not port.isdigit() or not loopback:
        raise CheckpointError(f"{url}: the signer is at unix:/PATH or http://127.0.0.1:PORT (loopback only)")
    return host, int(port)


async def run_signer(signer: Signer, url: str, *, ready: Callable[[], None] | None = None) -> None:
    """Serve ``signer`` at ``url`` until cancelled (a unix socket is made 0660: the app's group)."""
    where = listen_address(url)
    runner = web.AppRunner(signer_app(signer))
    await runner.setup()
    try:
        if where[0] == "unix":
            path = str(where[1])
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            await web.UnixSite(runner, path).start()
            os.chmod(path, 0o660)
        else:
            await web.TCPSite(runner, str(where[0]), int(where[1])).start()
        if ready is not None:
            ready()
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


# -- the app's side ------------------------------------------------------------------------------


class RemoteSigner:
    """The app's client of ``signoff audit signer`` (a :class:`~storage.checkpoints.CheckpointSigner`)."""

    def __init__(self, url: str) -> None:
        self.url = url
        where = listen_address(url)
        self._unix = str(where[1]) if where[0] == "unix" else None
        self._base = "http://signer" if self._unix else f"http://{url.removeprefix('http://').rstrip('/')}"
        self._key: Ed25519PublicKey | None = None

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
        connector = aiohttp.UnixConnector(path=self._unix) if self._unix else None
        try:
            async with (
                aiohttp.ClientSession(connector=connector, timeout=_TIMEOUT) as session,
                session.request(method, self._base + path, json=body) as r,
            ):
                return r.status, await r.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise CheckpointError(f"the audit signer at {self.url} cannot be reached ({type(exc).__name__})") from None

    async def public_key(self) -> Ed25519PublicKey:
        """The signer's public key (asked once)."""
        if self._key is None:
            status, raw = await self._call("GET", "/key")
            try:
                key = serialization.load_pem_public_key(raw) if status == 200 else None
            except ValueError:
                key = None
            if not isinstance(key, Ed25519PublicKey):
                raise CheckpointError(f"the audit signer at {self.url} did not give an Ed25519 public key")
            self._key = key
        return self._key

    async def checkpoint(self, *, seq: int, hash_: str) -> Checkpoint:
        """The head signed by the signer; its refusal is a :class:`CheckpointError` naming why."""
        status, raw = await self._call("POST", "/sign", {"seq": seq, "hash": hash_})
        answer = _json(raw)
        if status == 409:
            raise SignerRefused(f"the audit signer refused: {answer.get('message', 'no reason given')}")
        line = answer.get("checkpoint")
        if status != 200 or not isinstance(line, str):
            raise CheckpointError(f"the audit signer at {self.url} answered {status}")
        return parse_line(line, 0, await self.public_key(), where="the signer's answer")

    async def seal(self, data: Mapping[str, Any]) -> dict[str, str]:
        """The signer's seal of a ``policy.applied`` event's ``data``, checked before it is used."""
        status, raw = await self._call("POST", "/seal", policy_seal.sealed_fields(data))
        found = _json(raw).get("seal")
        if status != 200 or not isinstance(found, dict):
            raise CheckpointError(f"the audit signer at {self.url} answered {status} when asked to seal the policy")
        if policy_seal.problem(await self.public_key(), {**data, "seal": found}) is not None:
            raise CheckpointError(f"the audit signer at {self.url} gave a seal its key does not verify")
        return {str(k): str(v) for k, v in found.items()}

    async def history(self) -> list[Checkpoint]:
        """Every head the signer ever signed, each signature checked."""
        status, raw = await self._call("GET", "/checkpoints")
        if status != 200:
            raise CheckpointError(f"the audit signer at {self.url} answered {status} for its checkpoints")
        key = await self.public_key()
        lines = [x for x in raw.decode("utf-8", errors="replace").split("\n") if x]
        return [parse_line(x, n, key, where=f"signer {self.url}") for n, x in enumerate(lines, start=1)]


def _json(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def publisher(target: str) -> Publish:
    """Send each checkpoint to ``target``: ``http(s)://…`` (POST the JSON line; 2xx) or a
    directory (a WORM mount: a new file per checkpoint, created exclusively, never rewritten)."""
    if target.startswith(("http://", "https://")):
        return _http_publisher(target)
    return _directory_publisher(Path(target))


def _http_publisher(url: str) -> Callable[[Checkpoint], Awaitable[None]]:
    async def send(checkpoint: Checkpoint) -> None:
        data = checkpoint.to_line().encode()
        try:
            async with (
                aiohttp.ClientSession(timeout=_TIMEOUT) as session,
                session.post(url, data=data, headers={"Content-Type": "application/x-ndjson"}) as r,
            ):
                status = r.status
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise CheckpointError(f"publishing to {url} failed ({type(exc).__name__})") from None
        if not 200 <= status < 300:
            raise CheckpointError(f"publishing to {url} failed: it answered {status}")

    return send


def _directory_publisher(directory: Path) -> Callable[[Checkpoint], Awaitable[None]]:
    def write(checkpoint: Checkpoint) -> None:
        path = directory / f"checkpoint-{checkpoint.seq:012d}-{checkpoint.hash[:16]}.json"
        line = checkpoint.to_line().encode()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        except FileExistsError:
            if path.read_bytes() != line:  # the same head signed again is fine; another is not
                raise CheckpointError(f"{path} exists with another checkpoint") from None
            return
        except OSError as exc:
            raise CheckpointError(f"publishing to {directory} failed ({exc.strerror})") from None
        with os.fdopen(fd, "wb") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    async def send(checkpoint: Checkpoint) -> None:
        await asyncio.to_thread(write, checkpoint)

    return send


# -- the policy's seal ---------------------------------------------------------------------------


async def policy_trust(settings: Settings) -> tuple[Sealer | None, Ed25519PublicKey | None]:
    """What seals a ``policy.applied`` event and the key every one must verify with: the separate
    signer (its key pinned by ``SIGNOFF_AUDIT_KEY_FILE`` when that is set), else the audit key
    file; ``(None, None)`` when neither is configured (a version in force then rests on the
    database alone: README, "Rolling out")."""
    key_file = settings.signoff_audit_key_file
    if settings.signoff_audit_signer:
        try:
            remote = RemoteSigner(settings.signoff_audit_signer)
            pinned = await asyncio.to_thread(load_verify_key, key_file) if key_file is not None else None
            return remote.seal, pinned or await remote.public_key()
        except CheckpointError as exc:
            raise ConfigError(f"SIGNOFF_AUDIT_SIGNER: {exc} (it seals the policy in force)") from None
    if key_file is None:
        return None, None
    try:
        return await _key_file_trust(key_file)
    except CheckpointError as exc:
        raise ConfigError(f"SIGNOFF_AUDIT_KEY_FILE: {exc} (it seals the policy in force)") from None


async def _key_file_trust(key_file: Path) -> tuple[Sealer, Ed25519PublicKey]:
    def verify_key() -> Ed25519PublicKey:  # a private key (created on first use) or a pinned public one
        return load_verify_key(key_file) if key_file.exists() else load_or_create_signing_key(key_file).public_key()

    verify = await asyncio.to_thread(verify_key)

    async def seal(data: Mapping[str, Any]) -> dict[str, str]:
        signing = await asyncio.to_thread(load_or_create_signing_key, key_file)
        return policy_seal.seal(signing, data)

    return seal, verify


__all__ = ["RemoteSigner", "policy_trust", "listen_address", "publisher", "run_signer", "signer_app"]
