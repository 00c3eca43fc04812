"""The sandbox shop: a ``CommerceBackend`` over SQL (its own tables and Alembic branch),
the dataset format, and the demo data.

It implements the ``tools`` protocols and uses ``storage`` only for its database; it never
imports ``agent`` or ``bot``.
"""
