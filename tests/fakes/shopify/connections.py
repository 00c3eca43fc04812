"""Relay connections as the Admin API pages them, and the search syntax of ``query:``
arguments (the subset the fake understands; anything else is refused, never ignored)."""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from graphql import GraphQLError

T = TypeVar("T")
MAX_PAGE = 250


class NotImplementedByFake(GraphQLError):
    """A valid request the fake does not answer: said plainly, so nobody is misled."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} is not implemented by the fake Shopify Admin API (tests/fakes/shopify)")


def cursor(position: int) -> str:
    """An opaque cursor for the item at ``position`` in the full, ordered list."""
    return base64.b64encode(f"fake-cursor:{position}".encode()).decode()


def _position(value: str) -> int:
    try:
        text = base64.b64decode(value.encode(), validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        text = ""
    if not text.startswith("fake-cursor:") or not text[12:].isdigit():
        raise GraphQLError(f"Invalid cursor for current pagination sort. {value!r}")
    return int(text[12:])


def page_window(count: int, args: dict[str, Any]) -> list[int]:
    """The positions a ``first/after/last/before`` window selects out of ``count`` items."""
    first, last = args.get("first"), args.get("last")
    if first is None and last is None:
        raise GraphQLError("you must provide one of first or last")
    for name, value in (("first", first), ("last", last)):
        if value is not None and not 0 <= value <= MAX_PAGE:
            raise GraphQLError(f"The value of {name} must be between 0 and {MAX_PAGE}")
    positions = list(range(count))
    if args.get("after") is not None:
        positions = [p for p in positions if p > _position(args["after"])]
    if args.get("before") is not None:
        positions = [p for p in positions if p < _position(args["before"])]
    if first is not None:
        positions = positions[:first]
    if last is not None:
        positions = positions[-last:] if last else []
    return positions


def connection(items: Sequence[T], view: Callable[[T], dict[str, Any]], args: dict[str, Any]) -> dict[str, Any]:
    """A ``…Connection`` over ``items`` (already in the API's order): edges, nodes, pageInfo."""
    ordered = list(reversed(items)) if args.get("reverse") else list(items)
    positions = page_window(len(ordered), args)
    nodes = [view(ordered[p]) for p in positions]
    return {
        "edges": [{"cursor": cursor(p), "node": n} for p, n in zip(positions, nodes, strict=True)],
        "nodes": nodes,
        "pageInfo": {
            "hasNextPage": bool(positions) and positions[-1] < len(ordered) - 1,
            "hasPreviousPage": bool(positions) and positions[0] > 0,
            "startCursor": cursor(positions[0]) if positions else None,
            "endCursor": cursor(positions[-1]) if positions else None,
        },
    }


@dataclass(frozen=True, kw_only=True)
class Term:
    """One ``field:value`` term of a search query (``op`` is ``:``, ``>``, ``>=``, ``<``, ``<=``)."""

    field: str
    op: str
    value: str


_TERM = re.compile(r"^(?P<field>[a-z_]+):(?P<op>>=|<=|>|<)?(?P<value>.+)$")


def search_terms(query: str | None, allowed: set[str], where: str) -> list[Term]:
    """The ``AND``-ed terms of ``query``; a field outside ``allowed`` or bare text is refused."""
    if not query:
        return []
    try:
        words = shlex.split(query)
    except ValueError as exc:
        raise GraphQLError(f"Invalid search query: {exc}") from None
    terms = []
    for word in words:
        if word.upper() == "AND":
            continue
        m = _TERM.match(word)
        if m is None or m["field"] not in allowed:
            raise NotImplementedByFake(f"The search term {word!r} in {where}(query:)")
        terms.append(Term(field=m["field"], op=m["op"] or ":", value=m["value"]))
    return terms


def compare(actual: Any, term: Term) -> bool:
    """Whether ``actual`` (a str, int or ISO time string) satisfies ``term``."""
    if actual is None:
        return False
    if term.op == ":":
        return str(actual).lower() == term.value.lower()
    left: Any = actual if isinstance(actual, int) and term.value.isdigit() else str(actual)
    right: Any = int(term.value) if isinstance(left, int) else _normal_time(term.value)
    return {">": left > right, ">=": left >= right, "<": left < right, "<=": left <= right}[term.op]


def _normal_time(value: str) -> str:
    """A time in a query written as the fake writes times (``…Z``), so strings compare in time order."""
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    if t.tzinfo is None:
        return value
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
