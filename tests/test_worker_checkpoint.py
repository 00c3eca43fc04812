"""The worker signs audit checkpoints on its schedule (an injected callable, off unless a key or
checkpoint file is configured); where the key and the checkpoints live; a busy money lock is
an honest 409, not a 500."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from aiohttp import web

from agent.errors import Busy
from agent.llm.testing import ScriptedModel
from agent.worker import Worker, WorkerConfig
from bot.app import create_app
from bot.settings import DEFAULT_CHECKPOINT_EVERY_S, load_settings
from sandbox.schema import upgrade
from storage.audit import AuditEvent
from storage.db import Database
from storage.locks import LockBusy
from storage.steps import ConcurrentTurn
from tests.api_kit import client_for
from tests.support import seeded


async def test_the_worker_runs_its_checkpoint_when_due_and_survives_a_failing_one(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """First pass: checkpoint; passes within the period: none; a raising checkpoint is logged."""
    h = await seeded(db, ScriptedModel([]))
    calls: list[int] = []

    async def checkpoint() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("disk full")

    worker = Worker(h.runtime, config=WorkerConfig(checkpoint_every_s=0.0), checkpoint=checkpoint)
    await worker.run_once()
    await worker.run_once()
    with caplog.at_level(logging.ERROR):
        await worker.run_once()
    assert len(calls) == 3 and "audit checkpoint failed" in caplog.text
    hourly = Worker(h.runtime, config=WorkerConfig(checkpoint_every_s=3600), checkpoint=checkpoint)
    await hourly.run_once()
    await hourly.run_once()
    assert len(calls) == 4
    assert Worker(h.runtime)._checkpoint is None  # no callable: nothing scheduled


async def test_the_app_worker_checkpoints_into_the_configured_file(tmp_path: Path) -> None:
    """SIGNOFF_AUDIT_CHECKPOINT_FILE (and the key file) turn the schedule on at the default period;
    the worker writes a checkpoint once the head has moved and not again while it stands still."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'w.db'}"
    await upgrade(url)
    cp_file, key_file = tmp_path / "cp" / "audit.jsonl", tmp_path / "key" / "audit.pem"
    settings = load_settings(
        {
            "SIGNOFF_DATABASE_URL": url,
            "SIGNOFF_LLM_PROVIDER": "scripted",
            "SIGNOFF_AUDIT_CHECKPOINT_FILE": str(cp_file),
            "SIGNOFF_AUDIT_KEY_FILE": str(key_file),
            "SIGNOFF_AUDIT_CHECKPOINT_EVERY_S": "0.000001",
        }
    )
    app = await create_app(settings, seed=False)
    try:
        await app.runtime.s.audit.append(AuditEvent(kind="proposal"))
        worker = app.worker()
        await worker.run_once()
        await worker.run_once()
        assert len(cp_file.read_text().splitlines()) == 1 and key_file.is_file()
    finally:
        await app.close()


def test_checkpoint_schedule_and_paths_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off by default; on (every 300 s) once a key or file is configured; 0 turns it off. The key
    and checkpoint files default outside the database, one checkpoint file per database."""
    monkeypatch.setenv("HOME", str(tmp_path))
    base = load_settings({})
    assert base.checkpoint_every_s is None
    assert base.audit_key_path == tmp_path / ".config" / "signoff" / "audit-key.pem"
    assert base.audit_checkpoint_path.parent == tmp_path / ".local" / "state" / "signoff"
    assert load_settings({"SIGNOFF_AUDIT_KEY_FILE": "/k.pem"}).checkpoint_every_s == DEFAULT_CHECKPOINT_EVERY_S
    assert (
        load_settings(
            {"SIGNOFF_AUDIT_CHECKPOINT_FILE": "/c", "SIGNOFF_AUDIT_CHECKPOINT_EVERY_S": "0"}
        ).checkpoint_every_s
        is None
    )
    one = load_settings({"SIGNOFF_DATABASE_URL": "postgresql+asyncpg://app:secret@db/shop"})
    same = load_settings({"SIGNOFF_DATABASE_URL": "postgresql+asyncpg://app:other@db/shop"})
    other = load_settings({"SIGNOFF_DATABASE_URL": "postgresql+asyncpg://app@db/shop2"})
    assert one.audit_checkpoint_path == same.audit_checkpoint_path != other.audit_checkpoint_path
    monkeypatch.chdir(tmp_path)
    rel = load_settings({"SIGNOFF_DATABASE_URL": "sqlite+aiosqlite:///./signoff.db"})
    absolute = load_settings({"SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}"})
    assert rel.database_id == absolute.database_id


async def test_a_busy_money_lock_is_a_409_not_a_500(db: Database) -> None:
    """Busy escaping a request becomes {"error": "conflict"} with the "try again" wording."""
    h = await seeded(db, ScriptedModel([]))

    async def busy(_request: web.Request) -> web.Response:
        raise Busy(str(LockBusy("money:C-7", 30)))

    async with client_for(h, extra_routes=[web.get("/api/busy", busy)]) as client:
        r = await client.get("/api/busy")
        assert r.status == 409 and (await r.json())["error"] == "conflict"


def test_the_cli_answers_a_busy_money_lock_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`signoff approvals approve` whose action waits out the lock: exit 1, "busy; try again", no traceback."""
    import bot.cli.commands

    async def busy(_args: object) -> int:
        raise Busy(str(LockBusy("money:C-7", 30)))

    monkeypatch.setattr(bot.cli.commands, "_dispatch", busy)
    assert bot.cli.commands.main(["audit", "verify"]) == 1
    err = capsys.readouterr().err
    assert "lock money:C-7 is busy" in err and "try again" in err and "Traceback" not in err


@pytest.mark.parametrize("fault", [LockBusy("money:C-7", 30), ConcurrentTurn("conversation c moved on")])
async def test_the_runtime_hands_faces_busy_never_a_storage_exception(db: Database, fault: Exception) -> None:
    """A storage fault under a runtime verb (confirm, decide, a message) reaches the face as the
    agent's Busy, with the storage exception kept as its cause; nothing else about it changes."""
    from tools.context import Principal

    h = await seeded(db, ScriptedModel([]))

    async def broken(*_a: object, **_k: object) -> None:
        raise fault

    customer = Principal(kind="customer", id="C-7", customer_id="C-7")
    h.services.confirmations.get = broken  # type: ignore[method-assign]
    h.services.approvals.get = broken  # type: ignore[method-assign]
    h.services.conversations.get = broken  # type: ignore[method-assign]
    calls = [
        h.runtime.confirm("cnf_x", actor=customer, accept=True),
        h.runtime.decide("apr_x", expected_version=1, decision="approve", actor=customer),
        h.runtime.chat(principal=customer, channel="api", message="hi", conversation_id="c"),
    ]
    for call in calls:
        with pytest.raises(Busy) as info:
            await call
        assert info.value.__cause__ is fault and str(info.value) == str(fault)
