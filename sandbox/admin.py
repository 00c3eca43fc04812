"""What the sandbox shop's admin (``signoff store admin``) needs beyond the store's customer-scoped
API: whose order an order id is (an admin acts on any order)."""

from __future__ import annotations

from sqlalchemy import select

from sandbox.models import StoreOrderRow
from storage.db import Database


async def order_owner(db: Database, order_id: str) -> str | None:
    """The customer id of order ``order_id``; ``None`` when the store has no such order."""
    async with db.reader() as s:
        return (await s.execute(select(StoreOrderRow.customer_id).where(StoreOrderRow.id == order_id))).scalar()
