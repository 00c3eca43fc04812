"""The sandbox store's retired knowledge index: knowledge moved to signoff's own storage
(:mod:`storage.search`, :mod:`storage.knowledge`). This spec stays for the store's revisions
that built (``0002_store``) and removed (``s0005_knowledge_people_out``) it."""

from __future__ import annotations

from storage import search

STORE = search.FtsTables(
    sections="store_knowledge_sections", fts="store_knowledge_fts", pg_index="ix_store_knowledge_sections_search"
)


def install_fts(conn: object) -> None:
    """Create the store's old index (revision ``0002_store``)."""
    STORE.install(conn)  # type: ignore[arg-type]


def uninstall_fts(conn: object) -> None:
    """Remove the store's old index."""
    STORE.uninstall(conn)  # type: ignore[arg-type]


#: Autogenerate leaves signoff's search objects alone (the store has none left).
include_object = search.include_object
