"""The ``.graphql`` documents signoff sends, read from the package and never assembled in code.

An operation file holds one operation; the fragments it spreads come from ``fragments.graphql``
and are added to it as parsed definitions (the AST), so the text sent is the file's operation
plus exactly the fragments it uses. ``schema()`` builds the vendored Admin API schema for the
tests and ``signoff shopify check``.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from importlib import resources

from graphql import (
    DocumentNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLEnumType,
    GraphQLSchema,
    OperationDefinitionNode,
    Visitor,
    build_client_schema,
    parse,
    print_ast,
    validate_schema,
    visit,
)

#: The Admin API version the documents are written and validated against.
SCHEMA_VERSION = "2026-10"
_OPS = resources.files("shopify").joinpath("operations")


def operation_names() -> list[str]:
    """Every operation the package has, by file name (without ``.graphql``)."""
    return sorted(
        p.name.removesuffix(".graphql")
        for p in _OPS.iterdir()
        if p.name.endswith(".graphql") and p.name != "fragments.graphql"
    )


@cache
def _fragments() -> dict[str, FragmentDefinitionNode]:
    doc = parse(_OPS.joinpath("fragments.graphql").read_text(encoding="utf-8"))
    return {d.name.value: d for d in doc.definitions if isinstance(d, FragmentDefinitionNode)}


class _Spreads(Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def enter_fragment_spread(self, node: FragmentSpreadNode, *_: object) -> None:
        self.names.add(node.name.value)


def _used(node: object) -> set[str]:
    spreads = _Spreads()
    visit(node, spreads)  # type: ignore[arg-type]
    return spreads.names


@cache
def document(name: str) -> DocumentNode:
    """The operation ``name`` with the fragments it uses (transitively), parsed."""
    if name not in operation_names():
        raise KeyError(f"no Shopify operation {name!r}")
    parsed = parse(_OPS.joinpath(f"{name}.graphql").read_text(encoding="utf-8"))
    ops = [d for d in parsed.definitions if isinstance(d, OperationDefinitionNode)]
    if len(ops) != 1 or ops[0].name is None or ops[0].name.value != name:
        raise ValueError(f"{name}.graphql must hold exactly one operation named {name}")
    fragments, wanted, seen = _fragments(), _used(ops[0]), set[str]()
    while wanted - seen:
        fragment = fragments[sorted(wanted - seen)[0]]
        seen.add(fragment.name.value)
        wanted |= _used(fragment)
    extra = tuple(fragments[n] for n in sorted(seen))
    return DocumentNode(definitions=(*parsed.definitions, *extra))


@cache
def text(name: str) -> str:
    """The text sent for operation ``name``."""
    return print_ast(document(name))


@cache
def schema() -> GraphQLSchema:
    """The vendored Admin API schema (introspection JSON, see ``schema/NOTICE.md``)."""
    raw = resources.files("shopify").joinpath(f"schema/admin_{SCHEMA_VERSION}.json.gz").read_bytes()
    data = json.loads(gzip.decompress(raw))
    built = build_client_schema(data["data"] if "data" in data else data)
    # Shopify's own schema breaks one rule graphql-core 3.3 added (a deprecated field that
    # implements a non-deprecated interface field). That is about the server's schema, not our
    # documents: accept exactly those and nothing else, so ``validate`` checks the documents.
    problems = [e.message for e in validate_schema(built) if "must not be deprecated" not in e.message]
    if problems:
        raise ValueError(f"the vendored schema is invalid: {problems[0]}")
    built._validation_errors = []  # noqa: SLF001 - see above
    return built


#: The access scopes the operations need (README "Connect your Shopify store", ``signoff shopify check``).
NEEDED_SCOPES = (
    "read_customers",
    "write_customers",
    "read_orders",
    "write_orders",
    "read_returns",
    "write_returns",
    "read_fulfillments",
    "read_legal_policies",
    "read_online_store_pages",
)


def webhook_topic(topic: str) -> str | None:
    """``orders/updated`` as the schema's ``WebhookSubscriptionTopic`` (``ORDERS_UPDATED``), if it has it."""
    enum = schema().get_type("WebhookSubscriptionTopic")
    name = topic.replace("/", "_").upper()
    return name if isinstance(enum, GraphQLEnumType) and name in enum.values else None
