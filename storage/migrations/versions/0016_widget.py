"""The chat widget's sessions and their event streams (``bot/widget``).

Revision ID: 0016_widget
Revises: 0020_audit_partitions
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0016_widget"
down_revision = "0020_audit_partitions"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "widget_sessions",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("shop", sa.String(255), nullable=False),
        sa.Column("customer_id", sa.String(64), nullable=True),
        sa.Column("verified_via", sa.String(16), nullable=True),
        sa.Column("ip_hash", sa.String(64), nullable=False),
        sa.Column("conversation_id", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_widget_sessions")),
        sa.UniqueConstraint("secret_hash", name=op.f("uq_widget_sessions_secret_hash")),
    )
    op.create_index("ix_widget_sessions_customer", "widget_sessions", ["shop", "customer_id", "created_at"])
    op.create_index("ix_widget_sessions_ip", "widget_sessions", ["ip_hash", "created_at"])
    op.create_index(op.f("ix_widget_sessions_conversation_id"), "widget_sessions", ["conversation_id"])
    op.create_table(
        "widget_events",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(24), nullable=False),
        sa.Column("data", _JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_widget_events")),
        sa.UniqueConstraint("key", name=op.f("uq_widget_events_key")),
        sa.UniqueConstraint("session_id", "seq", name="uq_widget_events_session_seq"),
    )


def downgrade() -> None:
    op.drop_table("widget_events")
    op.drop_index(op.f("ix_widget_sessions_conversation_id"), table_name="widget_sessions")
    op.drop_index("ix_widget_sessions_ip", table_name="widget_sessions")
    op.drop_index("ix_widget_sessions_customer", table_name="widget_sessions")
    op.drop_table("widget_sessions")
