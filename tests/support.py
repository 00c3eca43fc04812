"""Helpers shared by scenario tests: a seeded runtime on a test database."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agent.llm.base import ModelClient, ModelRequest
from agent.notify import RecordingNotifier
from agent.policy import Policy
from agent.runtime import Runtime
from agent.services import Services
from bot.app import demo_dataset_path, sandbox_services
from sandbox.dataset import load_dataset_file
from sandbox.io import load_dataset
from storage.db import Database
from tools.context import Principal

#: The app's settings in an environment; a test scrubs them for a clean start.
APP_SETTINGS = ("SIGNOFF_", "ANTHROPIC_", "OPENAI_", "SLACK_", "OTEL_")
#: Kept when scrubbing: the test database and the session's SIGNOFF_ENV (tests/conftest.py).
KEPT_SETTINGS = ("SIGNOFF_TEST_PG_URL", "SIGNOFF_ENV")


def app_setting(name: str) -> bool:
    """Whether a test that wants a clean start drops ``name`` from its environment."""
    return name.startswith(APP_SETTINGS) and name not in KEPT_SETTINGS


def scrubbed_env() -> dict[str, str]:
    """This process's environment without the app's settings (a ``signoff`` subprocess's base)."""
    return {k: v for k, v in os.environ.items() if not app_setting(k)}


C7 = Principal(kind="customer", id="C-7", customer_id="C-7")
C8 = Principal(kind="customer", id="C-8", customer_id="C-8")
REP = Principal(kind="rep", id="S-1")
SUP_A = Principal(kind="supervisor", id="S-3")
SUP_B = Principal(kind="supervisor", id="S-4")


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now


@dataclass(frozen=True, kw_only=True)
class Harness:
    db: Database
    runtime: Runtime
    services: Services
    notifier: RecordingNotifier
    clock: Clock


async def seeded(
    db: Database, model: ModelClient, *, policy: Policy | None = None, clock: Clock | None = None
) -> Harness:
    """The demo dataset loaded (rebased to now) and a runtime over it."""
    clock = clock or Clock(datetime.now(UTC).replace(microsecond=0))
    await load_dataset(db, load_dataset_file(demo_dataset_path()), rebase_to=clock.now)
    notifier = RecordingNotifier()
    services = sandbox_services(db=db, model=model, policy=policy, notifier=notifier, clock=clock)
    return Harness(db=db, runtime=Runtime(services), services=services, notifier=notifier, clock=clock)


def last_tool_result(request: ModelRequest) -> Any:
    """The parsed content of the newest tool_result block in a request."""
    for message in reversed(request.messages):
        for block in reversed(message.content):
            if block.get("type") == "tool_result":
                try:
                    return json.loads(block["content"])
                except (TypeError, ValueError):
                    return block["content"]
    return None


def last_user_text(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            return " ".join(str(b.get("text", "")) for b in message.content if b.get("type") == "text")
    return ""


Responder = Callable[[ModelRequest], Any]
