"""The Slack face's section of the settings: ``SLACK_*`` and ``SIGNOFF_SLACK_*`` (with the
approvals and escalation channels and ``SIGNOFF_SECRET_KEY``) read into a :class:`SlackConfig`
(``ValueError`` naming the variable). ``bot/settings.py`` holds the variables; this folder says
what they mean. Nothing here imports the SDK or the face's runtime code."""

from __future__ import annotations

import re

from bot.settings import Settings, reveal
from bot.slack.config import SlackConfig

_CHANNEL = re.compile(r"[CGD][A-Z0-9]{2,31}")
_TEAM = re.compile(r"[TE][A-Z0-9]{2,31}")
_GROUP = re.compile(r"S[A-Z0-9]{2,31}")


def allowed_teams(s: Settings) -> frozenset[str] | None:
    """``SIGNOFF_SLACK_ALLOWED_TEAMS`` as a set of team ids (``None`` when unset)."""
    if not s.signoff_slack_allowed_teams:
        return None
    return frozenset(t.strip() for t in s.signoff_slack_allowed_teams.split(",") if t.strip())


def _check_ids(s: Settings) -> None:
    """The Slack ids' shapes, checked whether or not Slack is configured (a stray one is still wrong)."""
    for name, value in (
        ("SIGNOFF_APPROVALS_CHANNEL", s.signoff_approvals_channel),
        ("SIGNOFF_ESCALATION_CHANNEL", s.signoff_escalation_channel),
    ):
        if value is not None and not _CHANNEL.fullmatch(value):
            raise ValueError(f"{name}: must be a Slack channel id such as C0123ABCD (not a #name)")
    teams = s.signoff_slack_allowed_teams
    if teams is not None and not all(_TEAM.fullmatch(t.strip()) for t in teams.split(",")):
        raise ValueError(
            "SIGNOFF_SLACK_ALLOWED_TEAMS: must be Slack team ids separated by commas, such as T0123ABCD,T0456EFGH"
        )
    for name, value in (
        ("SIGNOFF_SLACK_SUPERVISOR_GROUP", s.signoff_slack_supervisor_group),
        ("SIGNOFF_SLACK_ONCALL_GROUP", s.signoff_slack_oncall_group),
    ):
        if value is not None and not _GROUP.fullmatch(value):
            raise ValueError(f"{name}: must be a Slack user group id such as S0123ABCD")


def _check_credentials(s: Settings) -> None:
    """The OAuth install and the bot token each need what proves Slack is talking."""
    if s.slack_client_id and not s.slack_client_secret:
        raise ValueError("SLACK_CLIENT_SECRET: required when SLACK_CLIENT_ID is set (OAuth install)")
    if s.slack_client_id and len(reveal(s.signoff_secret_key) or "") < 32:
        raise ValueError(
            "SIGNOFF_SECRET_KEY: required with SLACK_CLIENT_ID, 32+ characters (tokens are encrypted at rest)"
        )
    if s.slack_client_id and not s.slack_signing_secret:
        raise ValueError("SLACK_SIGNING_SECRET: required with SLACK_CLIENT_ID (the OAuth install is over HTTP)")
    if s.slack_bot_token and not (s.slack_signing_secret or s.slack_app_token):
        raise ValueError(
            "SLACK_SIGNING_SECRET: required for the Slack app over HTTP (or SLACK_APP_TOKEN for Socket Mode)"
        )


def slack_config_of(s: Settings) -> SlackConfig | None:
    """The Slack section as a :class:`SlackConfig`; ``None`` without ``SLACK_BOT_TOKEN`` and the
    OAuth client. ``ValueError`` naming the variable."""
    _check_ids(s)
    _check_credentials(s)
    if not (s.slack_bot_token or s.slack_client_id):
        return None
    return SlackConfig(
        bot_token=reveal(s.slack_bot_token),
        signing_secret=reveal(s.slack_signing_secret),
        app_token=reveal(s.slack_app_token),
        api_url=s.signoff_slack_api_url,
        approvals_channel=s.signoff_approvals_channel,
        escalation_channel=s.signoff_escalation_channel,
        supervisor_group=s.signoff_slack_supervisor_group,
        oncall_group=s.signoff_slack_oncall_group,
        streaming=s.signoff_slack_streaming,
        client_id=s.slack_client_id,
        client_secret=reveal(s.slack_client_secret),
        allowed_teams=allowed_teams(s),
        secret_key=reveal(s.signoff_secret_key),
    )
