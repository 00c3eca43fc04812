"""Staff actions made outside signoff (the Shopify admin), for the rollout report.

Revision ID: 0014_shopify
Revises: 0009_policy_versions
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0014_shopify"
down_revision = "0015_knowledge_people"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "outside_staff_actions",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("tool", sa.String(64), nullable=False),
        sa.Column(
            "arguments",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("customer_id", sa.String(64), nullable=True),
        sa.Column("principal", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outside_staff_actions")),
    )
    op.create_index(op.f("ix_outside_staff_actions_created_at"), "outside_staff_actions", ["created_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_outside_staff_actions_created_at"), table_name="outside_staff_actions")
    op.drop_table("outside_staff_actions")
