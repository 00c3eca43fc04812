"""Knowledge documents from files and from a shop's pages: Markdown or HTML in, sections out.

A file is one document. Its id is the front matter's ``id:`` or else the file name's slug; its
title is the front matter's ``title:`` or else its first heading; its kind is ``kind:``
(``policy`` or ``help``, default ``help``). Sections are split at headings, each named by its
heading's slug (``## Refund window`` → ``refund-window``; a repeated slug gets ``-2``); text
before the first heading is the section ``overview``; a heading with no text under it makes
no section. HTML becomes text through ``inscriptis`` (its layout kept: lists, tables), with
the headings it annotates as the split points.

Every error is a :class:`KnowledgeError` whose message is one line naming the file (or the
record) and what is wrong with it; nothing is read half-way.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import yaml

KnowledgeKind = Literal["policy", "help"]
KINDS: tuple[KnowledgeKind, ...] = ("policy", "help")
MARKDOWN = frozenset({".md", ".markdown"})
HTML = frozenset({".html", ".htm"})
#: A document's size cap (bytes of a file, characters of a record's body).
MAX_BYTES = 1_000_000
#: A section's text cap (the dataset's own limit for a section).
MAX_SECTION = 20_000
INTRO = "overview"
#: A document id: what an evidence id (``tools.schemas.EVIDENCE_ID_PATTERN``) can cite.
ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_FRONT_KEYS = frozenset({"id", "title", "kind"})
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


class KnowledgeError(Exception):
    """A document that cannot be imported; the message is one line naming it."""


@dataclass(frozen=True, kw_only=True)
class Section:
    """One citable passage of a document."""

    id: str
    text: str


@dataclass(frozen=True, kw_only=True)
class Document:
    """A document to import. ``version``: keep this exact version (the sandbox dataset's);
    ``None``: the next version when the content changed."""

    id: str
    title: str
    kind: KnowledgeKind
    sections: tuple[Section, ...]
    version: int | None = None


class HtmlSource(Protocol):
    """A page or policy as a shop hands it over (``shopify/pages.py``): id, title, HTML body, kind."""

    @property
    def doc_id(self) -> str:
        """The document id (``refund-policy``, a page's handle)."""
        ...

    @property
    def title(self) -> str:
        """The title people see."""
        ...

    @property
    def body_html(self) -> str:
        """The body as HTML."""
        ...

    @property
    def kind(self) -> str:
        """``policy`` or ``help``."""
        ...


def slug(text: str) -> str:
    """``Refund window (EU)`` → ``refund-window-eu``: lower-case ASCII words joined by ``-``, at most 64."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")[:64].strip("-")


def split_sections(pieces: Iterable[tuple[str | None, str]]) -> tuple[Section, ...]:
    """Sections from (heading or ``None`` for the text before the first, text) pieces."""
    out: list[Section] = []
    seen: set[str] = set()
    for n, (heading, body) in enumerate(pieces):
        text = body.strip()
        if not text:
            continue
        base = slug(heading) if heading is not None else INTRO
        base = base or f"section-{n + 1}"
        ident, k = base, 2
        while ident in seen:
            ident, k = f"{base[:60]}-{k}", k + 1
        seen.add(ident)
        if len(text) > MAX_SECTION:
            raise ValueError(f"section {ident!r} is longer than {MAX_SECTION} characters")
        out.append(Section(id=ident, text=text))
    return tuple(out)


def markdown_pieces(text: str) -> list[tuple[str | None, str]]:
    """(heading, text) pieces of Markdown, split at ATX headings outside fenced code."""
    pieces: list[tuple[str | None, list[str]]] = [(None, [])]
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        heading = None if fenced else atx_heading(line)
        if heading:
            pieces.append((heading, []))
        else:
            pieces[-1][1].append(line)
    return [(h, "\n".join(lines)) for h, lines in pieces]


def atx_heading(line: str) -> str | None:
    """The text of a Markdown ATX heading (``## Refund window ##``), or ``None``; string
    operations only, linear in the line (a regular expression here backtracked on long lines)."""
    indent = len(line) - len(line.lstrip(" "))
    rest = line[indent:]
    level = len(rest) - len(rest.lstrip("#"))
    if indent > 3 or not 1 <= level <= 6:
        return None
    body = rest[level:]
    if body and body[0] not in " \t":
        return None  # "#hashtag" is text, not a heading
    body = body.strip(" \t")
    closing = body.rstrip("#")
    if closing != body and (not closing or closing[-1] in " \t"):
        body = closing.rstrip(" \t")  # an optional closing run of #s after a space
    return body or None


def html_pieces(html: str) -> list[tuple[str | None, str]]:
    """(heading, text) pieces of HTML: inscriptis's text, split at the headings it annotates."""
    # Imported here: lxml under inscriptis costs every process's start ~0.15 s, and only imports need it.
    from inscriptis import get_annotated_text
    from inscriptis.model.config import ParserConfig

    headings = ParserConfig(annotation_rules={f"h{n}": ["heading"] for n in range(1, 7)})
    out = get_annotated_text(html, headings) if html.strip() else {}  # inscriptis: {} for no content
    text: str = out.get("text", "")
    pieces: list[tuple[str | None, str]] = []
    at, heading = 0, None
    for start, end, _label in sorted(out.get("label", [])):
        pieces.append((heading, text[at:start]))
        heading, at = " ".join(text[start:end].split()), end
    pieces.append((heading, text[at:]))
    return pieces


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    """The ``---`` YAML block at the top (only ``id``, ``title``, ``kind``), and the rest."""
    if not text.startswith("---\n") and not text.startswith("---\r\n"):
        return {}, text
    end = re.search(r"^---[ \t]*\r?$", text[4:], re.MULTILINE)
    if end is None:
        raise ValueError("front matter is not closed with ---")
    try:
        meta = yaml.safe_load(text[4 : 4 + end.start()]) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"front matter is not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(meta, dict):
        raise ValueError("front matter must be a mapping")
    unknown = sorted(str(k) for k in meta if k not in _FRONT_KEYS)
    if unknown:
        raise ValueError(f"unknown front matter keys: {', '.join(unknown)} (allowed: id, title, kind)")
    if any(not isinstance(v, str) for v in meta.values()):
        raise ValueError("front matter values must be text")
    return meta, text[4 + end.end() :]


def document(*, doc_id: str, title: str | None, kind: str, pieces: list[tuple[str | None, str]]) -> Document:
    """A checked :class:`Document` (``ValueError`` saying what is wrong)."""
    if not ID.fullmatch(doc_id):
        raise ValueError(f"id {doc_id!r} must be 1-64 lower-case letters, digits or '-' (evidence ids cite it)")
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} must be policy or help")
    title = " ".join((title or next((h for h, _ in pieces if h), "")).split())
    if not title:
        raise ValueError("no title: give a heading or a front matter title")
    if len(title) > 255:
        raise ValueError("the title is longer than 255 characters")
    sections = split_sections(pieces)
    if not sections:
        raise ValueError("no text to import")
    return Document(id=doc_id, title=title, kind=kind, sections=sections)  # type: ignore[arg-type]


def read_file(path: Path) -> Document:
    """The document in one Markdown or HTML file (:class:`KnowledgeError` naming it)."""
    try:
        if path.suffix.lower() not in MARKDOWN | HTML:
            raise ValueError("not a Markdown (.md) or HTML (.html) file")
        raw = path.read_bytes()
        if len(raw) > MAX_BYTES:
            raise ValueError(f"larger than {MAX_BYTES} bytes")
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ValueError("not UTF-8 text") from None
        meta, body = _front_matter(text)
        pieces = html_pieces(body) if path.suffix.lower() in HTML else markdown_pieces(body)
        doc_id = meta.get("id") or slug(path.stem)
        return document(doc_id=doc_id, title=meta.get("title"), kind=meta.get("kind", "help"), pieces=pieces)
    except (ValueError, OSError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise KnowledgeError(f"{path}: {reason}") from None


def _files(path: Path) -> Iterator[Path]:
    if path.is_dir():
        yield from sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in MARKDOWN | HTML)
    else:
        yield path


def read_paths(paths: Iterable[str | Path]) -> list[Document]:
    """Every document in ``paths`` (files, or directories searched for .md/.html), all or none."""
    docs: dict[str, Path] = {}
    out: list[Document] = []
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise KnowledgeError(f"{path}: no such file or directory")
        found = list(_files(path))
        if not found:
            raise KnowledgeError(f"{path}: no Markdown or HTML files in it")
        for file in found:
            doc = read_file(file)
            if doc.id in docs:
                raise KnowledgeError(f"{file}: document id {doc.id!r} is also {docs[doc.id]}'s")
            docs[doc.id] = file
            out.append(doc)
    return out


def from_html_sources(records: Iterable[HtmlSource]) -> list[Document]:
    """Documents from a shop's pages and policies (:class:`HtmlSource`), all or none."""
    out: list[Document] = []
    for r in records:
        try:
            if len(r.body_html) > MAX_BYTES:
                raise ValueError(f"larger than {MAX_BYTES} characters")
            out.append(document(doc_id=r.doc_id, title=r.title, kind=r.kind, pieces=html_pieces(r.body_html)))
        except ValueError as exc:
            raise KnowledgeError(f"{r.doc_id!r}: {exc}") from None
    return out
