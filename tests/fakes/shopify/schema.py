"""The real Admin API schema (vendored introspection, ``shopify/schema/``) and the checks
every incoming operation goes through: parse, validate, coerce variables."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, cast

from graphql import (
    DocumentNode,
    GraphQLError,
    GraphQLSchema,
    OperationDefinitionNode,
    build_client_schema,
    get_operation_ast,
    parse,
    validate,
)
from graphql.execution.values import get_variable_values

API_VERSION = "2026-10"
SCHEMA_PATH = Path(__file__).resolve().parents[3] / "shopify" / "schema" / f"admin_{API_VERSION}.json.gz"


@cache
def admin_schema() -> GraphQLSchema:
    """The Admin API 2026-10 schema, built once per process from the vendored introspection."""
    with gzip.open(SCHEMA_PATH, "rt", encoding="utf-8") as f:
        schema = build_client_schema(json.load(f)["data"])
    # graphql-core 3.3 checks that an implementation deprecates a field only where its interface
    # does; Shopify's real schema breaks that rule in six places (Node.id on ChannelDefinition, …).
    # It is the service's schema, not ours to fix: mark it checked so documents validate against it.
    schema._validation_errors = []
    return schema


@dataclass(frozen=True, kw_only=True)
class OperationRecord:
    """One operation as the fake received it: what it was and whether the schema accepted it."""

    name: str | None
    kind: str  # "query" | "mutation" | "subscription" | "" (unparseable)
    query: str
    variables: dict[str, Any]
    errors: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        """True when the operation parsed, validated and its variables coerced."""
        return not self.errors


@dataclass(frozen=True, kw_only=True)
class Checked:
    """An operation that passed every check, ready to execute."""

    document: DocumentNode
    operation: OperationDefinitionNode
    variables: dict[str, Any] = field(default_factory=dict)  # coerced


def check_operation(
    query: Any, variables: Any, operation_name: Any
) -> tuple[Checked | None, list[dict[str, Any]], OperationRecord]:
    """Parse, validate and coerce as the real API does; errors come back in its shape."""
    raw_vars = variables if isinstance(variables, dict) else {}
    name = operation_name if isinstance(operation_name, str) else None
    errors: list[GraphQLError] = []
    checked: Checked | None = None
    kind = ""
    if not isinstance(query, str) or not query.strip():
        errors = [GraphQLError("Parameter 'query' is missing or empty")]
    elif variables is not None and not isinstance(variables, dict):
        errors = [GraphQLError("Parameter 'variables' must be a JSON object")]
    else:
        checked, errors, kind, name = _check(query, raw_vars, name)
    record = OperationRecord(
        name=name,
        kind=kind,
        query=query if isinstance(query, str) else "",
        variables=raw_vars,
        errors=tuple(e.message for e in errors),
    )
    return checked, [dict(e.formatted) for e in errors], record


@lru_cache(maxsize=512)
def _validated(query: str) -> tuple[DocumentNode | None, tuple[GraphQLError, ...]]:
    """``query`` parsed and validated against the schema (a document's verdict depends on its
    text alone, so the same document sent again is not validated again)."""
    try:
        document = parse(query)
    except GraphQLError as exc:
        return None, (exc,)
    return document, tuple(validate(admin_schema(), document))


def _check(
    query: str, variables: dict[str, Any], name: str | None
) -> tuple[Checked | None, list[GraphQLError], str, str | None]:
    document, problems = _validated(query)
    if document is None:
        return None, list(problems), "", name
    schema = admin_schema()
    operation = get_operation_ast(document, name)
    kind = operation.operation.value if operation is not None else ""
    if operation is not None and operation.name is not None:
        name = operation.name.value
    if problems:
        return None, list(problems), kind, name
    if operation is None:
        message = f"Unknown operation named '{name}'." if name else "An operation name is required"
        return None, [GraphQLError(message)], kind, name
    coerced = get_variable_values(schema, operation.variable_definitions or (), variables)
    if isinstance(coerced, list):
        return None, coerced, kind, name
    # graphql-core 3.3 wraps the coerced values (``.coerced``); 3.2 returns the dict itself.
    values = cast(dict[str, Any], getattr(coerced, "coerced", coerced))
    return Checked(document=document, operation=operation, variables=dict(values)), [], kind, name
