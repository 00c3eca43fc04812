"""The Slack face's settings, as one small frozen dataclass (read from the environment by
``bot/settings.py``, given meaning by ``bot/slack/settings.py``; no SDK here)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class SlackConfig:
    """What the Slack face needs from the settings (``SLACK_*``, ``SIGNOFF_SLACK_*``)."""

    bot_token: str | None = field(default=None, repr=False)
    signing_secret: str | None = field(default=None, repr=False)
    app_token: str | None = field(default=None, repr=False)
    api_url: str | None = None
    approvals_channel: str | None = None
    escalation_channel: str | None = None
    supervisor_group: str | None = None
    oncall_group: str | None = None
    streaming: bool = True
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    #: The workspaces served (``SIGNOFF_SLACK_ALLOWED_TEAMS``); ``None``: any that installs.
    allowed_teams: frozenset[str] | None = None
    #: Seals the OAuth installations' tokens at rest (``SIGNOFF_SECRET_KEY``).
    secret_key: str | None = field(default=None, repr=False)
    #: Seconds between two messages in one channel (Slack allows about one a second).
    min_interval_s: float = 1.0

    @property
    def base_url(self) -> str | None:
        """The Web API's base URL with the trailing slash the SDK expects."""
        if not self.api_url:
            return None
        return self.api_url if self.api_url.endswith("/") else self.api_url + "/"
