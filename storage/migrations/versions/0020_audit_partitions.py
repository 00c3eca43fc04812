"""The audit log in partitions: one chain and one head row per partition, no single hot row.

Every existing event becomes the root partition (``part`` 1, the existing head's id) at the
position it had (``pseq`` = ``seq``): it hashes exactly as before, so an existing log and its
checkpoints still verify. The other partitions' head rows are written here (the application's
role may not insert heads). On PostgreSQL the global ``seq`` comes from a sequence, set past
the existing rows, and the head guard's row check names the head's partition.

Revision ID: 0020_audit_partitions
Revises: 0011_sec_principals
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from storage.audit import PARTITIONS, ROOT, genesis
from storage.audit_guard import PG_AUDIT_HEAD_GUARD_SQL, PG_AUDIT_PARTITION_SQL

revision = "0020_audit_partitions"
down_revision = "0011_sec_principals"
branch_labels = None
depends_on = None

_POSITION = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    pg = op.get_bind().dialect.name == "postgresql"
    with op.batch_alter_table("audit_events") as batch:
        batch.add_column(sa.Column("part", sa.Integer(), nullable=False, server_default=str(ROOT)))
        batch.add_column(sa.Column("pseq", _POSITION, nullable=True))
    if pg:  # the owner sets the positions of rows the application may never update
        op.execute("ALTER TABLE audit_events DISABLE TRIGGER audit_events_no_update_delete")
    op.execute("UPDATE audit_events SET pseq = seq")
    if pg:
        op.execute("ALTER TABLE audit_events ENABLE TRIGGER audit_events_no_update_delete")
    with op.batch_alter_table("audit_events") as batch:
        batch.alter_column("part", server_default=None, existing_type=sa.Integer(), existing_nullable=False)
        batch.alter_column("pseq", nullable=False, existing_type=_POSITION)
    op.create_index("ix_audit_events_part_pseq", "audit_events", ["part", "pseq"], unique=True)
    for part in range(ROOT + 1, ROOT + PARTITIONS + 1):
        op.execute(
            sa.text(
                "INSERT INTO audit_head (id, seq, hash) SELECT :id, 0, :genesis "
                "WHERE NOT EXISTS (SELECT 1 FROM audit_head WHERE id = :id)"
            ).bindparams(id=part, genesis=genesis(part))
        )
    if pg:
        _sequence()
        for statement in PG_AUDIT_PARTITION_SQL:
            op.execute(statement)


def _sequence() -> None:
    """``audit_events.seq`` drawn from a sequence (the column is ``BIGSERIAL`` from 0001; made
    so if it is not), past every existing row."""
    bind = op.get_bind()
    name = bind.execute(sa.text("SELECT pg_get_serial_sequence('audit_events', 'seq')")).scalar()
    if name is None:
        op.execute("CREATE SEQUENCE audit_events_seq_seq OWNED BY audit_events.seq")
        op.execute("ALTER TABLE audit_events ALTER COLUMN seq SET DEFAULT nextval('audit_events_seq_seq')")
        name = "audit_events_seq_seq"
    op.execute(
        sa.text("SELECT setval(:name, COALESCE((SELECT max(seq) FROM audit_events), 0) + 1, false)").bindparams(
            name=name
        )
    )


def downgrade() -> None:
    # Only a log still in one chain goes back: partitioned rows would not verify as one.
    bind = op.get_bind()
    if bind.execute(sa.text(f"SELECT count(*) FROM audit_events WHERE part <> {ROOT}")).scalar():
        raise RuntimeError("the audit log has partitioned events: it cannot go back to a single chain")
    if bind.dialect.name == "postgresql":
        op.execute(PG_AUDIT_HEAD_GUARD_SQL[1])  # the single chain's row check
        op.execute("ALTER TABLE audit_head DISABLE TRIGGER audit_head_forward_only")
    op.execute(f"DELETE FROM audit_head WHERE id <> {ROOT}")
    if bind.dialect.name == "postgresql":
        op.execute("ALTER TABLE audit_head ENABLE TRIGGER audit_head_forward_only")
    op.drop_index("ix_audit_events_part_pseq", table_name="audit_events")
    with op.batch_alter_table("audit_events") as batch:
        batch.drop_column("pseq")
        batch.drop_column("part")
