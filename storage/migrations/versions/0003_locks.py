"""Named leases for SQLite deployments with several processes (the money lock).

Revision ID: 0003_locks
Revises: 0001_runtime
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_locks"
down_revision = "0001_runtime"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "locks",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_locks")),
    )


def downgrade() -> None:
    op.drop_table("locks")
