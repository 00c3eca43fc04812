"""Runs a checked operation against the fake shop with graphql-core: the real schema's
types, the fake's resolvers, strict about anything the fake does not implement."""

from __future__ import annotations

from typing import Any

from graphql import ExecutionResult, GraphQLResolveInfo, default_field_resolver, execute

from tests.fakes.shopify.connections import NotImplementedByFake
from tests.fakes.shopify.mutations import Mutations
from tests.fakes.shopify.queries import query_root
from tests.fakes.shopify.schema import Checked, admin_schema

_MUTATION_ROOT = "mutation-root"


def strict_resolver(source: Any, info: GraphQLResolveInfo, **args: Any) -> Any:
    """Read a field from a view dict (calling it when it takes arguments); a field the view
    does not carry is refused as not implemented rather than answered with a silent null."""
    if isinstance(source, Mutations):
        method = getattr(source, info.field_name, None)
        if method is None or info.field_name.startswith("_"):
            raise NotImplementedByFake(f"The mutation {info.field_name}")
        return method(info, **args)
    if isinstance(source, dict):
        if info.field_name not in source:
            raise NotImplementedByFake(f"{info.parent_type.name}.{info.field_name}")
        value = source[info.field_name]
        return value(info, **args) if callable(value) else value
    return default_field_resolver(source, info, **args)


def run(checked: Checked, mutations: Mutations, raw_variables: dict[str, Any]) -> ExecutionResult:
    """Execute ``checked`` (queries read the shop; mutations go through ``mutations``)."""
    is_mutation = checked.operation.operation.value == "mutation"
    root: Any = mutations if is_mutation else query_root(mutations.shop)
    result = execute(
        admin_schema(),
        checked.document,
        root_value=root,
        variable_values=raw_variables,
        operation_name=checked.operation.name.value if checked.operation.name else None,
        field_resolver=strict_resolver,
    )
    assert isinstance(result, ExecutionResult)  # no async resolvers: execution is synchronous
    return result
