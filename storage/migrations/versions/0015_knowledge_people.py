"""Knowledge and people of signoff's own: versioned documents with sections and their search
index (FTS5 on SQLite, a ``tsvector`` with a GIN index on PostgreSQL); staff; and the origin of
each identity row (``seed`` rows are replaced when people are seeded again, ``link`` rows stay).

Revision ID: 0015_knowledge_people
Revises: 0009_policy_versions
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from storage import search

revision = "0015_knowledge_people"
down_revision = "0010_sec_slack"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "knowledge_documents",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("title", sa.String(255), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_knowledge_documents")),
    )
    op.create_table(
        "knowledge_versions",
        sa.Column("doc_id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("title", sa.String(255), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("doc_id", "version", name=op.f("pk_knowledge_versions")),
        sa.ForeignKeyConstraint(
            ["doc_id"], ["knowledge_documents.id"], name=op.f("fk_knowledge_versions_doc_id_knowledge_documents")
        ),
    )
    op.create_table(
        "knowledge_sections",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("doc_id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("section_id", sa.String(64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("doc_title", sa.String(255), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_knowledge_sections")),
        sa.ForeignKeyConstraint(
            ["doc_id"], ["knowledge_documents.id"], name=op.f("fk_knowledge_sections_doc_id_knowledge_documents")
        ),
        sa.UniqueConstraint("doc_id", "version", "section_id", name="uq_knowledge_sections_doc_section"),
    )
    op.create_index("ix_knowledge_sections_doc_version", "knowledge_sections", ["doc_id", "version"])
    search.KNOWLEDGE.install(op.get_bind())
    op.create_table(
        "staff",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("email", sa.String(320), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_staff")),
    )
    with op.batch_alter_table("identities") as t:
        t.add_column(sa.Column("origin", sa.String(16), nullable=False, server_default="link"))


def downgrade() -> None:
    with op.batch_alter_table("identities") as t:
        t.drop_column("origin")
    op.drop_table("staff")
    search.KNOWLEDGE.uninstall(op.get_bind())
    op.drop_index("ix_knowledge_sections_doc_version", table_name="knowledge_sections")
    op.drop_table("knowledge_sections")
    op.drop_table("knowledge_versions")
    op.drop_table("knowledge_documents")
