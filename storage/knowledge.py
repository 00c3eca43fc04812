"""Signoff's own knowledge: versioned documents, their sections, and the search over them.

Knowledge is the runtime's, whatever the commerce backend: ``signoff knowledge import`` (files),
``knowledge sync`` (a shop's pages) and the sandbox dataset's ``knowledge`` all arrive as
:class:`~storage.knowledge_files.Document` through :meth:`Knowledge.save`. A changed document
becomes a new version (old versions stay, with their sections, so an evidence id cited in an
old conversation still names what was read); an unchanged one is a no-op; search reads only
each document's newest version. Evidence ids are ``{doc_id}@{version}#{section_id}``.

One import is one transaction: every document lands or none does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from storage import search
from storage.db import Database
from storage.knowledge_files import Document, HtmlSource, KnowledgeError, Section, from_html_sources
from storage.models import KnowledgeDocumentRow, KnowledgeSectionRow, KnowledgeVersionRow
from storage.records import Clock, wall_clock

Outcome = Literal["created", "updated", "unchanged"]


@dataclass(frozen=True, kw_only=True)
class Hit:
    """One section that matched a search."""

    doc_id: str
    version: int
    section_id: str
    kind: str
    title: str
    text: str


@dataclass(frozen=True, kw_only=True)
class Imported:
    """What saving one document did."""

    doc_id: str
    version: int
    outcome: Outcome


@dataclass(frozen=True, kw_only=True)
class StoredDocument:
    """A document's newest version with its sections, and how many versions it has had."""

    id: str
    version: int
    kind: str
    title: str
    sections: tuple[Section, ...]
    versions: int


def digest(doc: Document) -> str:
    """What decides "unchanged": kind, title and sections (ids and text, in order)."""
    body = [doc.kind, doc.title, [[s.id, s.text] for s in doc.sections]]
    return hashlib.sha256(json.dumps(body, ensure_ascii=False).encode()).hexdigest()


async def save_in(s: AsyncSession, docs: Sequence[Document], now: datetime) -> list[Imported]:
    """Save ``docs`` inside the caller's transaction (the sandbox dataset's load uses this)."""
    ids = [d.id for d in docs]
    if len(set(ids)) != len(ids):
        raise KnowledgeError(f"document ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
    return [await _save_one(s, doc, now) for doc in docs]


async def _save_one(s: AsyncSession, doc: Document, now: datetime) -> Imported:
    sha = digest(doc)
    row = (
        await s.execute(select(KnowledgeDocumentRow).where(KnowledgeDocumentRow.id == doc.id).with_for_update())
    ).scalar_one_or_none()
    if doc.version is not None:
        same = await s.get(KnowledgeVersionRow, (doc.id, doc.version))
        if same is not None:
            if same.digest != sha:
                raise KnowledgeError(f"{doc.id!r}: version {doc.version} is already stored with other content")
            return Imported(doc_id=doc.id, version=doc.version, outcome="unchanged")
        if row is not None and doc.version < row.version:
            raise KnowledgeError(f"{doc.id!r}: version {doc.version} is older than the stored {row.version}")
    elif row is not None and row.digest == sha:
        return Imported(doc_id=doc.id, version=row.version, outcome="unchanged")
    version = doc.version or (row.version + 1 if row is not None else 1)
    if row is None:
        row = KnowledgeDocumentRow(id=doc.id)
        s.add(row)
    row.version, row.kind, row.title, row.digest, row.updated_at = version, doc.kind, doc.title, sha, now
    await s.flush()
    s.add(
        KnowledgeVersionRow(doc_id=doc.id, version=version, kind=doc.kind, title=doc.title, digest=sha, created_at=now)
    )
    s.add_all(
        KnowledgeSectionRow(
            doc_id=doc.id, version=version, section_id=sec.id, position=n, doc_title=doc.title, text=sec.text
        )
        for n, sec in enumerate(doc.sections)
    )
    await s.flush()
    return Imported(doc_id=doc.id, version=version, outcome="updated" if version > 1 else "created")


class Knowledge:
    """Repository over ``knowledge_*``: import, list, search."""

    def __init__(self, db: Database, *, clock: Clock | None = None) -> None:
        self._db = db
        self._clock: Callable[[], datetime] = clock or wall_clock

    async def save(self, docs: Sequence[Document]) -> list[Imported]:
        """Save ``docs`` in one transaction (a concurrent import of the same new id: :class:`KnowledgeError`)."""
        try:
            async with self._db.sessions() as s, s.begin():
                return await save_in(s, docs, self._clock())
        except IntegrityError:
            raise KnowledgeError("another import saved the same documents at the same time; try again") from None

    async def import_documents(self, records: Iterable[HtmlSource]) -> list[Imported]:
        """Import a shop's pages and policies (``doc_id``, ``title``, ``body_html``, ``kind``), all or none."""
        return await self.save(from_html_sources(records))

    async def search(self, query: str, *, kind: str | None = None, limit: int = 5) -> list[Hit]:
        """Up to ``limit`` (at most 50) sections of newest versions best matching ``query``.

        Any text is safe: it is reduced to words before it reaches the FTS query language."""
        terms = search.query_terms(query)
        if not terms or limit < 1:
            return []
        stmt, params = search.search_query(self._db.engine.dialect.name, terms, kind=kind, limit=min(limit, 50))
        rows = await self._db.read(lambda conn: conn.execute(stmt, params).all())
        return [Hit(doc_id=r[0], version=r[1], section_id=r[2], kind=r[3], title=r[4], text=r[5]) for r in rows]

    async def documents(self) -> list[StoredDocument]:
        """Every document's newest version with its sections, by id."""
        async with self._db.reader() as s, s.begin():
            return await documents_in(s)


async def documents_in(s: AsyncSession) -> list[StoredDocument]:
    """:meth:`Knowledge.documents` inside the caller's transaction (the sandbox export)."""
    docs = (await s.scalars(select(KnowledgeDocumentRow).order_by(KnowledgeDocumentRow.id))).all()
    sections = (
        await s.execute(
            select(KnowledgeSectionRow)
            .join(
                KnowledgeDocumentRow,
                (KnowledgeDocumentRow.id == KnowledgeSectionRow.doc_id)
                & (KnowledgeDocumentRow.version == KnowledgeSectionRow.version),
            )
            .order_by(KnowledgeSectionRow.doc_id, KnowledgeSectionRow.position)
        )
    ).scalars()
    by_doc: dict[str, list[Section]] = {}
    for sec in sections:
        by_doc.setdefault(sec.doc_id, []).append(Section(id=sec.section_id, text=sec.text))
    count = select(KnowledgeVersionRow.doc_id, func.count()).group_by(KnowledgeVersionRow.doc_id)
    versions: dict[str, int] = {doc_id: int(n) for doc_id, n in (await s.execute(count)).all()}
    return [
        StoredDocument(
            id=d.id,
            version=d.version,
            kind=d.kind,
            title=d.title,
            sections=tuple(by_doc.get(d.id, ())),
            versions=versions.get(d.id, 0),
        )  # fmt: skip
        for d in docs
    ]
