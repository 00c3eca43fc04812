"""One active hand-off per conversation, enforced by the database (SQLite and PostgreSQL);
the agent's suggested replies for the person who owns a hand-off (``handoff_suggestions``);
every staff thread of a hand-off (``handoff_threads``: the Slack thread and the Teams reply
chain both lead to it), filled from ``handoffs.thread``.

Until now the rule lived only in ``Handoffs.open`` (look, then insert), which two concurrent
opens on PostgreSQL can both pass. A partial unique index on ``conversation_id`` over the
active states makes the second insert fail; ``Handoffs.open`` then returns the winner. Should
an existing database already hold two active hand-offs of one conversation, the older ones
are closed first (the newest stays; ``ended_at`` is their opening time, no audit event: the
migration is no person), so the index can be built.

Revision ID: 0021_handoff_once
Revises: 0017_handoff
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021_handoff_once"
down_revision = "0017_handoff"
branch_labels = None
depends_on = None

_ACTIVE = "state IN ('waiting', 'taken')"


def upgrade() -> None:
    op.execute(
        sa.text(
            "UPDATE handoffs SET state = 'closed', ended_at = opened_at, version = version + 1 "
            f"WHERE {_ACTIVE} AND EXISTS (SELECT 1 FROM handoffs AS newer "
            "WHERE newer.conversation_id = handoffs.conversation_id AND newer.state IN ('waiting', 'taken') "
            "AND (newer.opened_at > handoffs.opened_at "
            "OR (newer.opened_at = handoffs.opened_at AND newer.id > handoffs.id)))"
        )
    )
    op.create_index(
        "uq_handoffs_active",
        "handoffs",
        ["conversation_id"],
        unique=True,
        sqlite_where=sa.text(_ACTIVE),
        postgresql_where=sa.text(_ACTIVE),
    )
    op.create_table(
        "handoff_suggestions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("handoff_id", sa.String(64), nullable=False),
        sa.Column("conversation_id", sa.String(64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(op.f("ix_handoff_suggestions_handoff_id"), "handoff_suggestions", ["handoff_id"])
    op.create_table(
        "handoff_threads",
        sa.Column("thread", sa.String(255), primary_key=True),
        sa.Column("handoff_id", sa.String(64), primary_key=True),
    )
    op.execute(
        sa.text(
            "INSERT INTO handoff_threads (thread, handoff_id) SELECT thread, id FROM handoffs WHERE thread IS NOT NULL"
        )
    )


def downgrade() -> None:
    op.drop_table("handoff_threads")
    op.drop_index(op.f("ix_handoff_suggestions_handoff_id"), table_name="handoff_suggestions")
    op.drop_table("handoff_suggestions")
    op.drop_index("uq_handoffs_active", table_name="handoffs")
