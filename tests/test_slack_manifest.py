"""manifest.yml is what an admin pastes into Slack: it must carry the contract (INTERFACES.md, Slack)
and every scope the Slack face's calls need."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

MANIFEST = Path(__file__).resolve().parent.parent / "manifest.yml"

#: Web API methods the Slack face calls, and the bot scope each needs.
SCOPES_FOR_CALLS = {
    "chat.postMessage / update / postEphemeral / startStream": "chat:write",
    "assistant.threads.setStatus": "assistant:write",
    "users.info": "users:read",
    "conversations.info (public)": "channels:read",
    "conversations.info (private)": "groups:read",
    "usergroups.users.list": "usergroups:read",
    "reactions.add": "reactions:write",
    "app_mention": "app_mentions:read",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
    "message.im": "im:history",
    "/signoff": "commands",
}


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    data = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_top_level_keys_are_slacks_manifest_sections(manifest: dict[str, Any]) -> None:
    assert set(manifest) <= {
        "_metadata",
        "display_information",
        "features",
        "oauth_config",
        "settings",
        "functions",
        "workflows",
        "outgoing_domains",
        "types",
        "datastores",
    }
    assert manifest["display_information"]["name"] == "signoff"
    assert len(manifest["display_information"]["description"]) <= 140
    assert 174 <= len(manifest["display_information"]["long_description"]) <= 4000


def test_events_are_subscribed_at_the_one_endpoint(manifest: dict[str, Any]) -> None:
    events = manifest["settings"]["event_subscriptions"]
    assert {"app_mention", "message.im", "message.channels", "message.groups", "app_home_opened"} <= set(
        events["bot_events"]
    )
    assert events["request_url"] == "https://YOUR_HOST/slack/events"


def test_interactivity_is_enabled_at_the_one_endpoint(manifest: dict[str, Any]) -> None:
    assert manifest["settings"]["interactivity"] == {
        "is_enabled": True,
        "request_url": "https://YOUR_HOST/slack/events",
    }


def test_socket_mode_is_off_by_default(manifest: dict[str, Any]) -> None:
    assert manifest["settings"]["socket_mode_enabled"] is False
    assert "socket_mode_enabled to true" in MANIFEST.read_text(encoding="utf-8")


def test_the_signoff_slash_command(manifest: dict[str, Any]) -> None:
    (command,) = manifest["features"]["slash_commands"]
    assert command["command"] == "/signoff"
    assert command["url"] == "https://YOUR_HOST/slack/events"
    assert "assist C-7" in command["usage_hint"] and "queue" in command["usage_hint"]


def test_app_home_has_home_and_messages_tabs_and_the_agent_view(manifest: dict[str, Any]) -> None:
    features = manifest["features"]
    assert features["app_home"]["home_tab_enabled"] is True
    assert features["app_home"]["messages_tab_enabled"] is True
    assert features["app_home"]["messages_tab_read_only_enabled"] is False
    assert features["agent_view"]["agent_description"].strip()
    assert "assistant_view" not in features  # one experience at a time; the legacy swap is documented
    assert all(p["title"] and p["message"] for p in features["agent_view"]["suggested_prompts"])
    assert features["bot_user"]["display_name"] == "signoff"


@pytest.mark.parametrize(("needed_by", "scope"), sorted(SCOPES_FOR_CALLS.items()))
def test_every_scope_the_code_needs_is_requested(manifest: dict[str, Any], needed_by: str, scope: str) -> None:
    assert scope in manifest["oauth_config"]["scopes"]["bot"], needed_by


def test_no_scope_beyond_what_the_code_uses(manifest: dict[str, Any]) -> None:
    """Least privilege: users:read.email is not needed (linking mails a code to the address on file)."""
    bot = manifest["oauth_config"]["scopes"]["bot"]
    assert len(bot) == len(set(bot))
    assert set(bot) == set(SCOPES_FOR_CALLS.values()) | {"im:write"}
