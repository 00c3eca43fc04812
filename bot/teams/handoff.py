"""The relay's Teams ends (``agent/handoff_relay.py``): a person's reply to a Teams customer,
posted with the conversation's stored Teams reference, under the person's name, once per key;
with an approvals conversation, the escalation card's reply chain as a staff thread
(``bot/teams/takeover.py``)."""

from __future__ import annotations

from agent.handoff_relay import Deliver, Relay
from bot.teams.delivery import SURFACE
from bot.teams.face import TeamsFace
from bot.teams.sender import TeamsDeliveryError
from bot.teams.takeover import suggestion_post, thread_post
from storage.records import Conversation

#: How a person's words are shown to a Teams customer.
FROM_PERSON = "{name} (support team): {text}"


def customer_delivery(face: TeamsFace) -> Deliver:
    """The Teams channel's delivery of relayed messages (``Relay.deliver_on("teams", …)``)."""

    async def deliver(conversation: Conversation, text: str, name: str, key: str) -> None:
        reference = (conversation.meta.get("teams") or {}).get("reference")
        if not isinstance(reference, dict):
            raise TeamsDeliveryError(f"conversation {conversation.id} has no Teams reference")
        said = FROM_PERSON.format(name=" ".join(name.split())[:100], text=text)
        await face.poster.once(f"teams:{key}", lambda: face.sender.send(reference, text=said))

    return deliver


def relays(relay: Relay, teams: TeamsFace, *, staff: bool) -> None:
    """Register the Teams ends with the relay (the face's ``join``)."""
    relay.deliver_on("teams", customer_delivery(teams))
    if staff:
        relay.post_on(SURFACE, thread_post(teams.poster, teams.sender))
        relay.suggest_on(SURFACE, suggestion_post(teams.poster, teams.sender))
