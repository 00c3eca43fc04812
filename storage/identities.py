"""Who an outside account is: a Slack (or Teams) user linked to a customer with a one-time code.

A row per (channel, external id). ``start`` stores a code's hash and expiry for the
customer it would link to (replacing an earlier one); ``attempt`` compares a typed code,
counting attempts, and links on a match; ``linked`` reads the verified link. Codes are
never stored in clear. The attempts are counted over a window (``attempts_window``), not
per code: asking for a new code does not give five more guesses. ``request`` caps how often
codes are asked for, per address and per requester (``link_requests``), whether or not the
address is on file, so the answer never tells which.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import func, select

from storage.db import Database
from storage.models import IdentityRow, LinkRequestRow
from storage.records import aware, wall_clock

Clock = Callable[[], datetime]
AttemptOutcome = Literal["linked", "wrong", "expired", "locked", "none"]


def code_hash(external_id: str, code: str) -> str:
    """The stored form of a code: bound to the account it was sent for."""
    return hashlib.sha256(f"{external_id}\x00{code.strip().upper()}".encode()).hexdigest()


def address_hash(address: str) -> str:
    """How a requested address is kept (counted, never stored in clear)."""
    return hashlib.sha256(address.strip().lower().encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class CodeCaps:
    """How many codes may be asked for within ``window``: per address and per requester."""

    per_address: int = 3
    per_requester: int = 5
    window: timedelta = timedelta(hours=1)


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """What typing a code did, and the customer it linked (on ``linked``)."""

    outcome: AttemptOutcome
    customer_id: str | None = None


class IdentityLinks:
    """Repository over ``identities``."""

    def __init__(
        self,
        db: Database,
        *,
        clock: Clock | None = None,
        max_attempts: int = 5,
        attempts_window: timedelta = timedelta(hours=24),
    ) -> None:
        self._db = db
        self._clock = clock or wall_clock
        self.max_attempts = max_attempts
        self.attempts_window = attempts_window

    async def request(self, channel: str, requester: str, address: str, caps: CodeCaps) -> bool:
        """Count one request for a code to ``address`` by ``requester``; ``False`` (nothing
        counted) once either has asked ``caps`` times within the window."""
        now = self._clock()
        since = now - caps.window
        digest = address_hash(address)
        by_requester = select(func.count(LinkRequestRow.id)).where(
            LinkRequestRow.channel == channel, LinkRequestRow.requester == requester, LinkRequestRow.created_at >= since
        )
        by_address = select(func.count(LinkRequestRow.id)).where(
            LinkRequestRow.address_hash == digest, LinkRequestRow.created_at >= since
        )
        async with self._db.sessions() as s, s.begin():
            if (await s.execute(by_requester)).scalar_one() >= caps.per_requester:
                return False
            if (await s.execute(by_address)).scalar_one() >= caps.per_address:
                return False
            s.add(LinkRequestRow(channel=channel, requester=requester, address_hash=digest, created_at=now))
        return True

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
            window_at = aware(row.link_window_at)
            if window_at is None or window_at + self.attempts_window <= now:
                row.link_window_at, row.link_attempts = now, 0  # a new window: the count starts again

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


__all__ = ["Attempt", "AttemptOutcome", "CodeCaps", "IdentityLinks", "address_hash", "code_hash"]
