"""The strict local Slack Web API the tests talk to: the product's own recording API
(``sandbox/slack_web/``, which ``signoff demo --slack`` uses), under the fakes' names."""

from sandbox.slack_web import (
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
