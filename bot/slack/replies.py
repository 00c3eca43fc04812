"""Delivering an answer into a Slack thread, once: steps, text, confirmation cards, feedback.

The cards are rendered here from the confirmation records (the exact arguments the
runtime stored), never from the model's words; when a reply carries cards the runtime's
plain-text notice is left out (the cards say it). Each answer is sent under its own
key (:attr:`~agent.outcomes.TurnResult.delivery_key`): the worker's retry and crash
recovery may both hand it over, Slack sees it once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent.outcomes import TurnResult
from bot.links import unlink
from bot.slack import answers, blocks, present, wording
from bot.slack.face import SlackFace
from bot.slack.sender import SlackSendError
from bot.slack.streaming import Recipient, StreamOptions
from bot.slack.view_models import Outbound, Step
from storage.records import Confirmation, Proposal

log = logging.getLogger(__name__)
#: Plumbing the reader does not need to watch (loading a tool group).
HIDDEN_STEPS = frozenset({"load_tools"})


@dataclass(frozen=True, kw_only=True)
class Where:
    """The thread an answer goes to, and for whom (streams outside DMs need the reader)."""

    channel: str
    thread_ts: str
    user: str | None = None
    team: str | None = None
    #: Only ``user`` may read it (a customer's account data in a channel others read): ephemeral.
    private: bool = False


async def deliver(face: SlackFace, where: Where, result: TurnResult, *, since: datetime | None = None) -> bool:
    """Post ``result`` into ``where`` unless it went out before; mark its confirmations shown.
    True when this call sent it. ``since``: show as steps the tool calls made after it."""
    confirmations = [
        c
        for c in [await face.port.confirmation(p.id) for p in result.pending if p.kind == "confirmation"]
        if c is not None
    ]
    cards = [(c, present.confirmation_card(face, c)) for c in confirmations if c.status == "pending"]
    # The model's words (a customer may have steered them): shown as words, never as live links.
    text = unlink(result.answer if cards else result.reply)
    if where.private and where.user:
        return await _whisper(face, where, result, text, [card for _c, card in cards])
    recipient = Recipient(user_id=where.user, team_id=where.team) if where.user and where.team else None
    streaming = face.config.streaming and (recipient is not None or where.channel.startswith("D"))
    reply = face.sender.reply(
        channel=where.channel,
        thread_ts=where.thread_ts,
        recipient=recipient,
        options=StreamOptions(enabled=streaming),
    )
    shown: list[tuple[Confirmation, str]] = []

    async def send() -> dict[str, Any]:
        for step in await _steps(face, result, since) if since is not None else []:
            await reply.step(step)
        await reply.write(text or wording.ANSWER_FALLBACK)
        posted = await reply.finish(extra_blocks=[answers.feedback_block(_turn_id(result))])
        # Each card is a message of its own, so a click redraws the card and leaves the answer.
        for c, card in cards:
            shown.append((c, await face.sender.post(where.channel, card.text, card.block_list, where.thread_ts)))
        return {"channel": where.channel, "ts": [*posted.ts, *(ts for _c, ts in shown)], "streamed": posted.streamed}

    # Nothing went out yet: the retry may send it whole; else the key stays claimed (no double post).
    done = await face.port.once(
        f"slack:{result.delivery_key}", send, release=lambda exc: isinstance(exc, SlackSendError) and not reply.ts
    )
    if not done.sent_now:
        return False
    for c, ts in shown:
        await face.port.show_confirmation(c.id, "slack", {"channel": where.channel, "ts": ts})
    await face.port.delivered(result)
    return True


async def _whisper(face: SlackFace, where: Where, result: TurnResult, text: str, cards: list[Outbound]) -> bool:
    """The answer and its cards as ephemeral messages, once: in the thread, seen by ``where.user`` only."""
    messages = answers.answer_messages(text or wording.ANSWER_FALLBACK, cards=cards)

    async def send() -> dict[str, Any]:
        for m in messages:
            await face.sender.ephemeral(where.channel, str(where.user), m.text, m.block_list, where.thread_ts)
        return {"channel": where.channel, "ephemeral": True}

    done = await face.port.once(
        f"slack:{result.delivery_key}", send, release=lambda exc: isinstance(exc, SlackSendError)
    )
    if not done.sent_now:
        return False
    await face.port.delivered(result)
    return True


async def post_once(
    face: SlackFace, key: str, channel: str, message: Outbound, thread_ts: str | None = None
) -> str | None:
    """One message of our own (a notice, a card) posted at most once under ``key``; its ts."""

    async def send() -> dict[str, Any]:
        return {"channel": channel, "ts": await face.sender.post(channel, message.text, message.block_list, thread_ts)}

    done = await face.port.once(key, send, release=lambda exc: isinstance(exc, SlackSendError))
    return str(done.ref["ts"]) if done.ref and done.ref.get("ts") else None


def _turn_id(result: TurnResult) -> str:
    return f"{result.conversation_id}.{result.seq if result.seq is not None else 0}"


async def _steps(face: SlackFace, result: TurnResult, since: datetime) -> list[Step]:
    """The tool calls of this answer's run made after ``since``, titled by our code."""
    state = await face.port.turn_state(result.conversation_id, result.run_id)
    shown = [p for p in state.proposals if p.created_at >= since and p.tool not in HIDDEN_STEPS]
    return [step_of(face, p) for p in shown][:20]


def step_of(face: SlackFace, p: Proposal) -> Step:
    """A proposal as a step: what the tool did with its arguments and what the gate decided."""
    tool = face.port.tool(p.tool)
    args = p.arguments if isinstance(p.arguments, dict) else {}
    if tool is not None and tool.meta.kind == "action":
        what = tool.describe(args) if tool.summary is not None else tool.name.replace("_", " ").capitalize()
        return Step.for_gate(p.id, what, p.decision or "execute")
    return Step(id=p.id, title=read_title(p.tool, args), status="error" if p.is_error else "complete")


def read_title(tool: str, args: dict[str, Any]) -> str:
    """ "Looked up O-1042", "Searched the help centre" — from the arguments, never the model's words."""
    if tool == "search_knowledge":
        return "Searched the help centre"
    ident = next((str(v) for k, v in sorted(args.items()) if k.endswith("_id") and isinstance(v, str)), None)
    return f"Looked up {ident}" if ident else f"Checked {tool.replace('_', ' ').removeprefix('get ')}"


def plain(face: SlackFace, text: str) -> Outbound:
    """A short message of our own."""
    return Outbound(text=text, blocks=(blocks._section(text).to_dict(),))


__all__ = ["Where", "deliver", "plain", "post_once", "read_title", "step_of"]
