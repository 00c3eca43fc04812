"""Link codes: a new code gives no new guesses, and code emails are capped.

* the five attempts are counted over a day, not per code (``link`` used to reset the count,
  so asking again gave five more guesses, without end);
* code emails to one address are capped (3 an hour), and so are a requester's requests
  (5 an hour); the answer to a capped request is the same whether the address is on file or
  not (13 ``link`` DMs used to send 13 emails);
* the command parser takes only short, well-formed commands.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from bot.slack import wording
from bot.slack.turns import LINK_CODE_CAPS, assist_command, code_reply, link_command
from sandbox.models import StoreOutboxRow
from storage.db import Database
from storage.identities import CodeCaps, IdentityLinks
from tests.slack_kit import next_ts
from tests.test_slack_face import World, world  # noqa: F401 - the in-process Slack face fixture

STRANGER, OTHER = "U0STRANGE", "U0OTHER"


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def test_a_new_code_does_not_reset_the_attempts(db: Database) -> None:
    clock = Clock()
    links = IdentityLinks(db, clock=clock)
    await links.start("slack", "T:U", customer_id="C-7", code="AAAAAA", ttl_s=900)
    for _ in range(3):
        assert (await links.attempt("slack", "T:U", "BBBBBB")).outcome == "wrong"
    await links.start("slack", "T:U", customer_id="C-7", code="CCCCCC", ttl_s=900)
    assert (await links.attempt("slack", "T:U", "DDDDDD")).outcome == "wrong"
    assert (await links.attempt("slack", "T:U", "DDDDDD")).outcome == "locked"
    await links.start("slack", "T:U", customer_id="C-7", code="EEEEEE", ttl_s=900)
    assert not await links.pending("slack", "T:U")
    assert (await links.attempt("slack", "T:U", "EEEEEE")).outcome == "locked"  # even the right code
    clock.now += timedelta(hours=24)  # a new window: the count starts again with a new code
    await links.start("slack", "T:U", customer_id="C-7", code="FFFFFF", ttl_s=900)
    assert (await links.attempt("slack", "T:U", "FFFFFF")).outcome == "linked"


async def test_code_requests_are_capped_per_address_and_per_requester_within_the_window(db: Database) -> None:
    clock = Clock()
    links = IdentityLinks(db, clock=clock)
    caps = CodeCaps(per_address=3, per_requester=5, window=timedelta(hours=1))
    asked = [await links.request("slack", f"T:U{n}", "Maya.Chen@example.com", caps) for n in range(5)]
    assert asked == [True, True, True, False, False]  # three to one address, whoever asks
    asked = [await links.request("slack", "T:ONE", f"a{n}@example.com", caps) for n in range(7)]
    assert asked == [True] * 5 + [False] * 2  # five from one requester, whatever the address
    clock.now += timedelta(hours=1, seconds=1)
    assert await links.request("slack", "T:ONE", "maya.chen@example.com", caps)


async def _outbox(w: World) -> int:
    async with w.app.db.reader() as s:
        stmt = select(func.count()).select_from(StoreOutboxRow).where(StoreOutboxRow.template == "slack_link_code")
        return int((await s.execute(stmt)).scalar_one())


async def _dm(w: World, user: str, text: str) -> str:
    from tests.slack_kit import message

    ts = next_ts()
    assert await w.event(message(user, text, channel=f"D{user}", ts=ts)) == 200
    await w.drain()
    (answer,) = w.bot(f"D{user}", ts) or w.bot(f"D{user}")[-1:]
    return answer.visible


async def test_thirteen_link_dms_send_at_most_three_codes_and_the_answer_never_tells(world: World) -> None:  # noqa: F811
    known = [await _dm(world, STRANGER, "link maya.chen@example.com") for _ in range(13)]
    assert await _outbox(world) == LINK_CODE_CAPS.per_address == 3
    unknown = [await _dm(world, OTHER, "link nobody@example.invalid") for _ in range(13)]
    assert await _outbox(world) == 3
    assert known == unknown  # the same answers in the same order, on file or not
    assert wording.LINK_CODE_LIMIT in known[-1] and wording.LINK_CODE_SENT in known[0]


def test_commands_are_parsed_only_when_short_and_well_formed() -> None:
    assert link_command("  LINK  Maya.Chen@Example.com ") == "maya.chen@example.com"
    assert link_command("link maya@example") is None
    assert link_command("link @example.com") is None
    assert link_command("link a@b.c extra") is None
    assert link_command("link " + "a" * 300 + "@example.com") is None
    assert assist_command("assist c-7") == "C-7" and assist_command("Assist   C-17\n") == "C-17"
    assert assist_command("assist -7") is None and assist_command("assist C 7") is None
    assert assist_command("assist " + "C" * 65) is None
    assert code_reply(" ab12cd ") == "ab12cd" and code_reply("ab12c") is None and code_reply("ab12cé") is None
