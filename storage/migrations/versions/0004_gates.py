"""Human gates that survive crashes: runtime events appended once, proposal origins as data,
confirmations bound to their target, key, delivery and outcome, approvals' money and routing,
and the process holding each ledger claim and running turn.

Revision ID: 0004_gates
Revises: 0003_locks
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004_gates"
down_revision = "0003_locks"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("messages") as t:
        t.add_column(sa.Column("event_key", sa.String(length=160), nullable=True))
        t.create_unique_constraint("uq_messages_conv_event_key", ["conversation_id", "event_key"])
    with op.batch_alter_table("proposals") as t:
        t.add_column(sa.Column("origin", sa.String(length=96), nullable=True))
        t.create_index(op.f("ix_proposals_origin"), ["origin"], unique=False)
    # Runtime proposals used to carry their origin in the tool_use id ("runtime:cnf_…").
    op.execute("UPDATE proposals SET origin = substr(tool_use_id, 9) WHERE tool_use_id LIKE 'runtime:%'")
    op.execute("UPDATE proposals SET origin = 'confirmation:' || origin WHERE origin LIKE 'cnf\\_%' ESCAPE '\\'")
    op.execute("UPDATE proposals SET origin = 'approval:' || origin WHERE origin LIKE 'apr\\_%' ESCAPE '\\'")
    with op.batch_alter_table("confirmations") as t:
        t.add_column(sa.Column("target", sa.String(length=255), nullable=True))
        t.add_column(sa.Column("idempotency_key", sa.String(length=255), nullable=True))
        t.add_column(sa.Column("shown_at", _TS, nullable=True))
        t.add_column(sa.Column("outcome", _JSON, nullable=True))
    with op.batch_alter_table("approvals") as t:
        t.add_column(sa.Column("amount_minor", sa.BigInteger(), nullable=True))
        t.add_column(sa.Column("currency", sa.String(length=3), nullable=True))
        t.add_column(sa.Column("routing", _JSON, nullable=True))
    with op.batch_alter_table("tool_executions") as t:
        t.add_column(sa.Column("holder", sa.String(length=96), nullable=True))
    with op.batch_alter_table("runs") as t:
        t.add_column(sa.Column("holder", sa.String(length=96), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as t:
        t.drop_column("holder")
    with op.batch_alter_table("tool_executions") as t:
        t.drop_column("holder")
    with op.batch_alter_table("approvals") as t:
        t.drop_column("routing")
        t.drop_column("currency")
        t.drop_column("amount_minor")
    with op.batch_alter_table("confirmations") as t:
        t.drop_column("outcome")
        t.drop_column("shown_at")
        t.drop_column("idempotency_key")
        t.drop_column("target")
    with op.batch_alter_table("proposals") as t:
        t.drop_index(op.f("ix_proposals_origin"))
        t.drop_column("origin")
    with op.batch_alter_table("messages") as t:
        t.drop_constraint("uq_messages_conv_event_key", type_="unique")
        t.drop_column("event_key")
