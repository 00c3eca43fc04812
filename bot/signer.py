"""The audit signer over the wire, and publishing checkpoints off-host.

``signoff audit signer`` serves a :class:`storage.signer.Signer` (meant to run as another OS
user, with a key file and a state file the app's user cannot read or write) on a unix socket
(``unix:/run/signoff-signer/sock``) or a loopback port (``http://127.0.0.1:9107``):

- ``POST /sign`` ``{"seq": N, "hash": "<64 hex>"}`` → 200 ``{"checkpoint": "<line>"}``, or 409
  ``{"error": "refused", "message": …}`` for a head below (or beside) one it signed;
- ``GET /key`` → the public key (PEM); ``GET /checkpoints`` → every head it signed (JSON lines).

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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, ValidationError

from storage.checkpoints import Checkpoint, CheckpointError, Publish, parse_line
from storage.signer import Signer, SignerRefused

_MAX_BODY = 1024
_TIMEOUT = aiohttp.ClientTimeout(total=10)


class _SignRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    seq: int
    hash: str


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

    app = web.Application(client_max_size=_MAX_BODY)
    app.router.add_post("/sign", sign)
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


__all__ = ["RemoteSigner", "listen_address", "publisher", "run_signer", "signer_app"]
