"""The tools' view of signoff's own knowledge: :class:`tools.backend.KnowledgeBase` over
:class:`storage.knowledge.Knowledge` (storage and tools do not import each other)."""

from __future__ import annotations

from typing import cast

from storage.knowledge import Knowledge
from tools.backend import KnowledgeHit, KnowledgeKind


class KnowledgeSearch:
    """``search_knowledge``'s source, the same with every commerce backend."""

    def __init__(self, repo: Knowledge) -> None:
        self.repo = repo

    async def search(self, query: str, *, kind: KnowledgeKind | None = None, limit: int = 5) -> list[KnowledgeHit]:
        """Sections of the newest document versions matching ``query``, best first."""
        return [
            KnowledgeHit(
                doc_id=h.doc_id,
                version=h.version,
                section_id=h.section_id,
                kind=cast(KnowledgeKind, h.kind),
                title=h.title,
                text=h.text,
            )  # fmt: skip
            for h in await self.repo.search(query, kind=kind, limit=limit)
        ]
