"""Durable inbound for the faces: accepted messages, once-only deliveries, assist-thread bindings.

Revision ID: 0007_inbound
Revises: 0006_surfaces
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007_inbound"
down_revision = "0006_surfaces"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "inbound",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("face", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("payload", _JSON, nullable=False),
        sa.Column("result", _JSON, nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_inbound")),
    )
    op.create_index(op.f("ix_inbound_status"), "inbound", ["status"])
    op.create_table(
        "deliveries",
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("holder", sa.String(96), nullable=True),
        sa.Column("ref", _JSON, nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_deliveries")),
    )
    op.create_table(
        "thread_bindings",
        sa.Column("ref", sa.String(200), nullable=False),
        sa.Column("customer_id", sa.String(64), nullable=False),
        sa.Column("staff_id", sa.String(64), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("ref", name=op.f("pk_thread_bindings")),
    )
    op.create_index(op.f("ix_thread_bindings_staff_id"), "thread_bindings", ["staff_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_thread_bindings_staff_id"), table_name="thread_bindings")
    op.drop_table("thread_bindings")
    op.drop_table("deliveries")
    op.drop_index(op.f("ix_inbound_status"), table_name="inbound")
    op.drop_table("inbound")
