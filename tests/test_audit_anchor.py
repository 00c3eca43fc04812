"""Anchors the app host cannot rewrite (issue 20 B.2): the separate signer refuses to go
backwards, so trimming the log and the checkpoint file together, or deleting or emptying a
configured checkpoint file, fails `audit verify`; checkpoints are published off-host; an
empty log passes only with --allow-empty; a garbled row is `BROKEN at seq N`; the head seq is a
gauge at /metrics."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import text as sa_text

from agent.llm.testing import ScriptedModel
from agent.metrics import Metrics
from bot.cli import main
from bot.server import make_web_app
from bot.signer import RemoteSigner, listen_address, publisher, signer_app
from storage import checkpoints as cps
from storage.audit import GENESIS_HASH, AuditEvent, AuditLog
from storage.checkpoints import CheckpointError
from storage.db import Database
from storage.signer import Signer, SignerRefused
from tests.api_kit import app_of
from tests.support import seeded
from tests.test_audit_cli import _append, _clean_env, _sql  # noqa: F401 (the autouse fixture)

H1, H2 = "a" * 64, "b" * 64
SIGNOFF = Path(sys.executable).parent / "signoff"


# -- the signer itself -----------------------------------------------------------------------


async def test_the_signer_never_signs_a_lower_seq_or_another_hash_even_after_a_restart(tmp_path: Path) -> None:
    key, state = Ed25519PrivateKey.generate(), tmp_path / "signer" / "state.jsonl"
    signer = Signer.open(key, state)
    first = await signer.sign(seq=5, hash_=H1)
    assert (first.seq, first.hash) == (5, H1)
    assert await signer.sign(seq=5, hash_=H1) == first  # the same head again: the same answer
    with pytest.raises(SignerRefused, match="another hash"):
        await signer.sign(seq=5, hash_=H2)
    await signer.sign(seq=8, hash_=H2)
    with pytest.raises(SignerRefused, match="below seq 8"):
        await signer.sign(seq=7, hash_=H1)
    for seq, hash_ in ((-1, H1), (True, H1), (9, "zz"), (9, H1.upper())):
        with pytest.raises(SignerRefused):
            await signer.sign(seq=seq, hash_=hash_)
    again = Signer.open(key, state)  # a restarted signer remembers from its state file
    assert again.highest is not None and again.highest.seq == 8
    with pytest.raises(SignerRefused):
        await again.sign(seq=6, hash_=H1)
    assert [c.seq for c in again.history()] == [5, 8]


async def test_the_signer_over_http_refuses_bad_and_backward_requests(tmp_path: Path) -> None:
    signer = Signer.open(Ed25519PrivateKey.generate(), tmp_path / "state.jsonl")
    async with TestClient(TestServer(signer_app(signer))) as client:
        r = await client.post("/sign", json={"seq": 3, "hash": H1})
        assert r.status == 200 and '"seq":3' in (await r.json())["checkpoint"]
        r = await client.post("/sign", json={"seq": 2, "hash": H1})
        assert (r.status, (await r.json())["error"]) == (409, "refused")
        for bad in ({"seq": "3", "hash": H1}, {"seq": 3}, {"seq": 4, "hash": H1, "x": 1}):
            assert (await client.post("/sign", json=bad)).status == 400
        assert (await client.post("/sign", data=b"x" * 5000)).status == 413
        assert (await client.get("/checkpoints")).status == 200
    assert [c.seq for c in signer.history()] == [3]


def test_the_signer_listens_only_on_a_unix_socket_or_loopback() -> None:
    assert listen_address("unix:/run/s.sock") == ("unix", "/run/s.sock")
    assert listen_address("http://127.0.0.1:9107") == ("127.0.0.1", 9107)
    for bad in ("http://0.0.0.0:9107", "http://10.0.0.5:9107", "unix:relative", "https://127.0.0.1:1", "127.0.0.1"):
        with pytest.raises(CheckpointError):
            listen_address(bad)


# -- publishing off-host ---------------------------------------------------------------------


async def test_checkpoints_are_published_to_an_append_only_endpoint_and_a_worm_directory(
    db: Database, tmp_path: Path
) -> None:
    received: list[bytes] = []
    fail = {"now": False}

    async def append_only(request: web.Request) -> web.Response:
        if fail["now"]:
            return web.Response(status=500)
        received.append(await request.read())
        return web.Response(status=201)

    endpoint = web.Application()
    endpoint.router.add_post("/checkpoints", append_only)
    log = AuditLog(db)
    await log.append(AuditEvent(kind="proposal", run_id="r1"))
    worm = tmp_path / "worm"
    worm.mkdir()
    async with TestServer(endpoint, host="127.0.0.1") as server:
        url = str(server.make_url("/checkpoints"))
        cp = await cps.take(
            log,
            key_file=tmp_path / "key.pem",
            checkpoint_file=tmp_path / "cps.jsonl",
            publish=[publisher(url), publisher(str(worm))],
        )
        assert cp is not None and received == [cp.to_line().encode()]
        [published] = worm.iterdir()
        assert published.read_text() == cp.to_line()
        await log.append(AuditEvent(kind="proposal", run_id="r2"))
        fail["now"] = True
        with pytest.raises(CheckpointError, match="answered 500"):
            await cps.take(
                log, key_file=tmp_path / "key.pem", checkpoint_file=tmp_path / "cps.jsonl", publish=[publisher(url)]
            )
    # a WORM file is never rewritten with another checkpoint for its name
    published.chmod(0o644)
    published.write_text(published.read_text().replace('"seq":1', '"seq":1 '))
    with pytest.raises(CheckpointError, match="exists with another checkpoint"):
        await publisher(str(worm))(cp)


# -- the CLI against a real signer process ---------------------------------------------------


@pytest.fixture
def signer_url(tmp_path: Path) -> Iterator[str]:
    """`signoff audit signer` running as its own process on a unix socket (stopped after)."""
    sock = tmp_path / "signer" / "sock"
    sock.parent.mkdir()
    url = f"unix:{sock}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    proc = subprocess.Popen(
        [
            str(SIGNOFF),
            "audit",
            "signer",
            "--key",
            str(sock.parent / "key.pem"),
            "--state",
            str(sock.parent / "state.jsonl"),
            "--listen",
            url,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the signer did not come up"
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_trimming_the_log_and_the_checkpoint_file_together_fails_against_the_signer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], signer_url: str
) -> None:
    cp_file = tmp_path / "anchors" / "cps.jsonl"
    monkeypatch.setenv("SIGNOFF_AUDIT_SIGNER", signer_url)
    monkeypatch.setenv("SIGNOFF_AUDIT_CHECKPOINT_FILE", str(cp_file))
    # the app host holds only the signer's public half, pinned: a substitute signer is refused
    monkeypatch.setenv("SIGNOFF_AUDIT_KEY_FILE", str(tmp_path / "signer" / "key.pem.pub"))
    assert main(["db", "upgrade"]) == 0
    _append(5)
    assert main(["audit", "checkpoint"]) == 0
    assert f"the signer at {signer_url}" in capsys.readouterr().out
    first = cp_file.read_text()
    _append(3)
    assert main(["audit", "checkpoint"]) == 0
    assert main(["audit", "verify"]) == 0
    assert "8 events and 4 checkpoints" in capsys.readouterr().out
    other = tmp_path / "other.pem"
    cps.load_or_create_signing_key(other)  # a key that is not the signer's
    monkeypatch.setenv("SIGNOFF_AUDIT_KEY_FILE", str(other))
    assert main(["audit", "verify"]) == 1
    assert "does not sign with SIGNOFF_AUDIT_KEY_FILE's key" in capsys.readouterr().err
    monkeypatch.setenv("SIGNOFF_AUDIT_KEY_FILE", str(tmp_path / "signer" / "key.pem.pub"))
    # the app host's attacker: cut the log back to seq 5, the head and the checkpoint file with it
    _sql("DELETE FROM audit_events WHERE seq > 5")
    _sql("UPDATE audit_head SET seq = 5, hash = (SELECT hash FROM audit_events WHERE seq = 5) WHERE id = 1")
    cp_file.write_text(first)
    assert main(["audit", "verify", "--signer", ""]) == 0  # the file alone cannot tell: the signer can
    capsys.readouterr()
    assert main(["audit", "verify"]) == 1
    assert "checkpointed seq 8 is gone" in capsys.readouterr().err
    assert main(["audit", "checkpoint"]) == 1  # the signer will not bless the shorter log
    assert "below seq 8" in capsys.readouterr().err
    # deleting or emptying the configured checkpoint file is no way out either
    cp_file.write_text("")
    assert main(["audit", "verify", "--signer", ""]) == 1
    assert "checkpoint file is empty" in capsys.readouterr().err
    cp_file.unlink()
    assert main(["audit", "verify", "--signer", ""]) == 1
    assert "no such checkpoint file" in capsys.readouterr().err


async def test_a_signer_that_signed_nothing_is_a_missing_anchor(signer_url: str, db: Database) -> None:
    assert await RemoteSigner(signer_url).history() == []
    log = AuditLog(db)
    await log.append(AuditEvent(kind="proposal", run_id="r1"))
    cp = await RemoteSigner(signer_url).checkpoint(seq=1, hash_=GENESIS_HASH.replace("0", "1"))
    assert cp.seq == 1
    with pytest.raises(CheckpointError, match="cannot be reached"):
        await RemoteSigner("unix:/nonexistent/sock").history()


def test_deleting_the_default_checkpoint_file_with_a_signer_still_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], signer_url: str
) -> None:
    monkeypatch.setenv("SIGNOFF_AUDIT_SIGNER", signer_url)
    assert main(["db", "upgrade"]) == 0
    assert main(["audit", "verify", "--allow-empty"]) == 1
    assert "has signed nothing yet" in capsys.readouterr().err
    _append(4)
    assert main(["audit", "checkpoint"]) == 0
    [cp_file] = Path(os.environ["HOME"]).glob(".local/state/signoff/audit-checkpoints-*.jsonl")
    cp_file.unlink()
    _sql("DELETE FROM audit_events")
    _sql("UPDATE audit_head SET seq = 0, hash = '" + "0" * 64 + "'")
    assert main(["audit", "verify", "--allow-empty"]) == 1
    assert "checkpointed seq 4 is gone" in capsys.readouterr().err


# -- verify's own rules ----------------------------------------------------------------------


def test_an_empty_log_passes_only_when_expected(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "upgrade"]) == 0
    assert main(["audit", "verify"]) == 1
    assert "the log is empty" in capsys.readouterr().err
    assert main(["audit", "verify", "--allow-empty"]) == 0


@pytest.mark.parametrize("with_checkpoint", [False, True])
def test_a_garbled_row_is_broken_at_its_seq_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], with_checkpoint: bool
) -> None:
    assert main(["db", "upgrade"]) == 0
    _append(6)
    extra = []
    if with_checkpoint:
        assert main(["audit", "checkpoint", "--out", str(tmp_path / "cps.jsonl")]) == 0
        extra = ["--checkpoint", str(tmp_path / "cps.jsonl")]
    _sql("UPDATE audit_events SET data = '{not json' WHERE seq = 4")
    capsys.readouterr()
    assert main(["audit", "verify", *extra]) == 1
    err = capsys.readouterr().err
    assert "BROKEN at seq 4" in err and "Traceback" not in err


async def test_the_audit_head_seq_is_a_gauge_read_at_each_scrape(db: Database) -> None:
    """Read from the database at scrape time: a head rewritten lower shows lower (the alert)."""
    h = await seeded(db, ScriptedModel([]))
    app = dataclasses.replace(app_of(h), metrics=Metrics())
    assert app.metrics is not None
    log = AuditLog(db)
    for i in range(3):
        await log.append(AuditEvent(kind="proposal", run_id=f"r{i}"))
    head = await log.head_seq()
    async with TestClient(TestServer(make_web_app(app, metrics_render=app.metrics.render))) as client:
        text = await (await client.get("/metrics")).text()
        assert f"signoff_audit_head_seq {float(head)}" in text
        async with db.sessions() as s, s.begin():
            await s.execute(sa_text("UPDATE audit_head SET seq = 0"))
        text = await (await client.get("/metrics")).text()
        assert "signoff_audit_head_seq 0.0" in text
