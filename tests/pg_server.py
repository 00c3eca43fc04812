"""A PostgreSQL server of the test's own (initdb + pg_ctl into a temp dir, on a free loopback
port), so a test can restart it, make it read-only and terminate its connections without
touching the shared server. As root, the binaries run as the ``postgres`` user (initdb
refuses root)."""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import socket
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

#: The newest installed server binaries, or ``None``.
BIN: Path | None = next((Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)), None)


def available() -> str | None:
    """Why this machine cannot run an own server (``None``: it can)."""
    if not os.environ.get("SIGNOFF_TEST_PG_URL"):
        return "SIGNOFF_TEST_PG_URL not set"
    if BIN is None or not (BIN / "initdb").exists() or not (BIN / "pg_ctl").exists():
        return "PostgreSQL server binaries (initdb, pg_ctl) not installed"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(kw_only=True)
class PgServer:
    """One server: its data directory, port and the ``pg_ctl`` verbs a fault needs."""

    root: Path
    port: int = field(default_factory=_free_port)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str = "postgres") -> str:
        """The SQLAlchemy URL of ``database`` on this server."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    async def _run(self, *argv: str) -> None:
        assert BIN is not None
        cmd = [str(BIN / argv[0]), *argv[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await proc.communicate()
        assert proc.returncode == 0, f"{argv[0]} failed: {out.decode()[-2000:]}"

    async def init(self) -> None:
        await self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")

    async def start(self) -> None:
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        await self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-o", opts, "-w", "start")

    async def stop(self) -> None:
        """A fast shutdown, as an operator's restart does: sessions are terminated."""
        await self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    async def sql(self, statement: str, database: str = "postgres") -> None:
        conn = await asyncpg.connect(host="127.0.0.1", port=self.port, user="postgres", database=database)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    async def new_database(self) -> str:
        name = f"d_{uuid.uuid4().hex[:10]}"
        await self.sql(f'CREATE DATABASE "{name}"')
        return name

    async def terminate(self, database: str) -> None:
        """Terminate every session on ``database`` (signoff's pool, leases, everything)."""
        await self.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = '{database}' AND pid <> pg_backend_pid()"
        )

    async def read_only(self, database: str, on: bool) -> None:
        """New sessions on ``database`` read-only (or writable again); the old ones are ended."""
        setting = "SET default_transaction_read_only = on" if on else "RESET default_transaction_read_only"
        await self.sql(f'ALTER DATABASE "{database}" {setting}')
        await self.terminate(database)


async def make_server() -> PgServer:
    """A new, started server in a temp directory owned by the user that runs it."""
    root = Path(tempfile.mkdtemp(prefix="signoff-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    server = PgServer(root=root)
    await server.init()
    await server.start()
    return server


async def remove(server: PgServer) -> None:
    try:
        await server._run("pg_ctl", "-D", str(server.data), "-m", "immediate", "-w", "stop")
    except AssertionError:
        pass  # already stopped
    shutil.rmtree(server.root, ignore_errors=True)
