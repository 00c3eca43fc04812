"""Block Kit for the agent's answers in Slack: long Markdown split within Slack's limits with the
cards after it, the turn's steps, the feedback buttons, and a stream redrawn after Slack gave up
on it. Pure functions, on the limits :mod:`bot.slack.blocks` names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slack_sdk.models.blocks import ContextActionsBlock, FeedbackButtonObject, FeedbackButtonsElement, MarkdownBlock

from bot.slack import ids, wording
from bot.slack.blocks import MAX_MESSAGE_BLOCKS, MESSAGE_TEXT_CHARS, TEXT_BUDGET, context_block
from bot.slack.mrkdwn import clip, clip_plain, one_line, split_text
from bot.slack.view_models import Outbound, Step

#: Characters of an answer per message.
ANSWER_CHUNK = 8_000


def feedback_block(turn_id: str) -> dict[str, Any]:
    """Thumbs up/down under an answer; each value carries only the turn id and the vote."""

    def button(vote: ids.Vote, text: str, label: str) -> FeedbackButtonObject:
        return FeedbackButtonObject(text=text, value=ids.encode_feedback(turn_id, vote), accessibility_label=label)

    buttons = FeedbackButtonsElement(
        action_id=ids.FEEDBACK,
        positive_button=button("positive", wording.FEEDBACK_POSITIVE, wording.FEEDBACK_POSITIVE_LABEL),
        negative_button=button("negative", wording.FEEDBACK_NEGATIVE, wording.FEEDBACK_NEGATIVE_LABEL),
    )
    return ContextActionsBlock(block_id=ids.FEEDBACK_BLOCK, elements=[buttons]).to_dict()


def steps_block(steps: Sequence[Step]) -> dict[str, Any]:
    """The steps of a turn as a context block, for replies that could not be streamed."""
    lines = [f"{wording.STEP_STATUS.get(s.status, '•')} {clip(one_line(s.title), 150)}" for s in steps[:20]]
    return context_block(f"*{wording.STEPS_HEADING}*\n" + "\n".join(lines)).to_dict()


def recovered_message(text: str, steps: Sequence[Step], tail: Sequence[dict[str, Any]] = ()) -> Outbound:
    """A stream Slack gave up on, redrawn (``chat.update``) with exactly the text it had received,
    its steps, and ``tail`` (cards) when given."""
    parts: list[dict[str, Any]] = [MarkdownBlock(text=text).to_dict()] if text.strip() else []
    if steps:
        parts.append(steps_block(steps))
    fallback = text or "\n".join(one_line(s.title) for s in steps) or wording.STEPS_HEADING
    return Outbound(text=clip_plain(fallback, MESSAGE_TEXT_CHARS), blocks=(*parts, *tail))


def fits_under_stream(streamed_chars: int, tail: Sequence[dict[str, Any]]) -> bool:
    """Whether ``tail`` can go under a streamed message of ``streamed_chars`` (count and text budget)."""
    return len(tail) <= MAX_MESSAGE_BLOCKS and streamed_chars + text_size(tail) <= TEXT_BUDGET


def answer_messages(
    text: str, *, cards: Sequence[Outbound] = (), extra_blocks: Sequence[dict[str, Any]] = (), chunk: int = ANSWER_CHUNK
) -> list[Outbound]:
    """A (long) Markdown answer as messages within Slack's limits, cards after it.

    The answer is split with :func:`split_text` into ``markdown`` blocks; the cards'
    blocks (and ``extra_blocks``, e.g. feedback) join the last message when the
    block count and text budget allow, else follow in messages of their own.
    """
    out = [Outbound(text=piece, blocks=(MarkdownBlock(text=piece).to_dict(),)) for piece in split_text(text, chunk)]
    tail: list[Outbound] = [*cards]
    if extra_blocks:
        tail.append(Outbound(text=wording.ANSWER_FALLBACK, blocks=tuple(extra_blocks)))
    for card in tail:
        last = out[-1] if out else None
        if last and _fits(last.blocks, card.blocks):
            out[-1] = Outbound(text=last.text or card.text, blocks=last.blocks + card.blocks)
        else:
            out.append(card)
    return [o for o in out if o.blocks or o.text]


def _fits(have: tuple[dict[str, Any], ...], more: tuple[dict[str, Any], ...]) -> bool:
    return len(have) + len(more) <= MAX_MESSAGE_BLOCKS and text_size(have) + text_size(more) <= TEXT_BUDGET


def text_size(blocks: Sequence[Any]) -> int:
    """All the text in ``blocks`` (what Slack's cumulative cap counts, as far as is known)."""
    total = 0
    stack: list[Any] = list(blocks)
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key == "text" and isinstance(value, str):
                    total += len(value)
                else:
                    stack.append(value)
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


__all__ = [
    "ANSWER_CHUNK",
    "answer_messages",
    "feedback_block",
    "fits_under_stream",
    "recovered_message",
    "steps_block",
    "text_size",
]
