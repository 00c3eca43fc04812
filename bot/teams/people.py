"""Who a Teams user is in the shop's records: a staff member or a customer, by Entra object id.

The dataset's ``teams_user_id`` (customers and staff) holds the user's Entra (AAD) object id,
which every Teams activity carries as ``from.aadObjectId``. Nothing else identifies a person:
not the display name, not the channel id (``29:…``), not anything in the message.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.teams.inbound import TeamsUser
from bot.teams.views import People
from storage.records import Approval
from tools.backend import Customer, IdentityDirectory, StaffMember
from tools.context import Principal


@dataclass(frozen=True, kw_only=True)
class Person:
    """A Teams user we know: exactly one of ``staff`` or ``customer``."""

    staff: StaffMember | None = None
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


async def identify(backend: IdentityDirectory, user: TeamsUser) -> Person | None:
    """The staff member or customer the Teams user is listed as, or ``None``."""
    if not user.aad_object_id:
        return None
    staff = await backend.find_staff_by_teams_user(user.aad_object_id)
    if staff is not None:
        return Person(staff=staff)
    customer = await backend.find_customer_by_teams_user(user.aad_object_id)
    return Person(customer=customer) if customer is not None else None


async def names_for(backend: IdentityDirectory, approval: Approval) -> People:
    """Display names for the requester and deciders of an approval (unknown keys stay as they are)."""
    keys = {approval.requester, *(d.actor for d in approval.decisions)}
    names: dict[str, str] = {}
    for key in keys:
        kind, _, ident = key.partition(":")
        if kind in ("rep", "supervisor"):
            staff = await backend.get_staff(ident)
            if staff is not None:
                names[key] = staff.name
        elif kind == "customer":
            customer = await backend.get_customer(ident)
            if customer is not None:
                names[key] = customer.name
    return People(names=names)
