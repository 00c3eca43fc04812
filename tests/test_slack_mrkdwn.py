"""Escaping, clipping and splitting text for Slack."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.slack import mrkdwn


def test_escape_turns_slack_syntax_into_entities() -> None:
    assert mrkdwn.escape("<!channel> <@U123> <http://x|y> a & b") == (
        "&lt;!channel&gt; &lt;@U123&gt; &lt;http://x|y&gt; a &amp; b"
    )


@given(st.text(max_size=300), st.integers(min_value=2, max_value=400))
@settings(max_examples=200, deadline=None)
def test_clip_fits_never_splits_an_entity_and_never_leaves_a_raw_angle(text: str, limit: int) -> None:
    out = mrkdwn.clip(text, limit)
    assert len(out) <= limit
    assert "<" not in out and ">" not in out
    body = out.removesuffix(mrkdwn.ELLIPSIS)
    # every & starts a whole entity
    for i, ch in enumerate(body):
        if ch == "&":
            assert body[i:].startswith(("&amp;", "&lt;", "&gt;"))
    if len(mrkdwn.escape(text)) <= limit:
        assert out == mrkdwn.escape(text)


def test_code_block_cannot_be_closed_by_the_text_inside() -> None:
    out = mrkdwn.code("```\n<!here>", 100)
    assert out.startswith("```\n") and out.endswith("\n```")
    assert out.count("```") == 2
    assert "&lt;!here&gt;" in out


def test_mentions_are_built_only_from_well_formed_ids() -> None:
    assert mrkdwn.mention("U0123ABC") == "<@U0123ABC>"
    assert mrkdwn.mention("U1> <!channel") is None
    assert mrkdwn.subteam("S0ONCALL") == "<!subteam^S0ONCALL>"
    assert mrkdwn.subteam("S1|x") is None
    assert mrkdwn.channel_link("C0123") == "<#C0123>"
    assert mrkdwn.channel_link("<!channel>") == "&lt;!channel&gt;"


def test_date_uses_slack_date_formatting_with_a_utc_fallback() -> None:
    when = datetime(2026, 3, 1, 16, 0, tzinfo=UTC)
    assert mrkdwn.date(when) == "<!date^1772380800^{date_short_pretty} at {time}|2026-03-01 16:00 UTC>"


def test_defang_breaks_pings_in_model_text_but_keeps_what_it_says() -> None:
    out = mrkdwn.defang("Hi <!channel>, ask <@U1> in <#C1>; @here @everyone; email me@example.com")
    assert "<!channel>" not in out and "<@U1>" not in out and "<#C1>" not in out
    assert "@here" not in out and "@everyone" not in out
    assert out.replace(mrkdwn.ZWSP, "") == "Hi <!channel>, ask <@U1> in <#C1>; @here @everyone; email me@example.com"


def test_safe_prefix_holds_back_a_ping_that_might_still_be_arriving() -> None:
    assert mrkdwn.safe_prefix("hello <") == ("hello ", "<")
    assert mrkdwn.safe_prefix("ping @cha") == ("ping ", "@cha")
    assert mrkdwn.safe_prefix("done <@U1> ok") == ("done <@U1> ok", "")


def test_split_prefers_paragraphs_and_rejoins_exactly() -> None:
    paragraphs = [f"Paragraph {i}. " + "word " * 60 for i in range(30)]
    text = "\n\n".join(paragraphs)
    parts = mrkdwn.split_text(text, 1000)
    assert "".join(parts) == text
    assert all(len(p) <= 1000 for p in parts)
    assert all(p.endswith("\n\n") for p in parts[:-1])  # each cut after a paragraph


def test_split_keeps_a_code_fence_whole_when_it_can() -> None:
    fence = "```python\n" + "\n".join(f"x = {i}" for i in range(40)) + "\n```\n"
    text = "intro " * 60 + "\n\n" + fence + "\nafter\n"
    parts = mrkdwn.split_text(text, 600)
    assert "".join(parts) == text
    assert len(parts) == 2 and fence in parts[1]  # cut before the fence, not inside it


def test_split_of_an_oversized_fence_closes_and_reopens_it() -> None:
    text = "```sql\n" + "\n".join(f"select {i};" for i in range(400)) + "\n```\n"
    parts = mrkdwn.split_text(text, 1000)
    assert len(parts) > 1 and all(len(p) <= 1000 for p in parts)
    for p in parts:
        assert p.startswith("```sql\n") and p.rstrip().endswith("```")
    body = "".join(p.removeprefix("```sql\n").rstrip().removesuffix("```") for p in parts)
    assert all(f"select {i};" in body for i in range(400))


def test_split_without_any_break_cuts_hard_within_the_limit() -> None:
    parts = mrkdwn.split_text("x" * 2500, 1000)
    assert "".join(parts) == "x" * 2500 and all(len(p) <= 1000 for p in parts)
    assert mrkdwn.split_text("  \n\n ", 1000) == []
    with pytest.raises(ValueError):
        mrkdwn.split_text("x", 10)


@given(st.text(alphabet=st.sampled_from(list("ab \n`")), max_size=3000))
@settings(max_examples=150, deadline=None)
def test_split_pieces_always_fit_and_lose_no_character_outside_fences(text: str) -> None:
    """Only whitespace-only pieces are dropped: no visible character is lost or repeated."""
    parts = mrkdwn.split_text(text, 300)
    assert all(len(p) <= 300 for p in parts)
    if "```" not in text:
        assert "".join("".join(parts).split()) == "".join(text.split())
