"""The sandbox store tells a cancellation's money from a refund's: each has its own policy.

Revision ID: s0002_refund_kind
Revises: 0002_store
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "s0002_refund_kind"
down_revision = "0002_store"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("store_refunds") as t:
        t.add_column(sa.Column("kind", sa.String(length=16), nullable=False, server_default="refund"))


def downgrade() -> None:
    with op.batch_alter_table("store_refunds") as t:
        t.drop_column("kind")
