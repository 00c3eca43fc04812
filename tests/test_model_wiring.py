"""The composition root builds the model clients on the official SDKs, with the retry and
timeout settings handed to the SDK and nothing of ours retrying on top."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.llm.anthropic import AnthropicClient
from agent.llm.openai_compat import OpenAICompatClient
from bot.app import build_model
from bot.settings import load_settings

ROOT = Path(__file__).resolve().parents[1]


def test_model_settings_reach_the_vendor_sdk() -> None:
    """SIGNOFF_MODEL_MAX_RETRIES and SIGNOFF_MODEL_TIMEOUT_S configure the SDK's own retries and
    per-attempt timeout; SIGNOFF_MODEL_DEADLINE_S bounds the whole call."""
    env = {
        "ANTHROPIC_API_KEY": "sk-test",
        "SIGNOFF_MODEL_MAX_RETRIES": "7",
        "SIGNOFF_MODEL_TIMEOUT_S": "12.5",
        "SIGNOFF_MODEL_DEADLINE_S": "30",
    }
    client = build_model(load_settings(env))
    assert isinstance(client, AnthropicClient)
    assert client._sdk.max_retries == 7
    assert client._sdk.timeout == 12.5
    assert client._config.deadline_s == 30
    openai = build_model(
        load_settings(
            {
                "SIGNOFF_LLM_PROVIDER": "openai",
                "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
                "SIGNOFF_MODEL_MAX_RETRIES": "0",
            }
        )
    )
    assert isinstance(openai, OpenAICompatClient)
    assert (openai._sdk.max_retries, openai._sdk.timeout) == (0, 60.0)


def test_defaults_are_four_retries_sixty_seconds_an_attempt_two_minutes_a_call() -> None:
    """Without the variables: 4 SDK retries, 60 s per attempt, 120 s per call."""
    settings = load_settings({"ANTHROPIC_API_KEY": "sk-test"})
    assert (
        settings.signoff_model_max_retries,
        settings.signoff_model_timeout_s,
        settings.signoff_model_deadline_s,
    ) == (4, 60.0, 120.0)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SIGNOFF_MODEL_MAX_RETRIES", "-1"),
        ("SIGNOFF_MODEL_MAX_RETRIES", "many"),
        ("SIGNOFF_MODEL_TIMEOUT_S", "0"),
        ("SIGNOFF_MODEL_DEADLINE_S", "-5"),
    ],
)
def test_a_bad_model_setting_is_one_line_naming_the_variable(name: str, value: str) -> None:
    """A malformed retry or timeout setting fails at start-up naming its variable."""
    with pytest.raises(ConfigError) as info:
        load_settings({name: value})
    assert str(info.value).startswith(f"{name}:") and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("sdk", "adapter"), [("anthropic", "agent/llm/anthropic.py"), ("openai", "agent/llm/openai_compat.py")]
)
def test_each_vendor_sdk_is_imported_by_its_adapter_alone(sdk: str, adapter: str) -> None:
    """Vendor exceptions stop at the adapter: no other project module imports the SDK."""
    offenders = [
        str(path.relative_to(ROOT))
        for package in ("agent", "tools", "storage", "bot")
        for path in (ROOT / package).rglob("*.py")
        if str(path.relative_to(ROOT)) != adapter
        if any(
            line.startswith((f"import {sdk}", f"from {sdk} ", f"from {sdk}.")) for line in path.read_text().splitlines()
        )
    ]
    assert offenders == []


def test_no_hand_written_http_client_for_a_vendor_with_an_sdk() -> None:
    """Model providers are reached through their SDKs only: no raw HTTP client in agent/llm/."""
    raw = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "agent" / "llm").glob("*.py")
        if any(w in p.read_text() for w in ("aiohttp", "httpx", "urllib.request", "ClientSession"))
    ]
    assert raw == []
