"""Outgoing mail over aiosmtplib: async on the event loop, STARTTLS never silently skipped,
a server that stalls costs at most the configured timeout."""

from __future__ import annotations

import asyncio
import time

import aiosmtplib
import pytest
from aiosmtpd.controller import Controller

from bot.email.smtp import OutgoingEmail, SmtpConfig, SmtpMailer
from tests.test_email_bridge import Inbox, free_port

MAIL = OutgoingEmail(
    to="maya@example.com",
    from_address="support@fernway.example",
    subject="Re: O-1042",
    body="Your refund is on its way.",
    message_id="<signoff.conv_1.abcdef12@fernway.example>",
)


async def test_a_reply_is_delivered_with_its_threading_headers() -> None:
    """A plain smtp:// server receives the message from the shop's address, headers intact."""
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        await SmtpMailer(SmtpConfig.from_url(f"smtp://127.0.0.1:{controller.port}")).send(MAIL)
    finally:
        controller.stop()
    [(sender, rcpts, msg)] = inbox.messages
    assert (sender, rcpts) == ("support@fernway.example", ["maya@example.com"])
    assert msg["Message-ID"] == MAIL.message_id and msg["Auto-Submitted"] == "auto-replied"


async def test_starttls_requested_but_not_offered_fails_instead_of_sending_in_the_clear() -> None:
    """``starttls=1`` against a server without STARTTLS raises; nothing is delivered."""
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        mailer = SmtpMailer(SmtpConfig.from_url(f"smtp://127.0.0.1:{controller.port}?starttls=1"))
        with pytest.raises(aiosmtplib.SMTPException):
            await mailer.send(MAIL)
    finally:
        controller.stop()
    assert inbox.messages == []


async def test_a_server_that_never_greets_costs_at_most_the_timeout() -> None:
    """The event loop is never blocked and a silent server ends in a timeout error."""
    silent: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        silent.append(writer)  # keep it open, say nothing

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    mailer = SmtpMailer(SmtpConfig(host="127.0.0.1", port=port, timeout_s=0.3))
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    beat = asyncio.create_task(ticker())
    start = time.monotonic()
    try:
        with pytest.raises((aiosmtplib.SMTPTimeoutError, aiosmtplib.SMTPConnectTimeoutError)):
            await mailer.send(MAIL)
    finally:
        beat.cancel()
        for w in silent:
            w.close()
        server.close()
        await server.wait_closed()
    assert time.monotonic() - start < 5
    assert ticks > 5  # the loop kept running while the mailer waited
