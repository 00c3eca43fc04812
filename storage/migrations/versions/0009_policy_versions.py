"""Applied policy versions (``signoff policy apply``): the YAML, its sha256, who applied it, what it replaced.

Revision ID: 0009_policy_versions
Revises: 0008_sent_mail
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_policy_versions"
down_revision = "0008_sent_mail"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "policy_versions",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("version", sa.String(32), nullable=False),
        sa.Column("yaml", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("applied_by", sa.String(64), nullable=False),
        sa.Column("operator", sa.String(64), nullable=False),
        sa.Column("previous_version", sa.String(32), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_policy_versions")),
    )
    op.create_index(op.f("ix_policy_versions_version"), "policy_versions", ["version"])


def downgrade() -> None:
    op.drop_index(op.f("ix_policy_versions_version"), table_name="policy_versions")
    op.drop_table("policy_versions")
