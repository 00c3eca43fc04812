"""Deployment hardening: /metrics behind a token or on its own listener (/healthz open); an
empty production store is never seeded with demo data unless asked; long-running faces need
a model; production keeps no notifications in memory; nothing logs personal data."""

from __future__ import annotations

import ast
import asyncio
import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest

from agent.errors import ConfigError
from agent.llm.testing import ScriptedModel
from agent.notify import EscalationNotice, LogNotifier, RecordingNotifier, RoutingNotifier
from agent.outcomes import TurnResult
from bot.app import create_app
from bot.cli import main
from bot.server import serve
from bot.settings import load_settings
from sandbox.io import store_is_empty
from sandbox.schema import upgrade
from storage.db import Database
from storage.records import Approval, Conversation
from tests.api_kit import app_of, client_for, settings
from tests.support import app_setting, seeded

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "metrics-token-0123456789"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- /metrics ---------------------------------------------------------------------------------


async def test_metrics_token_guards_metrics_and_leaves_healthz_open(db: Database) -> None:
    """With SIGNOFF_METRICS_TOKEN, /metrics wants that bearer token (401 otherwise); /healthz does not."""
    h = await seeded(db, ScriptedModel([]))
    async with client_for(h, settings(SIGNOFF_METRICS_TOKEN=TOKEN), metrics_render=lambda: b"up 1\n") as client:
        assert (await client.get("/healthz")).status == 200
        for headers in ({}, {"Authorization": "Bearer wrong-token-wrong-token"}, {"Authorization": TOKEN}):
            r = await client.get("/metrics", headers=headers)
            assert r.status == 401 and (await r.json())["error"] == "unauthorized", headers
        r = await client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status == 200 and await r.text() == "up 1\n"


async def test_metrics_on_a_separate_listener_are_not_on_the_main_one(db: Database) -> None:
    """With a metrics address, /metrics answers there (and /healthz with it) and is 404 on the main port."""
    h = await seeded(db, ScriptedModel([]))
    port, metrics_port, ready, stop = free_port(), free_port(), asyncio.Event(), asyncio.Event()
    server = asyncio.create_task(
        serve(
            app_of(h),
            host="127.0.0.1",
            port=port,
            worker=False,
            metrics_render=lambda: b"up 1\n",
            ready=ready,
            stop=stop,
            metrics_listen=("127.0.0.1", metrics_port),
        )
    )
    try:
        await asyncio.wait_for(ready.wait(), timeout=10)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/metrics") as r:
                assert r.status == 404
            async with session.get(f"http://127.0.0.1:{port}/healthz") as r:
                assert r.status == 200
            async with session.get(f"http://127.0.0.1:{metrics_port}/metrics") as r:
                assert r.status == 200 and await r.text() == "up 1\n"
            async with session.get(f"http://127.0.0.1:{metrics_port}/healthz") as r:
                assert r.status == 200
    finally:
        stop.set()
        await asyncio.wait_for(server, timeout=15)


@pytest.mark.parametrize("value", ["9100", "host:", "host:99999", ":9100"])
def test_a_bad_metrics_address_is_one_line_naming_the_variable(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^SIGNOFF_METRICS_ADDR: must be HOST:PORT"):
        load_settings({"SIGNOFF_METRICS_ADDR": value})
    assert load_settings({"SIGNOFF_METRICS_ADDR": "0.0.0.0:9100"}).metrics_listen("::1") == ("0.0.0.0", 9100)


# -- seeding ------------------------------------------------------------------------------------


async def _empty_migrated(tmp_path: Path) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'seed.db'}"
    await upgrade(url)
    return url


@pytest.mark.parametrize(
    ("extra", "seeded_"),
    [
        ({}, False),  # production by default, SQLite or not
        ({"SIGNOFF_ENV": "development"}, True),  # development: the demo, as INTERFACES says
        ({"SIGNOFF_ENV": "development", "SIGNOFF_STORE_SEED": "demo"}, True),
        ({"SIGNOFF_ENV": "production"}, False),  # production: never
    ],
)
async def test_an_empty_production_store_is_never_seeded_with_demo_data_unless_asked(
    tmp_path: Path, extra: dict[str, str], seeded_: bool
) -> None:
    url = await _empty_migrated(tmp_path)
    app = await create_app(load_settings({"SIGNOFF_DATABASE_URL": url, "SIGNOFF_LLM_PROVIDER": "scripted", **extra}))
    try:
        assert (not await store_is_empty(app.db)) is seeded_
    finally:
        await app.close()


async def test_production_seeds_a_named_dataset_file(tmp_path: Path) -> None:
    """SIGNOFF_STORE_SEED naming a file loads that file in production too."""
    from bot.app import demo_dataset_path

    url = await _empty_migrated(tmp_path)
    app = await create_app(
        load_settings(
            {
                "SIGNOFF_DATABASE_URL": url,
                "SIGNOFF_LLM_PROVIDER": "scripted",
                "SIGNOFF_ENV": "production",
                "SIGNOFF_STORE_SEED": str(demo_dataset_path()),
            }
        )
    )
    try:
        assert not await store_is_empty(app.db)
    finally:
        await app.close()


def test_production_is_the_default_and_development_is_asked_for() -> None:
    """A SQLite deployment is production too; only SIGNOFF_ENV=development is not."""
    pg = "postgresql+asyncpg://signoff@db/signoff"
    assert load_settings({}).is_production is True
    assert load_settings({"SIGNOFF_DATABASE_URL": "sqlite+aiosqlite:////data/signoff.db"}).is_production is True
    assert load_settings({"SIGNOFF_ENV": "production"}).is_production is True
    assert load_settings({"SIGNOFF_DATABASE_URL": pg}).is_production is True
    assert load_settings({"SIGNOFF_DATABASE_URL": pg, "SIGNOFF_ENV": "development"}).is_production is False
    assert load_settings({}, development=True).is_production is False  # `signoff demo`
    with pytest.raises(ConfigError, match="^SIGNOFF_STORE_SEED: `demo` seeds the demo staff; refused in production"):
        load_settings({"SIGNOFF_STORE_SEED": "demo"})
    with pytest.raises(ConfigError, match="^SIGNOFF_STORE_SEED: must be `demo` or a dataset file"):
        load_settings({"SIGNOFF_STORE_SEED": "/nonexistent.json"})
    with pytest.raises(ConfigError, match="^SIGNOFF_ENV"):
        load_settings({"SIGNOFF_ENV": "prod"})


# -- a model for the long-running faces ---------------------------------------------------------


@pytest.fixture
def no_model_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if app_setting(key):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("command", [["serve"], ["worker"]])
def test_serve_and_worker_refuse_to_start_without_a_model(
    no_model_env: None, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """No key and no explicit provider: exit 2 with one line naming ANTHROPIC_API_KEY."""
    assert main(command) == 2
    err = capsys.readouterr().err.strip()
    assert "ANTHROPIC_API_KEY: required for `signoff " in err and "\n" not in err
    assert "SIGNOFF_LLM_PROVIDER=scripted" in err


def test_an_explicit_provider_satisfies_the_model_check(no_model_env: None) -> None:
    """SIGNOFF_LLM_PROVIDER=scripted (or openai with its URL) is an explicit choice; demo needs nothing."""
    load_settings({"SIGNOFF_LLM_PROVIDER": "scripted"}).require_model("serve")
    load_settings({"SIGNOFF_LLM_PROVIDER": "openai", "OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}).require_model(
        "worker"
    )
    load_settings({"ANTHROPIC_API_KEY": "sk-test"}).require_model("socket")
    with pytest.raises(ConfigError):
        load_settings({}).require_model("socket")
    assert load_settings({}).provider == "scripted"  # the demo's default is unchanged


# -- notifications and personal data --------------------------------------------------------------


async def test_the_composition_root_keeps_no_notifications_in_memory(tmp_path: Path) -> None:
    url = await _empty_migrated(tmp_path)
    app = await create_app(load_settings({"SIGNOFF_DATABASE_URL": url, "SIGNOFF_LLM_PROVIDER": "scripted"}))
    try:
        assert isinstance(app.notifier, RoutingNotifier)
        surfaces = [app.notifier.fallback, *app.notifier.staff, *app.notifier.faces.values()]
        assert isinstance(app.notifier.fallback, LogNotifier)
        assert not any(isinstance(n, RecordingNotifier) or hasattr(n, "events") for n in surfaces)
    finally:
        await app.close()


PERSONAL = ("jane.new@example.org", "+14155550199", "9 Elm Rd")


def _approval() -> Approval:
    now = datetime.now(UTC)
    return Approval(
        id="apr_1",
        proposal_id="prop_1",
        conversation_id="conv_1",
        run_id="run_1",
        tool="update_contact_details",
        arguments={"email": PERSONAL[0], "phone": PERSONAL[1]},
        args_hash="h",
        customer_id="C-7",
        summary=f"Change contact details: email to {PERSONAL[0]}, phone to {PERSONAL[1]}, ship to {PERSONAL[2]}",
        status="pending",
        version=1,
        required_role="supervisor",
        approvals_required=1,
        decisions=(),
        requester="customer:C-7",
        decider=None,
        comment=None,
        rationale=None,
        evidence=(),
        provenance={},
        idempotency_key=None,
        policy_version="p1",
        result=None,
        superseded_by=None,
        surfaces={},
        expires_at=now + timedelta(hours=1),
        created_at=now,
        decided_at=None,
    )


@pytest.mark.parametrize("notifier", [LogNotifier(), RecordingNotifier()], ids=["log", "recording"])
async def test_notifiers_log_ids_never_personal_data(
    notifier: LogNotifier | RecordingNotifier, caplog: pytest.LogCaptureFixture
) -> None:
    """Summaries and follow-ups carry new emails, phones and addresses: only ids reach the log."""
    conv = Conversation(
        id="conv_1",
        channel="api",
        external_ref=None,
        principal_kind="customer",
        principal_id="C-7",
        customer_id="C-7",
        status="open",
        loaded_groups=(),
        model="m",
        prompt_version="p",
        next_seq=0,
        meta={},
        created_at=datetime.now(UTC),
    )
    with caplog.at_level(logging.DEBUG):
        await notifier.approval_requested(_approval())
        await notifier.approval_decided(_approval())
        await notifier.escalated(
            EscalationNotice(
                conversation=conv, reason="customer_request", summary=f"wants mail at {PERSONAL[0]}", trace=()
            )
        )
        text = f"Done: your email is now {PERSONAL[0]} and phone {PERSONAL[1]}."
        await notifier.follow_up(
            conv,
            TurnResult(
                conversation_id="conv_1",
                run_id="run_1",
                reply=text,
                iterations=1,
                input_tokens=0,
                output_tokens=0,
                pending=(),
                outcome="answered",
            ),
        )
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "apr_1" in logged and "conv_1" in logged
    assert not any(p in logged for p in PERSONAL), logged


_LEVELS = {"info", "warning", "error", "exception", "critical"}
_PERSONAL_NAMES = {
    "summary",
    "email",
    "phone",
    "address",
    "body",
    "to",
    "text",
    "reply",
    "name",
    "line1",
    "arguments",
    "args",
    "rationale",
}
#: Expressions that merely look personal: a tool's name, a text's length.
_NOT_PERSONAL = {"tool.name", "len(text)"}


def test_no_logging_call_at_info_or_above_passes_personal_fields() -> None:
    """Every log.info/warning/error/exception call in the package: none of its arguments is a
    summary, email, phone, address, message body, reply text, name or the raw tool arguments."""
    offenders = []
    for pkg in ("agent", "bot", "tools", "storage"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in _LEVELS
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in {"log", "logger", "_log"}
                ):
                    continue
                for arg in [*node.args[1:], *(k.value for k in node.keywords)]:
                    if ast.unparse(arg) in _NOT_PERSONAL:
                        continue
                    names = {n.id for n in ast.walk(arg) if isinstance(n, ast.Name)}
                    names |= {n.attr for n in ast.walk(arg) if isinstance(n, ast.Attribute)}
                    if names & _PERSONAL_NAMES:
                        found = sorted(names & _PERSONAL_NAMES)
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} logs {found}")
    assert offenders == []
