"""Slack's and email's settings are read in their own folders (``bot/slack/settings.py``,
``bot/email/settings.py``) as Teams' are: the same variables, and each bad one refused at start
with one line that starts with its name."""

from __future__ import annotations

import pytest

from agent.errors import ConfigError
from bot.email.config import SmtpConfig
from bot.settings import load_settings
from bot.slack.config import SlackConfig

BASE = {"SIGNOFF_LLM_PROVIDER": "scripted"}
SLACK = {**BASE, "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s" * 32}
KEY = "k" * 32


@pytest.mark.parametrize(
    ("env", "first"),
    [
        ({"SIGNOFF_APPROVALS_CHANNEL": "#approvals"}, "SIGNOFF_APPROVALS_CHANNEL: must be a Slack channel id"),
        ({"SIGNOFF_ESCALATION_CHANNEL": "general"}, "SIGNOFF_ESCALATION_CHANNEL: must be a Slack channel id"),
        ({"SIGNOFF_SLACK_ALLOWED_TEAMS": "T0123,acme"}, "SIGNOFF_SLACK_ALLOWED_TEAMS: must be Slack team ids"),
        ({"SIGNOFF_SLACK_SUPERVISOR_GROUP": "U123"}, "SIGNOFF_SLACK_SUPERVISOR_GROUP: must be a Slack user group"),
        ({"SIGNOFF_SLACK_ONCALL_GROUP": "@oncall"}, "SIGNOFF_SLACK_ONCALL_GROUP: must be a Slack user group"),
        ({"SLACK_CLIENT_ID": "1.2"}, "SLACK_CLIENT_SECRET: required when SLACK_CLIENT_ID"),
        ({"SLACK_CLIENT_ID": "1.2", "SLACK_CLIENT_SECRET": "c"}, "SIGNOFF_SECRET_KEY: required with SLACK_CLIENT_ID"),
        (
            {"SLACK_CLIENT_ID": "1.2", "SLACK_CLIENT_SECRET": "c", "SIGNOFF_SECRET_KEY": KEY},
            "SLACK_SIGNING_SECRET: required with SLACK_CLIENT_ID",
        ),
        ({"SLACK_BOT_TOKEN": "xoxb-1"}, "SLACK_SIGNING_SECRET: required for the Slack app over HTTP"),
        ({"SIGNOFF_SMTP_URL": "http://mail.example"}, "SIGNOFF_SMTP_URL: must be smtp://host:port"),
        ({"SIGNOFF_SMTP_URL": "smtp://"}, "SIGNOFF_SMTP_URL: must be smtp://host:port"),
        ({"SIGNOFF_EMAIL_FROM": "Shop <a@b.example>"}, "SIGNOFF_EMAIL_FROM: must be a plain address"),
        ({"SIGNOFF_SMTP_URL": "smtp://mail.example:25"}, "SIGNOFF_EMAIL_FROM: required with SIGNOFF_SMTP_URL"),
    ],
)
def test_a_bad_slack_or_email_setting_is_refused_naming_it(env: dict[str, str], first: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({**BASE, **env})
    assert str(info.value).startswith(first), str(info.value)


def test_the_slack_section_reads_every_variable() -> None:
    assert load_settings(BASE).slack_config() is None
    cfg = load_settings(
        {
            **SLACK,
            "SLACK_APP_TOKEN": "xapp-1",
            "SIGNOFF_SLACK_API_URL": "http://127.0.0.1:9/api",
            "SIGNOFF_APPROVALS_CHANNEL": "C0APPROVE",
            "SIGNOFF_ESCALATION_CHANNEL": "G0ESCALATE",
            "SIGNOFF_SLACK_SUPERVISOR_GROUP": "S0SUP",
            "SIGNOFF_SLACK_ONCALL_GROUP": "S0ONCALL",
            "SIGNOFF_SLACK_STREAMING": "false",
            "SIGNOFF_SLACK_ALLOWED_TEAMS": "T0AAA, E0BBB",
        }
    ).slack_config()
    assert cfg == SlackConfig(
        bot_token="xoxb-1",
        signing_secret="s" * 32,
        app_token="xapp-1",
        api_url="http://127.0.0.1:9/api",
        approvals_channel="C0APPROVE",
        escalation_channel="G0ESCALATE",
        supervisor_group="S0SUP",
        oncall_group="S0ONCALL",
        streaming=False,
        allowed_teams=frozenset({"T0AAA", "E0BBB"}),
    )
    assert cfg.base_url == "http://127.0.0.1:9/api/"


def test_the_email_section_reads_the_shop_address_from_the_setting_else_the_url() -> None:
    assert load_settings(BASE).smtp_config() is None
    url = "smtps://u:p@mail.example?from=url@shop.example"
    assert load_settings({**BASE, "SIGNOFF_SMTP_URL": url}).smtp_config() == SmtpConfig(
        host="mail.example", port=465, ssl=True, username="u", password="p", from_address="url@shop.example"
    )
    chosen = load_settings({**BASE, "SIGNOFF_SMTP_URL": url, "SIGNOFF_EMAIL_FROM": "help@shop.example"})
    assert chosen.smtp_config() is not None and chosen.smtp_config().from_address == "help@shop.example"  # type: ignore[union-attr]
