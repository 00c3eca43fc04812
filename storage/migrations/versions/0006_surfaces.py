"""Where each approval and confirmation is shown: a reference per surface (Slack, Teams, …).

An approval can be on several surfaces at once (the Slack approvals channel, a Teams chat,
App Home); each keeps what it needs to redraw its card. ``approvals.slack_ref`` becomes
``approvals.surfaces["slack"]``.

Revision ID: 0006_surfaces
Revises: 0005_audit_head_guard
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006_surfaces"
down_revision = "0005_audit_head_guard"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("approvals") as t:
        t.add_column(sa.Column("surfaces", _JSON, nullable=True))
    with op.batch_alter_table("confirmations") as t:
        t.add_column(sa.Column("surfaces", _JSON, nullable=True))
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT id, slack_ref FROM approvals WHERE slack_ref IS NOT NULL")).all()
    for approval_id, ref in rows:
        value = json.loads(ref) if isinstance(ref, str) else ref
        conn.execute(
            sa.text("UPDATE approvals SET surfaces = :s WHERE id = :i"),
            {"s": json.dumps({"slack": value}), "i": approval_id},
        )
    with op.batch_alter_table("approvals") as t:
        t.drop_column("slack_ref")


def downgrade() -> None:
    with op.batch_alter_table("approvals") as t:
        t.add_column(sa.Column("slack_ref", _JSON, nullable=True))
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT id, surfaces FROM approvals WHERE surfaces IS NOT NULL")).all()
    for approval_id, surfaces in rows:
        value = json.loads(surfaces) if isinstance(surfaces, str) else surfaces
        if isinstance(value, dict) and value.get("slack") is not None:
            conn.execute(
                sa.text("UPDATE approvals SET slack_ref = :s WHERE id = :i"),
                {"s": json.dumps(value["slack"]), "i": approval_id},
            )
    with op.batch_alter_table("confirmations") as t:
        t.drop_column("surfaces")
    with op.batch_alter_table("approvals") as t:
        t.drop_column("surfaces")
