"""Who an outside account is: a Slack (or Teams) user linked to a customer with a one-time code.

A row per (channel, external id). ``start`` stores a code's hash and expiry for the
customer it would link to (replacing an earlier one); ``attempt`` compares a typed code,
counting attempts, and links on a match; ``linked`` reads the verified link. Codes are
never stored in clear.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import select

from storage.db import Database
from storage.models import IdentityRow
from storage.records import aware, wall_clock

Clock = Callable[[], datetime]
AttemptOutcome = Literal["linked", "wrong", "expired", "locked", "none"]


def code_hash(external_id: str, code: str) -> str:
    """The stored form of a code: bound to the account it was sent for."""
    return hashlib.sha256(f"{external_id}\x00{code.strip().upper()}".encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """What typing a code did, and the customer it linked (on ``linked``)."""

    outcome: AttemptOutcome
    customer_id: str | None = None


class IdentityLinks:
    """Repository over ``identities``."""

    def __init__(self, db: Database, *, clock: Clock | None = None, max_attempts: int = 5) -> None:
        self._db = db
        self._clock = clock or wall_clock
        self.max_attempts = max_attempts

    async def linked(self, channel: str, external_id: str) -> str | None:
        """The customer this outside account is verified as, if any."""
        async with self._db.reader() as s:
            row = await self._row(s, channel, external_id)
            return row.customer_id if row is not None and row.verified_at is not None else None

    async def start(self, channel: str, external_id: str, *, customer_id: str, code: str, ttl_s: float) -> None:
        """A code was sent for ``customer_id``: remember its hash until it expires (a new code replaces the old)."""
        now = self._clock()
        async with self._db.sessions() as s, s.begin():
            row = await self._row(s, channel, external_id)
            if row is None:
                row = IdentityRow(
                    channel=channel,
                    external_id=external_id,
                    principal_kind="customer",
                    principal_id=customer_id,
                    created_at=now,
                )
                s.add(row)
            if row.verified_at is not None:
                return  # already linked: a new code changes nothing
            row.customer_id = customer_id
            row.principal_id = customer_id
            row.link_code_hash = code_hash(external_id, code)
            row.link_expires_at = now + timedelta(seconds=ttl_s)
            row.link_attempts = 0

    async def pending(self, channel: str, external_id: str) -> bool:
        """A code is out and may still be typed."""
        async with self._db.reader() as s:
            row = await self._row(s, channel, external_id)
            if row is None or row.verified_at is not None or row.link_code_hash is None:
                return False
            expires = aware(row.link_expires_at)
            return expires is not None and expires > self._clock() and row.link_attempts < self.max_attempts

    async def attempt(self, channel: str, external_id: str, code: str) -> Attempt:
        """Compare a typed code; every attempt counts; the right one links (once)."""
        now = self._clock()
        async with self._db.sessions() as s, s.begin():
            row = await self._row(s, channel, external_id, for_update=True)
            if row is None or row.link_code_hash is None or row.verified_at is not None:
                return Attempt(outcome="none")
            expires = aware(row.link_expires_at)
            if expires is None or expires <= now:
                return Attempt(outcome="expired")
            if row.link_attempts >= self.max_attempts:
                return Attempt(outcome="locked")
            row.link_attempts += 1
            if not hmac.compare_digest(row.link_code_hash, code_hash(external_id, code)):
                return Attempt(outcome="locked" if row.link_attempts >= self.max_attempts else "wrong")
            row.verified_at = now
            row.link_code_hash = None
            return Attempt(outcome="linked", customer_id=row.customer_id)

    @staticmethod
    async def _row(s: object, channel: str, external_id: str, *, for_update: bool = False) -> IdentityRow | None:
        stmt = select(IdentityRow).where(IdentityRow.channel == channel, IdentityRow.external_id == external_id)
        if for_update:
            stmt = stmt.with_for_update()
        result = await s.execute(stmt)  # type: ignore[attr-defined]
        return result.scalars().first()  # type: ignore[no-any-return]


__all__ = ["Attempt", "AttemptOutcome", "IdentityLinks", "code_hash"]
