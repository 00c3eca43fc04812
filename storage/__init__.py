"""The runtime's persistence: SQLAlchemy models, repositories that take and return frozen
records, Alembic migrations, the audit chain, the ledger, locks, inbox and job queue.

It imports none of ``agent``, ``tools``, ``sandbox`` or ``bot``; no ORM row leaves it.
"""
