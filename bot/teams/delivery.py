"""Posting an answer into a Teams conversation exactly once per key.

An answer is its text and a card for each confirmation it asks for. Every post claims its
own key first (``Deliveries.begin``): the text under the answer's key, each card under
``<key>:card:<confirmation id>``. A key that went out before is skipped, so the worker's
retries, crash recovery and the follow-up path can all hand the same answer over and it
appears once. A post that failed releases its key (the next attempt tries again); a
process killed between Teams' answer and ``sent`` leaves a claim the next process takes
over (at least once, never lost).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.face_port import FacePort
from agent.outcomes import TurnResult
from bot.links import unlink
from bot.teams import present
from bot.teams.sender import TeamsDeliveryError, TeamsSender
from storage.records import Confirmation

SURFACE = "teams"


class DeliveryBusy(Exception):
    """A live process is posting this right now; try again later."""


@dataclass(frozen=True, kw_only=True)
class Reply:
    """What to post: ``text`` and the confirmations to show as cards, under ``key``."""

    key: str
    text: str
    confirmations: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "text": self.text, "confirmations": list(self.confirmations)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Reply:
        return cls(
            key=str(data["key"]), text=str(data.get("text") or ""), confirmations=tuple(data.get("confirmations") or ())
        )


def reply_of(result: TurnResult) -> Reply:
    """A turn's answer as Teams shows it: the model's words, and a card per confirmation asked
    for (the cards replace the runtime's typed notice); without confirmations, the whole reply.
    The words are shown as words: no link in them stays live (a customer may have steered them)."""
    shown = result.shown_confirmations
    text = result.answer if shown and result.answer else result.reply
    return Reply(key=result.delivery_key, text=unlink(text), confirmations=shown)


@dataclass
class Poster:
    """Posts :class:`Reply` objects once per key through the sender."""

    port: FacePort
    sender: TeamsSender

    async def post(self, reply: Reply, reference: Mapping[str, Any]) -> None:
        """Post the text, then each confirmation card (recording where it is shown); the
        confirmations count as shown once their cards went out."""
        if reply.text:
            await self.once(reply.key, lambda: self.sender.send(reference, text=reply.text))
        shown: list[str] = []
        for cid in reply.confirmations:
            conf = await self.port.confirmation(cid)
            if conf is None:
                continue
            activity_id = await self.once(f"{reply.key}:card:{cid}", functools.partial(self._card, reference, conf))
            if activity_id is not None:
                await self.port.show_confirmation(
                    cid, SURFACE, {"reference": dict(reference), "activity_id": activity_id}
                )
            shown.append(cid)
        if shown:
            await self.port.mark_shown(shown)

    async def _card(self, reference: Mapping[str, Any], conf: Confirmation) -> str:
        return await self.sender.send(reference, card=present.confirmation(conf, tool_of=self.port.tool))

    async def once(self, key: str, send: Callable[[], Awaitable[str]]) -> str | None:
        """``send()`` (returning the new activity id) unless ``key`` went out before; the id
        of what is shown under ``key`` either way (``None`` if it was not recorded)."""

        async def post() -> dict[str, Any]:
            return {"activity_id": await send()}

        done = await self.port.once(key, post, release=lambda exc: isinstance(exc, TeamsDeliveryError))
        if done.state == "busy":
            raise DeliveryBusy(key)
        return str(done.ref["activity_id"]) if done.ref and done.ref.get("activity_id") else None
