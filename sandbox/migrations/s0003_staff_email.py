"""Staff members may carry their own email: a rep never acts on a customer account with it.

Revision ID: s0003_staff_email
Revises: s0002_refund_kind
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "s0003_staff_email"
down_revision = "s0002_refund_kind"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("store_staff") as t:
        t.add_column(sa.Column("email", sa.String(length=320), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("store_staff") as t:
        t.drop_column("email")
