"""Customers and staff may carry a Teams user (their Entra object id), unique like the Slack one.

A unique index, not a constraint: SQLite adds neither constraints nor, without rebuilding the
table (which the orders' foreign keys forbid), anything but a plain column in place.

Revision ID: s0004_teams_user
Revises: s0003_staff_email
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "s0004_teams_user"
down_revision = "s0003_staff_email"
branch_labels = None
depends_on = None

TABLES = ("store_customers", "store_staff")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column("teams_user_id", sa.String(length=36), nullable=True))
        op.create_index(f"uq_{table}_teams_user_id", table, ["teams_user_id"], unique=True)


def downgrade() -> None:
    for table in TABLES:
        op.drop_index(f"uq_{table}_teams_user_id", table_name=table)
        # In place on both dialects (SQLite >= 3.35); a batch rebuild would trip the foreign keys.
        op.execute(f"ALTER TABLE {table} DROP COLUMN teams_user_id")
