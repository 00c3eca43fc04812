"""Who a Teams user is: a staff member or a customer, by Entra object id.

Signoff's own directory (``People.identify("teams", …)``, seeded from ``SIGNOFF_PEOPLE_FILE`` or
the dataset's ``teams_user_id``) holds the user's Entra (AAD) object id, which every Teams
activity carries as ``from.aadObjectId``. Nothing else identifies a person: not the display
name, not the channel id (``29:…``), not anything in the message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.teams.inbound import TeamsUser
from storage.identities import Identity, Staff
from storage.records import Approval
from tools.backend import Customer, IdentityDirectory
from tools.context import Principal

CHANNEL = "teams"


class People(Protocol):
    """Who a user is (``FacePort.identify`` / ``FacePort.staff``)."""

    async def identify(self, provider: str, external_id: str) -> Identity | None: ...
    async def staff(self, staff_id: str) -> Staff | None: ...


@dataclass(frozen=True, kw_only=True)
class Person:
    """A Teams user we know: exactly one of ``staff`` or ``customer``."""

    staff: Staff | None = None
    customer: Customer | None = None

    @property
    def principal(self) -> Principal:
        """The principal this person acts as (staff bind an account per thread)."""
        if self.staff is not None:
            return Principal(kind=self.staff.role, id=self.staff.id)
        assert self.customer is not None
        return Principal(kind="customer", id=self.customer.id, customer_id=self.customer.id)

    @property
    def name(self) -> str:
        return self.staff.name if self.staff is not None else self.customer.name if self.customer else "someone"


async def identify(people: People, backend: IdentityDirectory, user: TeamsUser) -> Person | None:
    """The staff member or customer the Teams user is listed as (a customer the shop knows), or ``None``."""
    if not user.aad_object_id:
        return None
    who = await people.identify(CHANNEL, user.aad_object_id)
    if who is None:
        return None
    if who.staff is not None:
        return Person(staff=who.staff)
    customer = await backend.get_customer(who.id)
    return Person(customer=customer) if customer is not None else None


async def names_for(people: People, backend: IdentityDirectory, approval: Approval) -> dict[str, str]:
    """Display names for the requester and deciders of an approval (unknown keys stay as they are)."""
    keys = {approval.requester, *(d.actor for d in approval.decisions)}
    names: dict[str, str] = {}
    for key in keys:
        kind, _, ident = key.partition(":")
        if kind in ("rep", "supervisor"):
            staff = await people.staff(ident)
            if staff is not None:
                names[key] = staff.name
        elif kind == "customer":
            customer = await backend.get_customer(ident)
            if customer is not None:
                names[key] = customer.name
    return names
