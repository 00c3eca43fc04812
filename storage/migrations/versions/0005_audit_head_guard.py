"""The audit head exists from the start and, on PostgreSQL, only moves forward to real rows.

The head row is written by the migration (not by the first append), so the
application's role needs no INSERT on ``audit_head``; on PostgreSQL triggers
refuse DELETE and TRUNCATE of it, an UPDATE that does not move it forward, and
(at commit) a head that names no row of ``audit_events``.

Revision ID: 0005_audit_head_guard
Revises: 0004_gates
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from storage.audit import GENESIS_HASH
from storage.audit_guard import PG_AUDIT_HEAD_GUARD_DROP_SQL, PG_AUDIT_HEAD_GUARD_SQL

revision = "0005_audit_head_guard"
down_revision = "0004_gates"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        sa.text(
            "INSERT INTO audit_head (id, seq, hash) SELECT 1, 0, :genesis "
            "WHERE NOT EXISTS (SELECT 1 FROM audit_head WHERE id = 1)"
        ).bindparams(genesis=GENESIS_HASH)
    )
    if op.get_bind().dialect.name == "postgresql":
        for statement in PG_AUDIT_HEAD_GUARD_SQL:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in PG_AUDIT_HEAD_GUARD_DROP_SQL:
            op.execute(statement)
