"""What the PostgreSQL fault suites share (``test_db_faults_pg*.py``): a fresh database on the
test's own server, the CLI run against it, ``signoff audit verify``, and the faults themselves
(a read-only window, a session terminated before its COMMIT, a restart)."""

from __future__ import annotations

import asyncio
import os
import sys
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, event

import sandbox.models  # noqa: F401  (the store's tables)
from bot.cli import main
from storage.db import Base, Database, create_database
from tests.pg_server import PgServer

ROOT = Path(__file__).resolve().parents[1]
#: ``audit_verifies`` sets the process's environment: two at once (tests gathered) would mix them.
_CLI_ENV = asyncio.Lock()


async def fresh(server: PgServer) -> tuple[str, Database]:
    """A new database on the server with every table (the runtime's and the shop's)."""
    name = await server.new_database()
    db = create_database(server.url(name))
    async with db.engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    return name, db


def cli_env(url: str, tmp: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SIGNOFF_DATABASE_URL": url,
        "SIGNOFF_LLM_PROVIDER": "scripted",
        "SIGNOFF_AUDIT_CHECKPOINT_FILE": str(tmp / "checkpoints.jsonl"),
        "SIGNOFF_AUDIT_KEY_FILE": str(tmp / "audit-key.pem"),
    }


async def signoff(url: str, tmp: Path, *argv: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    """``signoff *argv`` as a process of its own over ``url`` (``env``: more settings)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import sys; from bot.cli import main; raise SystemExit(main(sys.argv[1:]))",
        *argv,
        env={**cli_env(url, tmp), **(env or {})},
        cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def audit_verifies(url: str, tmp: Path) -> None:
    """``signoff audit checkpoint`` then ``signoff audit verify`` over the database pass (the
    CLI's ``main``, on a thread of its own: it runs its own event loop). The checkpoint file and
    its key live in ``tmp``: a configured anchor that is missing fails verify by design."""
    async with _CLI_ENV:
        await asyncio.to_thread(_audit_cli, url, tmp)


def _audit_cli(url: str, tmp: Path) -> None:
    with pytest.MonkeyPatch.context() as env:
        for key, value in cli_env(url, tmp).items():
            env.setenv(key, value)
        assert main(["audit", "checkpoint"]) == 0
        assert main(["audit", "verify"]) == 0


def read_only_during(
    monkeypatch: pytest.MonkeyPatch, server: PgServer, name: str, owner: type, method: str
) -> list[Any]:
    """The database turns read-only the moment ``owner.method`` first starts, for one second.
    Returns a list that holds the task closing the window once it opened."""
    original, window = getattr(owner, method), list[asyncio.Task[None]]()

    async def in_window(self: Any, *a: Any, **kw: Any) -> Any:
        if not window:
            await server.read_only(name, True)
            window.append(asyncio.create_task(_close_window(server, name)))
        return await original(self, *a, **kw)

    monkeypatch.setattr(owner, method, in_window)
    return window


async def _close_window(server: PgServer, name: str) -> None:
    await asyncio.sleep(1.0)
    await server.read_only(name, False)


def cut_before_commit(monkeypatch: pytest.MonkeyPatch, db: Database, owner: Any, method: str) -> list[int]:
    """The first transaction ``owner.method`` commits on ``db`` has its session terminated at its
    COMMIT, after its statements ran: nothing of it stays. Returns the list of cuts made (one)."""
    inside: ContextVar[bool] = ContextVar(f"inside_{method}", default=False)
    original, cut = getattr(owner, method), list[int]()

    async def marked(*a: Any, **kw: Any) -> Any:
        token = inside.set(True)
        try:
            return await original(*a, **kw)
        finally:
            inside.reset(token)

    def at_commit(conn: Connection) -> None:
        if inside.get() and not cut:
            cut.append(1)
            cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    monkeypatch.setattr(owner, method, marked)
    event.listen(db.engine.sync_engine, "commit", at_commit)
    return cut


def lose_the_answer(monkeypatch: pytest.MonkeyPatch, owner: Any, method: str) -> list[int]:
    """The first ``owner.method`` commits, then its connection is lost before the answer comes
    back (the caller cannot tell it from a cut before the COMMIT). Returns the losses made."""
    original, lost = getattr(owner, method), list[int]()

    async def committed_then_lost(*a: Any, **kw: Any) -> Any:
        result = await original(*a, **kw)
        if not lost:
            lost.append(1)
            raise ConnectionResetError("connection lost after COMMIT")
        return result

    monkeypatch.setattr(owner, method, committed_then_lost)
    return lost


async def start_later(server: PgServer, after_s: float) -> None:
    await asyncio.sleep(after_s)
    await server.start()
