"""The Message-IDs of the mails we sent (email threading joins a conversation only through one).

Revision ID: 0008_sent_mail
Revises: 0007_inbound
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_sent_mail"
down_revision = "0007_inbound"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sent_mail",
        sa.Column("message_id", sa.String(255), nullable=False),
        sa.Column("conversation_id", sa.String(64), nullable=False),
        sa.Column("principal", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("message_id", name=op.f("pk_sent_mail")),
    )


def downgrade() -> None:
    op.drop_table("sent_mail")
