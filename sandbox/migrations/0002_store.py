"""The sandbox store: customers, orders, money, returns, knowledge (with full-text search), outbox.

The first revision of the ``sandbox`` branch (the store's tables are the sandbox's own, not the
runtime's). Databases migrated before the branch existed made these tables in the runtime's
chain, under this same revision id: for them the upgrade finds the tables and does nothing.

Revision ID: 0002_store
Revises: (branch root: sandbox)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from sandbox import search

revision = "0002_store"
down_revision = None
branch_labels = ("sandbox",)
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TS = sa.DateTime(timezone=True)
AUTOINC = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _id(name: str = "id") -> sa.Column:
    return sa.Column(name, sa.String(64), nullable=False)


def _fk(table: str, column: str, target: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint([column], [f"{target}.id"], name=f"fk_{table}_{column}_{target}")


def _pk(table: str, column: str = "id") -> sa.PrimaryKeyConstraint:
    return sa.PrimaryKeyConstraint(column, name=f"pk_{table}")


def _index(table: str, column: str) -> None:
    op.create_index(f"ix_{table}_{column}", table, [column])


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("store_customers"):
        return  # made by the runtime's chain before the sandbox had a branch of its own
    op.create_table(
        "store_customers",
        _id(),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("email", sa.String(320), nullable=False),
        sa.Column("phone", sa.String(32)),
        sa.Column("address", JSON),
        sa.Column("slack_user_id", sa.String(32)),
        sa.Column("created_at", TS),
        _pk("store_customers"),
        sa.UniqueConstraint("slack_user_id", name="uq_store_customers_slack_user_id"),
    )
    op.create_index("ix_store_customers_email_lower", "store_customers", [sa.text("lower(email)")])
    op.create_table(
        "store_payment_methods",
        _id(),
        _id("customer_id"),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("brand", sa.String(32), nullable=False),
        sa.Column("last4", sa.String(4), nullable=False),
        sa.Column("exp_month", sa.Integer(), nullable=False),
        sa.Column("exp_year", sa.Integer(), nullable=False),
        _pk("store_payment_methods"),
        _fk("store_payment_methods", "customer_id", "store_customers"),
    )
    _index("store_payment_methods", "customer_id")
    op.create_table(
        "store_staff",
        _id(),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("slack_user_id", sa.String(32)),
        _pk("store_staff"),
        sa.UniqueConstraint("slack_user_id", name="uq_store_staff_slack_user_id"),
    )
    op.create_table(
        "store_orders",
        _id(),
        _id("customer_id"),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("total_minor", sa.BigInteger(), nullable=False),
        sa.Column("placed_at", TS, nullable=False),
        sa.Column("delivered_at", TS),
        sa.Column("shipping_address", JSON),
        sa.Column("notes", sa.Text()),
        _pk("store_orders"),
        _fk("store_orders", "customer_id", "store_customers"),
    )
    op.create_index("ix_store_orders_customer_placed", "store_orders", ["customer_id", "placed_at"])
    op.create_table(
        "store_order_items",
        sa.Column("id", AUTOINC, autoincrement=True, nullable=False),
        _id("order_id"),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("sku", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("qty", sa.Integer(), nullable=False),
        sa.Column("unit_minor", sa.BigInteger(), nullable=False),
        _pk("store_order_items"),
        _fk("store_order_items", "order_id", "store_orders"),
    )
    _index("store_order_items", "order_id")
    op.create_table(
        "store_payments",
        _id(),
        _id("order_id"),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        _pk("store_payments"),
        _fk("store_payments", "order_id", "store_orders"),
    )
    _index("store_payments", "order_id")
    op.create_table(
        "store_returns",
        _id(),
        _id("order_id"),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason_code", sa.String(64)),
        sa.Column("created_at", TS, nullable=False),
        _pk("store_returns"),
        _fk("store_returns", "order_id", "store_orders"),
    )
    _index("store_returns", "order_id")
    op.create_table(
        "store_return_items",
        sa.Column("id", AUTOINC, autoincrement=True, nullable=False),
        _id("return_id"),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("sku", sa.String(64), nullable=False),
        sa.Column("qty", sa.Integer(), nullable=False),
        _pk("store_return_items"),
        _fk("store_return_items", "return_id", "store_returns"),
    )
    _index("store_return_items", "return_id")
    op.create_table(
        "store_refunds",
        _id(),
        _id("order_id"),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("reason_code", sa.String(64)),
        sa.Column("return_id", sa.String(64)),
        sa.Column("created_at", TS, nullable=False),
        _pk("store_refunds"),
        _fk("store_refunds", "order_id", "store_orders"),
        _fk("store_refunds", "return_id", "store_returns"),
    )
    _index("store_refunds", "order_id")
    _index("store_refunds", "created_at")
    op.create_table(
        "store_invoices",
        _id(),
        _id("order_id"),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("issued_at", TS, nullable=False),
        _pk("store_invoices"),
        _fk("store_invoices", "order_id", "store_orders"),
    )
    _index("store_invoices", "order_id")
    op.create_table(
        "store_knowledge_docs",
        _id(),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("title", sa.String(255), nullable=False),
        _pk("store_knowledge_docs"),
    )
    op.create_table(
        "store_knowledge_sections",
        sa.Column("id", AUTOINC, autoincrement=True, nullable=False),
        _id("doc_id"),
        sa.Column("section_id", sa.String(64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("doc_title", sa.String(255), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        _pk("store_knowledge_sections"),
        _fk("store_knowledge_sections", "doc_id", "store_knowledge_docs"),
        sa.UniqueConstraint("doc_id", "section_id", name="uq_store_knowledge_sections_doc_section"),
    )
    _index("store_knowledge_sections", "doc_id")
    op.create_table(
        "store_outbox",
        _id(),
        _id("customer_id"),
        sa.Column("channel", sa.String(8), nullable=False),
        sa.Column("to", sa.String(320), nullable=False),
        sa.Column("template", sa.String(64), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("sent_at", TS, nullable=False),
        _pk("store_outbox"),
        _fk("store_outbox", "customer_id", "store_customers"),
    )
    _index("store_outbox", "customer_id")
    op.create_table(
        "store_writes",
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("operation", sa.String(64), nullable=False),
        sa.Column("customer_id", sa.String(64)),
        sa.Column("result", JSON, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        _pk("store_writes", "key"),
    )
    search.install_fts(op.get_bind())


_TABLES_CHILD_FIRST = (
    "store_writes",
    "store_outbox",
    "store_knowledge_sections",
    "store_knowledge_docs",
    "store_invoices",
    "store_refunds",
    "store_return_items",
    "store_returns",
    "store_payments",
    "store_order_items",
    "store_orders",
    "store_staff",
    "store_payment_methods",
    "store_customers",
)


def downgrade() -> None:
    search.uninstall_fts(op.get_bind())
    for table in _TABLES_CHILD_FIRST:
        op.drop_table(table)
