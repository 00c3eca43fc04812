"""A group's budget read from its recent rows only.

The group limits (model tokens per day, new conversations per hour, shared by every principal
bound to no account: a Slack team, a sender domain, the widget's guests) were counted by joining
every conversation the group ever had: after a month of 50,000 guest conversations, 30 ms of the
database's time before every guest turn, and growing. Each usage row now keeps the group it
counts against (``token_usage.principal_group``, filled here from its conversation: a
conversation's group and binding never change), indexed with its time; the conversations' group
index gains the opening time.

Revision ID: 0023_group_usage
Revises: 0022_notify
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023_group_usage"
down_revision = "0022_notify"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("token_usage") as batch:
        batch.add_column(sa.Column("principal_group", sa.String(128), nullable=True))
    op.execute(
        "UPDATE token_usage SET principal_group = (SELECT c.principal_group FROM conversations AS c "
        "WHERE c.id = token_usage.conversation_id AND c.customer_id IS NULL)"
    )
    op.create_index("ix_token_usage_group", "token_usage", ["principal_group", "created_at"])
    op.drop_index("ix_conversations_principal_group", table_name="conversations")
    op.create_index("ix_conversations_group_opened", "conversations", ["principal_group", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_conversations_group_opened", table_name="conversations")
    op.create_index("ix_conversations_principal_group", "conversations", ["principal_group"])
    op.drop_index("ix_token_usage_group", table_name="token_usage")
    with op.batch_alter_table("token_usage") as batch:
        batch.drop_column("principal_group")
