"""Knowledge and staff leave the sandbox store: they are signoff's own now (``knowledge_*``,
``staff`` and ``identities``, revision ``0015_knowledge_people``), loaded there from the dataset.

The customers' ``slack_user_id``/``teams_user_id`` columns stay in place, unwritten: SQLite cannot
drop a UNIQUE column without rebuilding the table, which the orders' foreign keys forbid. A
database that held store knowledge or staff keeps them only until ``signoff store load`` of its
dataset, which is how they reach signoff's own tables (the downgrade restores empty tables).

Revision ID: s0005_knowledge_people_out
Revises: s0004_teams_user
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from sandbox import search

revision = "s0005_knowledge_people_out"
down_revision = "s0004_teams_user"
branch_labels = None
depends_on = None


def upgrade() -> None:
    search.uninstall_fts(op.get_bind())
    op.drop_table("store_knowledge_sections")
    op.drop_table("store_knowledge_docs")
    op.drop_index("uq_store_staff_teams_user_id", table_name="store_staff")
    op.drop_table("store_staff")


def downgrade() -> None:
    op.create_table(
        "store_staff",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("slack_user_id", sa.String(32), nullable=True),
        sa.Column("email", sa.String(320), nullable=True),
        sa.Column("teams_user_id", sa.String(36), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_store_staff")),
        sa.UniqueConstraint("slack_user_id", name=op.f("uq_store_staff_slack_user_id")),
    )
    op.create_index("uq_store_staff_teams_user_id", "store_staff", ["teams_user_id"], unique=True)
    op.create_table(
        "store_knowledge_docs",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("title", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_store_knowledge_docs")),
    )
    op.create_table(
        "store_knowledge_sections",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("doc_id", sa.String(64), nullable=False),
        sa.Column("section_id", sa.String(64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("doc_title", sa.String(255), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_store_knowledge_sections")),
        sa.ForeignKeyConstraint(
            ["doc_id"],
            ["store_knowledge_docs.id"],
            name=op.f("fk_store_knowledge_sections_doc_id_store_knowledge_docs"),
        ),
        sa.UniqueConstraint("doc_id", "section_id", name="uq_store_knowledge_sections_doc_section"),
    )
    op.create_index(op.f("ix_store_knowledge_sections_doc_id"), "store_knowledge_sections", ["doc_id"])
    search.install_fts(op.get_bind())
