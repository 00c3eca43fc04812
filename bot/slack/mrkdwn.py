"""Text for Slack: escaping what others wrote, fitting it into limits, and splitting long answers.

Slack's mrkdwn turns ``<…>`` into mentions, links and dates; ``&``, ``<`` and ``>``
written as entities are shown literally. So every string we did not write
ourselves goes through :func:`clip` (escape, then cut to fit without breaking
an entity) before it lands in a mrkdwn text object, and the ``<…>`` we do want
(a mention, a date, a user group) is built here from validated ids only.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

ELLIPSIS = "…"
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_USER = re.compile(r"^[UW][A-Z0-9]{2,31}$")
_SUBTEAM = re.compile(r"^S[A-Z0-9]{2,31}$")
_CHANNEL = re.compile(r"^[CDG][A-Z0-9]{2,31}$")


def escape(text: str) -> str:
    """``&``, ``<`` and ``>`` as entities: no mention, link or date can be smuggled in."""
    return "".join(_ENTITIES.get(ch, ch) for ch in text)


def clip(text: object, limit: int) -> str:
    """``text`` escaped for mrkdwn and cut to at most ``limit`` characters (ending in "…" when cut).

    The cut never splits an entity, so the result is always safe to embed.
    """
    raw = text if isinstance(text, str) else str(text)
    escaped = escape(raw)
    if len(escaped) <= limit:
        return escaped
    budget, used = limit - len(ELLIPSIS), 0
    out: list[str] = []
    for ch in raw:
        piece = _ENTITIES.get(ch, ch)
        if used + len(piece) > budget:
            break
        out.append(piece)
        used += len(piece)
    return "".join(out) + ELLIPSIS


def clip_plain(text: object, limit: int) -> str:
    """``text`` cut to ``limit`` characters for a ``plain_text`` object (shown literally, not escaped)."""
    raw = text if isinstance(text, str) else str(text)
    return raw if len(raw) <= limit else raw[: max(limit - len(ELLIPSIS), 0)] + ELLIPSIS


def one_line(text: object) -> str:
    """Whitespace (newlines included) folded to single spaces: for labels and list items."""
    return " ".join(str(text).split())


def code(text: object, limit: int) -> str:
    """A fenced code block with ``text`` escaped inside, at most ``limit`` characters in all.

    Backticks in the text become look-alikes (ˋ), so it cannot close the fence early.
    """
    body = clip(str(text).replace("`", "ˋ"), max(limit - 8, 1))
    return f"```\n{body}\n```"


def mention(user_id: str | None) -> str | None:
    """``<@U…>`` for a well-formed Slack user id, else None (never a mention built from free text)."""
    return f"<@{user_id}>" if user_id and _USER.match(user_id) else None


def subteam(group_id: str | None) -> str | None:
    """``<!subteam^S…>`` (pings a user group) for a well-formed id, else None."""
    return f"<!subteam^{group_id}>" if group_id and _SUBTEAM.match(group_id) else None


def channel_link(channel_id: str) -> str:
    """``<#C…>`` for a well-formed channel id, else the escaped text."""
    return f"<#{channel_id}>" if _CHANNEL.match(channel_id) else escape(channel_id)


def date(when: datetime, *, token: str = "{date_short_pretty} at {time}") -> str:
    """Slack's date formatting (shown in the reader's time zone) with a UTC fallback text."""
    aware = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    fallback = aware.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(aware.timestamp())}^{token}|{fallback}>"


_SLACK_SYNTAX = re.compile(r"<(?=[!@#])|@(?=(?:channel|here|everyone)\b)", re.IGNORECASE)
ZWSP = "\u200b"


def defang(text: str) -> str:
    """Model-written Markdown with Slack's own syntax broken by a zero-width space:
    ``<!channel>``, ``<@U…>``, ``<#C…>`` and ``@here``-style pings show, but do not fire."""
    return _SLACK_SYNTAX.sub(lambda m: m.group(0) + ZWSP, text)


def safe_prefix(text: str) -> tuple[str, str]:
    """``text`` split so the first part cannot end half-way through a ping that :func:`defang`
    would catch once complete (for text that arrives in pieces)."""
    start = max(text.rfind("<"), text.rfind("@"))
    tail = text[start:] if start >= 0 else ""
    if tail and len(tail) <= 9 and not any(ch.isspace() or ch == ">" for ch in tail):
        return text[:start], tail
    return text, ""


# -- splitting long answers -------------------------------------------------------------
_FENCE = re.compile(r"^ {0,3}(`{3,16}|~{3,16})\s*([\w+-]{0,20})")


def split_text(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut where a reader would.

    Prefers a paragraph break, then a line break, then a space; never cuts inside a
    code fence when a cut outside one is available. When a fenced block alone is
    longer than ``limit`` it is split at a line and each piece closes and reopens
    the fence, so every piece renders on its own. Apart from that, the pieces
    joined together are exactly ``text``. Whitespace-only pieces are dropped.
    """
    parts: list[str] = []
    rest = text
    while rest:
        head, rest = take(rest, limit)
        parts.append(head)
    return [p for p in parts if p.strip()]


def take(text: str, limit: int) -> tuple[str, str]:
    """The first piece of :func:`split_text` and what remains after it."""
    if limit < 200:
        raise ValueError("limit too small to split sensibly")
    if len(text) <= limit:
        return text, ""
    cut, fence = _best_cut(text, limit)
    head, rest = text[:cut], text[cut:]
    if fence is not None:
        head = head if head.endswith("\n") else head + "\n"
        head, rest = head + fence[0], f"{fence[0]}{fence[1]}\n" + rest
    return head, rest


def _best_cut(text: str, limit: int) -> tuple[int, tuple[str, str] | None]:
    """Where to cut ``text`` (an index ≤ limit) and the fence left open there, if any."""
    reserve = 20  # room to close the fence a cut leaves open
    window = text[:limit]
    spans = _fence_spans(text)

    def open_fence(i: int) -> tuple[str, str] | None:
        return next(((mark, lang) for start, end, mark, lang in spans if start < i < end), None)

    floor = limit // 2
    for sep in ("\n\n", "\n"):
        i = window.rfind(sep)
        while i >= floor:
            cut = i + len(sep)
            if open_fence(cut) is None:
                return cut, None
            i = window.rfind(sep, 0, i)
    tight = text[: limit - reserve]
    for sep in ("\n", " "):
        i = tight.rfind(sep)
        if i >= floor // 2:
            cut = i + 1
            return cut, open_fence(cut)
    cut = limit - reserve
    return cut, open_fence(cut)


def _fence_spans(text: str) -> list[tuple[int, int, str, str]]:
    """``(start, end, marker, language)`` of each fenced block (end is past its closing line)."""
    spans: list[tuple[int, int, str, str]] = []
    pos = 0
    current: tuple[int, str, str] | None = None
    for line in text.splitlines(keepends=True):
        m = _FENCE.match(line)
        if m:
            if current is None:
                current = (pos, m.group(1), m.group(2))
            elif m.group(1).startswith(current[1][0]) and len(m.group(1)) >= len(current[1]):
                spans.append((current[0], pos + len(line), current[1], current[2]))
                current = None
        pos += len(line)
    if current is not None:
        spans.append((current[0], len(text) + 1, current[1], current[2]))
    return spans
