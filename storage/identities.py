"""Who an outside account is: signoff's own directory of people, whatever the shop.

One row of ``identities`` per (provider, external id): a Slack user id, a Teams user's Entra
object id (lower-case), or ``TEAM:USER`` for a Slack user linked with an emailed code. Each
names a customer (by the shop's customer id) or a staff member (``staff``: id, name, role,
email). :meth:`People.identify` is the one look-up every face makes; a new face adds a
provider name, not a backend method or a column.

Seeded rows (``origin = "seed"``) come from ``SIGNOFF_PEOPLE_FILE`` or, with the sandbox and
no people file, from the sandbox dataset; seeding again replaces them and the staff, and
leaves the links made with a code alone. :class:`IdentityLinks` runs that code flow: ``start``
stores a code's hash and expiry for the customer it would link to (replacing an earlier one);
``attempt`` compares a typed code, counting attempts, and links on a match. Codes are never
stored in clear. The attempts are counted over a window (``attempts_window``), not per code:
asking for a new code does not give five more guesses. ``request`` caps how often codes are
asked for, per address and per requester (``link_requests``), whether or not the address is on
file, so the answer never tells which.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import delete, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from storage.db import Database
from storage.models import IdentityRow, LinkRequestRow, StaffRow
from storage.records import aware, wall_clock

Clock = Callable[[], datetime]
AttemptOutcome = Literal["linked", "wrong", "expired", "locked", "none"]
StaffRole = Literal["rep", "supervisor"]
#: The providers whose user ids people are seeded with.
PROVIDERS = ("slack", "teams")


def external_key(provider: str, external_id: str) -> str:
    """How an id is stored and looked up: Entra object ids compare in lower case."""
    return external_id.strip().lower() if provider == "teams" else external_id.strip()


@dataclass(frozen=True, kw_only=True)
class Staff:
    """A staff member and the faces' user ids they are known by."""

    id: str
    name: str
    role: StaffRole
    email: str | None = None
    slack_user_id: str | None = None
    #: The Entra (AAD) object id of their Teams user, lower-case.
    teams_user_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class CustomerLink:
    """A customer's user ids on the faces (``customer_id``: the shop's id)."""

    customer_id: str
    slack_user_id: str | None = None
    teams_user_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class PeopleSeed:
    """Everyone the people file (or the sandbox dataset) names."""

    staff: tuple[Staff, ...] = ()
    customers: tuple[CustomerLink, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Identity:
    """Who an outside account is: a customer (by id) or a staff member (id, role, name)."""

    kind: Literal["customer", "staff"]
    id: str
    staff: Staff | None = None

    @property
    def role(self) -> Literal["customer", "rep", "supervisor"]:
        """``customer``, or the staff member's role."""
        return self.staff.role if self.staff is not None else "customer"

    @property
    def name(self) -> str | None:
        """A staff member's name (a customer's is the shop's: ``backend.get_customer``)."""
        return self.staff.name if self.staff is not None else None


def _ids(pairs: list[tuple[str, str, str, str]], kind: str, ident: str) -> dict[str, str]:
    return {channel: ext for k, i, channel, ext in pairs if k == kind and i == ident}


async def _staff_ids(s: AsyncSession, staff_ids: list[str] | None = None) -> list[tuple[str, str, str, str]]:
    stmt = select(IdentityRow.principal_kind, IdentityRow.principal_id, IdentityRow.channel, IdentityRow.external_id)
    stmt = stmt.where(IdentityRow.origin == "seed", IdentityRow.channel.in_(PROVIDERS))
    if staff_ids is not None:
        stmt = stmt.where(IdentityRow.principal_kind == "staff", IdentityRow.principal_id.in_(staff_ids))
    return [tuple(r) for r in (await s.execute(stmt)).all()]  # type: ignore[misc]


def _staff(row: StaffRow, ids: dict[str, str]) -> Staff:
    return Staff(
        id=row.id, name=row.name, role=row.role, email=row.email,  # type: ignore[arg-type]
        slack_user_id=ids.get("slack"), teams_user_id=ids.get("teams"),
    )  # fmt: skip


def _seed_rows(seed: PeopleSeed, now: datetime) -> list[IdentityRow]:
    rows = []
    owners: list[tuple[str, str, str | None, str | None, str | None]]
    owners = [("staff", m.id, None, m.slack_user_id, m.teams_user_id) for m in seed.staff]
    owners += [("customer", c.customer_id, c.customer_id, c.slack_user_id, c.teams_user_id) for c in seed.customers]
    for kind, ident, customer, slack, teams in owners:
        for channel, ext in (("slack", slack), ("teams", teams)):
            if ext:
                rows.append(
                    IdentityRow(
                        channel=channel,
                        external_id=external_key(channel, ext),
                        principal_kind=kind,
                        principal_id=ident,
                        customer_id=customer,
                        link_attempts=0,
                        verified_at=now,
                        created_at=now,
                        origin="seed",
                    )  # fmt: skip
                )
    return rows


#: ``pg_advisory_xact_lock`` key: processes starting together (serve, worker) seed one at a time.
_SEED_LOCK = 0x5EED_0F_0


async def replace_in(s: AsyncSession, seed: PeopleSeed, now: datetime) -> None:
    """Replace the staff and every seeded id with ``seed``, inside the caller's transaction
    (links made with a code stay unless ``seed`` names the same account); the same seed again
    writes nothing."""
    if s.get_bind().dialect.name == "postgresql":
        await s.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SEED_LOCK})
    if _canonical(await everyone_in(s)) == _canonical(seed):
        return
    rows = _seed_rows(seed, now)
    await s.execute(delete(IdentityRow).where(IdentityRow.origin == "seed"))
    for r in rows:
        await s.execute(
            delete(IdentityRow).where(IdentityRow.channel == r.channel, IdentityRow.external_id == r.external_id)
        )
    await s.execute(delete(StaffRow))
    s.add_all(StaffRow(id=m.id, name=m.name, role=m.role, email=m.email) for m in seed.staff)
    await s.flush()
    s.add_all(rows)
    await s.flush()


def _canonical(seed: PeopleSeed) -> tuple[object, ...]:
    """A seed in a comparable form: order, and customers without ids, do not matter."""
    staff = sorted((m.id, m.name, m.role, m.email, m.slack_user_id, m.teams_user_id) for m in seed.staff)
    links = sorted(
        (c.customer_id, c.slack_user_id, c.teams_user_id and c.teams_user_id.lower())
        for c in seed.customers
        if c.slack_user_id or c.teams_user_id
    )
    return tuple(staff), tuple(links)


async def everyone_in(s: AsyncSession) -> PeopleSeed:
    """The staff and the customers' seeded ids, by id (the sandbox export)."""
    pairs = await _staff_ids(s)
    staff = (await s.scalars(select(StaffRow).order_by(StaffRow.id))).all()
    customers = sorted({i for k, i, _c, _e in pairs if k == "customer"})
    return PeopleSeed(
        staff=tuple(_staff(m, _ids(pairs, "staff", m.id)) for m in staff),
        customers=tuple(
            CustomerLink(customer_id=c, slack_user_id=(ids := _ids(pairs, "customer", c)).get("slack"),
                         teams_user_id=ids.get("teams"))
            for c in customers
        ),
    )  # fmt: skip


class People:
    """Repository over ``staff`` and ``identities``: who someone is, and seeding them."""

    def __init__(self, db: Database, *, clock: Clock | None = None) -> None:
        self._db = db
        self._clock = clock or wall_clock

    async def identify(self, provider: str, external_id: str) -> Identity | None:
        """The customer or staff member this outside account is verified as, if any."""
        key = external_key(provider, external_id)
        if not key:
            return None
        async with self._db.reader() as s, s.begin():
            stmt = select(IdentityRow).where(
                IdentityRow.channel == provider, IdentityRow.external_id == key, IdentityRow.verified_at.is_not(None)
            )
            row = (await s.execute(stmt)).scalars().first()
            if row is None:
                return None
            if row.principal_kind != "staff":
                return Identity(kind="customer", id=row.customer_id or row.principal_id)
            staff = await self._staff_in(s, row.principal_id)
            return None if staff is None else Identity(kind="staff", id=staff.id, staff=staff)

    async def staff(self, staff_id: str) -> Staff | None:
        """The staff member ``staff_id``, with their Slack and Teams user ids."""
        async with self._db.reader() as s, s.begin():
            return await self._staff_in(s, staff_id)

    @staticmethod
    async def _staff_in(s: AsyncSession, staff_id: str) -> Staff | None:
        row = await s.get(StaffRow, staff_id)
        return None if row is None else _staff(row, _ids(await _staff_ids(s, [staff_id]), "staff", staff_id))

    async def replace(self, seed: PeopleSeed) -> None:
        """Seed everyone anew from ``seed`` in one transaction."""
        try:
            async with self._db.sessions() as s, s.begin():
                await replace_in(s, seed, self._clock())
        except IntegrityError as exc:
            raise ValueError(f"people conflict with each other: {' '.join(str(exc.orig).split())}") from None

    async def everyone(self) -> PeopleSeed:
        """Everyone seeded, by id."""
        async with self._db.reader() as s, s.begin():
            return await everyone_in(s)


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


__all__ = [
    "Attempt", "AttemptOutcome", "CodeCaps", "CustomerLink", "Identity", "IdentityLinks", "People", "PeopleSeed",
    "Staff", "address_hash", "code_hash", "everyone_in", "external_key", "replace_in",
]  # fmt: skip
