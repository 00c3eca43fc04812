"""Hand-offs to a person: who owns a conversation, where its staff thread is, and its notes.

Revision ID: 0017_handoff
Revises: 0016_widget
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0017_handoff"
down_revision = "0016_widget"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "handoffs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("conversation_id", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(200), nullable=False),
        sa.Column("opened_by", sa.String(160), nullable=False),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.Column("owner_name", sa.String(200), nullable=True),
        sa.Column("notes", sa.Text(), nullable=True),
        sa.Column("thread", sa.String(255), nullable=True),
        sa.Column("surfaces", _JSON, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("opened_at", _TS, nullable=False),
        sa.Column("taken_at", _TS, nullable=True),
        sa.Column("ended_at", _TS, nullable=True),
    )
    for column in ("conversation_id", "state", "owner", "thread"):
        op.create_index(op.f(f"ix_handoffs_{column}"), "handoffs", [column])


def downgrade() -> None:
    for column in ("thread", "owner", "state", "conversation_id"):
        op.drop_index(op.f(f"ix_handoffs_{column}"), table_name="handoffs")
    op.drop_table("handoffs")
