"""The budget an unbound principal shares (a Slack team, a sender domain), the index the
per-principal limits count by, and the index that finds the policy in force by its audit event.

Revision ID: 0011_sec_principals
Revises: 0009_policy_versions
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_sec_principals"
down_revision = "0014_shopify"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("principal_group", sa.String(128), nullable=True))
    op.create_index(op.f("ix_conversations_principal_group"), "conversations", ["principal_group"])
    op.create_index("ix_conversations_principal", "conversations", ["principal_kind", "principal_id"])
    # The policy in force is found by its newest policy.applied event (polled every few seconds).
    op.create_index("ix_audit_events_kind_seq", "audit_events", ["kind", "seq"])


def downgrade() -> None:
    op.drop_index("ix_audit_events_kind_seq", table_name="audit_events")
    op.drop_index("ix_conversations_principal", table_name="conversations")
    op.drop_index(op.f("ix_conversations_principal_group"), table_name="conversations")
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("principal_group")
