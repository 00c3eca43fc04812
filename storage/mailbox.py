"""The Message-IDs of the mails we sent, and to whom (``sent_mail``).

An inbound mail joins an existing conversation only when its ``In-Reply-To`` or
``References`` names a Message-ID recorded here for the same principal: a sender
cannot thread into a conversation by citing their own earlier Message-ID, or one
they guessed. The id is recorded before the mail is handed to SMTP, so a reply to
a mail that went out always finds its thread.

The Shopify backend's messages (``send_message``: Shopify has no messaging API) are recorded
here after the send, under a Message-ID derived from the ledger's key: :meth:`SentMail.sent_at`
is how ``lookup_write`` tells that such a message went out (``bot/shopify/messages.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import cast

from sqlalchemy import Table, select
from sqlalchemy.dialects import postgresql, sqlite

from storage.db import Database
from storage.models import SentMailRow
from storage.records import aware, wall_clock

_SENT = cast(Table, SentMailRow.__table__)
MAX_MESSAGE_ID = 255


class SentMail:
    """Repository over ``sent_mail``."""

    def __init__(self, db: Database, *, clock: Callable[[], datetime] | None = None) -> None:
        self._db = db
        self._clock = clock or wall_clock

    async def record(self, message_id: str, *, conversation_id: str, principal: str) -> None:
        """Remember that we sent ``message_id`` to ``principal`` in ``conversation_id`` (idempotent)."""
        if not message_id or len(message_id) > MAX_MESSAGE_ID:
            raise ValueError(f"message id must be 1..{MAX_MESSAGE_ID} characters")
        dialect = postgresql if self._db.is_postgres else sqlite
        stmt = (
            dialect.insert(_SENT)
            .values(
                message_id=message_id, conversation_id=conversation_id, principal=principal, created_at=self._clock()
            )
            .on_conflict_do_nothing(index_elements=["message_id"])
        )
        async with self._db.sessions() as s, s.begin():
            await s.execute(stmt)

    async def sent_at(self, message_id: str) -> datetime | None:
        """When ``message_id`` was recorded as sent; ``None`` when it never was."""
        if not message_id or len(message_id) > MAX_MESSAGE_ID:
            return None
        async with self._db.reader() as s:
            found = await s.scalar(select(_SENT.c.created_at).where(_SENT.c.message_id == message_id))
        return aware(found)

    async def conversation_for(self, message_ids: Sequence[str], *, principal: str) -> str | None:
        """The conversation of the newest of ``message_ids`` that we sent to ``principal``."""
        ids = [i for i in dict.fromkeys(message_ids) if i and len(i) <= MAX_MESSAGE_ID][:60]
        if not ids:
            return None
        async with self._db.reader() as s:
            rows = (
                await s.execute(
                    select(_SENT.c.message_id, _SENT.c.conversation_id).where(
                        _SENT.c.message_id.in_(ids), _SENT.c.principal == principal
                    )
                )
            ).all()
        found = {r.message_id: r.conversation_id for r in rows}
        return next((found[i] for i in reversed(ids) if i in found), None)


__all__ = ["SentMail"]
