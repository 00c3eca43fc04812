"""Cross-process wake-ups on PostgreSQL (``storage/notify.py``): a trigger on ``jobs`` notifies
``signoff_jobs`` once per inserting statement, one on ``widget_events`` notifies
``signoff_widget`` per row with the session and position. Nothing on SQLite.

Revision ID: 0022_notify
Revises: 0021_handoff_once
"""

from __future__ import annotations

from alembic import op

from storage.notify import PG_NOTIFY_DROP_SQL, PG_NOTIFY_SQL

revision = "0022_notify"
down_revision = "0021_handoff_once"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for statements in PG_NOTIFY_SQL.values():
        for statement in statements:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for statement in PG_NOTIFY_DROP_SQL:
        op.execute(statement)
