"""Simulators of the outside systems the faces talk to, beside the sandbox shop: a local,
recording, strict Slack Web API (``signoff demo --slack`` and the tests use it). Nothing here
imports a face: a face's test fakes come from here, not from the face."""

from sandbox.slack_web.api import FakeSlackApi
from sandbox.slack_web.blocks import block_problems, render_blocks, text_size
from sandbox.slack_web.records import (
    BOT_ID,
    BOT_USER_ID,
    TEAM_ID,
    Fault,
    SeenMessage,
    SlackCall,
    SlackError,
    slack_channel,
    slack_user,
)
from sandbox.slack_web.server import FakeClock, LocalServer, RecordedRequest

__all__ = [
    "BOT_ID",
    "BOT_USER_ID",
    "TEAM_ID",
    "FakeClock",
    "FakeSlackApi",
    "Fault",
    "LocalServer",
    "RecordedRequest",
    "SeenMessage",
    "SlackCall",
    "SlackError",
    "block_problems",
    "render_blocks",
    "slack_channel",
    "slack_user",
    "text_size",
]
