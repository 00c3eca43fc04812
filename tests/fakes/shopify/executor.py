"""Runs a checked operation against the fake shop with graphql-core: the real schema's
types, the fake's resolvers, strict about anything the fake does not implement."""

from __future__ import annotations

from typing import Any

from graphql import ExecutionResult, GraphQLError, GraphQLResolveInfo, default_field_resolver, execute

from tests.fakes.shopify.connections import NotImplementedByFake
from tests.fakes.shopify.mutations import Mutations
from tests.fakes.shopify.queries import query_root
from tests.fakes.shopify.schema import Checked, admin_schema
from tests.fakes.shopify.state import Shop

#: The access scope each root field needs (a write scope implies its read scope).
REQUIRED_SCOPES = {
    "customer": "read_customers",
    "customers": "read_customers",
    "order": "read_orders",
    "orders": "read_orders",
    "refund": "read_orders",
    "return": "read_returns",
    "pages": "read_online_store_pages",
    "refundCreate": "write_orders",
    "orderCancel": "write_orders",
    "orderUpdate": "write_orders",
    "customerUpdate": "write_customers",
    "returnRequest": "write_returns",
    "returnCreate": "write_returns",
    "draftOrderCreate": "write_draft_orders",
}


def check_access(field_name: str, scopes: tuple[str, ...]) -> None:
    """Refuse a root field the app's scopes do not cover, as the API words it."""
    needed = REQUIRED_SCOPES.get(field_name)
    if needed is None or needed in scopes or needed.replace("read_", "write_", 1) in scopes:
        return
    raise GraphQLError(
        f"Access denied for {field_name} field. Required access: `{needed}` access scope.",
        extensions={"code": "ACCESS_DENIED", "requiredAccess": f"`{needed}` access scope."},
    )


def strict_resolver(source: Any, info: GraphQLResolveInfo, **args: Any) -> Any:
    """Read a field from a view dict (calling it when it takes arguments); a field the view
    does not carry is refused as not implemented rather than answered with a silent null."""
    if info.parent_type in (info.schema.query_type, info.schema.mutation_type):
        check_access(info.field_name, _shop_of(source).scopes)
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


def _shop_of(root: Any) -> Shop:
    return root.shop if isinstance(root, Mutations) else root["__shop__"]


def run(checked: Checked, mutations: Mutations, raw_variables: dict[str, Any]) -> ExecutionResult:
    """Execute ``checked`` (queries read the shop; mutations go through ``mutations``)."""
    is_mutation = checked.operation.operation.value == "mutation"
    root: Any = mutations if is_mutation else query_root(mutations.shop, mutations.clock())
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
