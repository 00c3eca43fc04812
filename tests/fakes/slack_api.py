"""The strict local Slack Web API the tests talk to: the product's own recording API
(``bot/slack/recording.py``, which ``signoff demo --slack`` uses), under the fakes' names."""

from bot.slack.recording import (
    BOT_ID,
    BOT_USER_ID,
    TEAM_ID,
    FakeClock,
    FakeSlackApi,
    Fault,
    SeenMessage,
    SlackCall,
    block_problems,
    render_blocks,
    slack_channel,
    slack_user,
    text_size,
)

__all__ = [
    "BOT_ID",
    "BOT_USER_ID",
    "TEAM_ID",
    "FakeClock",
    "FakeSlackApi",
    "Fault",
    "SeenMessage",
    "SlackCall",
    "block_problems",
    "render_blocks",
    "slack_channel",
    "slack_user",
    "text_size",
]
