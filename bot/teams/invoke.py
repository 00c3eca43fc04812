"""Answers to ``adaptiveCard/action`` invokes, built with the Agents SDK's factory.

Teams reads the HTTP 200 body: ``{"statusCode", "type", "value"}``. A card
(``application/vnd.microsoft.card.adaptive``) replaces the clicked card for the
one who clicked; the runtime also updates the message for everyone
(:meth:`bot.teams.sender.TeamsSender.update`). A message or error body leaves the
card as it was and shows the text.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from microsoft_agents.activity import AdaptiveCardInvokeResponse
from microsoft_agents.hosting.core.app.adaptive_card import factory

from bot.teams.cards import Card, with_notice


@dataclass(frozen=True, kw_only=True)
class InvokeReply:
    """The synchronous answer to an invoke: HTTP ``status`` and JSON ``body``."""

    body: dict[str, Any]
    status: int = 200


def _reply(response: AdaptiveCardInvokeResponse) -> InvokeReply:
    # HTTP 200 always, as the SDK's action_execute does; the body carries the card-level status.
    return InvokeReply(body=response.model_dump(mode="json", by_alias=True, exclude_none=True))


def card_reply(card: Card) -> InvokeReply:
    """Redraw the card (for the one who clicked) with ``card``."""
    return _reply(factory.adaptive_card(card))  # type: ignore[arg-type]  # the SDK annotates str; it takes the JSON


def message_reply(text: str) -> InvokeReply:
    """Keep the card; show ``text``."""
    return _reply(factory.message(text))


def refusal_reply(text: str, *, card: Card | None = None) -> InvokeReply:
    """Refuse the click (no role, own request, stale version). With ``card`` the clicker gets
    that card with the refusal on top; otherwise the card stays and the text is shown."""
    return card_reply(with_notice(card, text)) if card is not None else message_reply(text)


def error_reply(status: int, text: str, code: str | None = None) -> InvokeReply:
    """An error body (``application/vnd.microsoft.error``) with the card-level status."""
    return _reply(factory.error(status, text, code))


def bad_request_reply(text: str) -> InvokeReply:
    """The click's payload was not one of ours."""
    return _reply(factory.bad_request(text))


def default_reply() -> InvokeReply:
    """What the SDK answers when a handler returns nothing: ``{"statusCode": 200}``."""
    return _reply(AdaptiveCardInvokeResponse(status_code=HTTPStatus.OK))
