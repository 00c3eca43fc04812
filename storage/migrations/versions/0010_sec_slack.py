"""Security second pass: quarantined jobs, link-code requests, the link attempts' window.

* ``jobs.status`` ``failed`` becomes ``quarantined`` (the terminal state's name: given up on,
  listed by ``signoff jobs``);
* ``link_requests``: every ``link <email>`` (who asked, a hash of the address), so code emails
  are capped per address and per requester within a window;
* ``identities.link_window_at``: when the current five-attempt window began (a new code no
  longer resets the count).

Revision ID: 0010_sec_slack
Revises: 0009_policy_versions
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_sec_slack"
down_revision = "0009_policy_versions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("UPDATE jobs SET status = 'quarantined' WHERE status = 'failed'")
    op.create_table(
        "link_requests",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("channel", sa.String(16), nullable=False),
        sa.Column("requester", sa.String(255), nullable=False),
        sa.Column("address_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_link_requests")),
    )
    op.create_index("ix_link_requests_requester", "link_requests", ["channel", "requester", "created_at"])
    op.create_index("ix_link_requests_address", "link_requests", ["address_hash", "created_at"])
    with op.batch_alter_table("identities") as batch:
        batch.add_column(sa.Column("link_window_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("identities") as batch:
        batch.drop_column("link_window_at")
    op.drop_index("ix_link_requests_address", table_name="link_requests")
    op.drop_index("ix_link_requests_requester", table_name="link_requests")
    op.drop_table("link_requests")
    op.execute("UPDATE jobs SET status = 'failed' WHERE status = 'quarantined'")
