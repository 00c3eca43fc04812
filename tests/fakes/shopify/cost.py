"""Shopify's calculated query cost and its leaky bucket (docs: "Shopify API rate limits").

Requested cost: a scalar or enum field 0, an object 1, a connection 2 plus its page size
(``first``/``last``) times the cost of what it selects, a mutation 10. The bucket holds
``maximum`` points and refills at ``restore_rate`` a second; an operation that costs more
than is available is refused with ``THROTTLED`` and changes nothing, one over the single-query
limit (1000) with ``MAX_COST_EXCEEDED``. Tests shrink the bucket or stop the clock to force it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLField,
    GraphQLObjectType,
    GraphQLSchema,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    get_named_type,
    is_leaf_type,
    value_from_ast,
)

from tests.fakes.shopify.schema import Checked

MAX_QUERY_COST = 1000
MUTATION_COST = 10


def requested_cost(schema: GraphQLSchema, checked: Checked) -> int:
    """The operation's requested cost, as Shopify computes it before running it."""
    op: OperationDefinitionNode = checked.operation
    root = schema.mutation_type if op.operation.value == "mutation" else schema.query_type
    assert root is not None
    fragments = {d.name.value: d for d in checked.document.definitions if isinstance(d, FragmentDefinitionNode)}
    walker = _Walker(schema, fragments, checked.variables)
    cost = walker.selections(op.selection_set, root)
    if op.operation.value == "mutation":
        cost += MUTATION_COST * len(op.selection_set.selections)
    return cost


def actual_cost(schema: GraphQLSchema, checked: Checked, data: dict[str, Any] | None) -> int:
    """The cost of what was returned: connections priced by the items they held, absent
    objects free (a mutation costs what it requested)."""
    if checked.operation.operation.value == "mutation":
        return requested_cost(schema, checked)
    fragments = {d.name.value: d for d in checked.document.definitions if isinstance(d, FragmentDefinitionNode)}
    walker = _Walker(schema, fragments, checked.variables)
    return walker.returned(checked.operation.selection_set, schema.query_type, data)


@dataclass
class _Walker:
    schema: GraphQLSchema
    fragments: dict[str, FragmentDefinitionNode]
    variables: dict[str, Any]

    def selections(self, selection_set: SelectionSetNode | None, parent: Any) -> int:
        if selection_set is None:
            return 0
        total = 0
        for sel in selection_set.selections:
            if isinstance(sel, FieldNode):
                total += self.field(sel, parent)
            elif isinstance(sel, InlineFragmentNode):
                inner = self.schema.get_type(sel.type_condition.name.value) if sel.type_condition else parent
                total += self.selections(sel.selection_set, inner)
            elif isinstance(sel, FragmentSpreadNode):
                frag = self.fragments[sel.name.value]
                total += self.selections(frag.selection_set, self.schema.get_type(frag.type_condition.name.value))
        return total

    def field(self, node: FieldNode, parent: Any) -> int:
        fields: dict[str, GraphQLField] = getattr(parent, "fields", {})
        definition = fields.get(node.name.value)
        if definition is None:  # __typename and introspection
            return 0
        named = get_named_type(definition.type)
        if is_leaf_type(named):
            return 0
        inner = self.selections(node.selection_set, named)
        if isinstance(named, GraphQLObjectType) and named.name.endswith("Connection"):
            return 2 + self._page_size(node, definition) * inner
        return 1 + inner

    def returned(self, selection_set: SelectionSetNode | None, parent: Any, value: Any) -> int:
        """Like :meth:`selections`, over the response ``value``."""
        if selection_set is None or value is None:
            return 0
        if isinstance(value, list):
            return max((self.returned(selection_set, parent, v) for v in value), default=0)
        total = 0
        for sel in selection_set.selections:
            if isinstance(sel, FieldNode):
                total += self._returned_field(sel, parent, value.get((sel.alias or sel.name).value))
            elif isinstance(sel, InlineFragmentNode):
                inner = self.schema.get_type(sel.type_condition.name.value) if sel.type_condition else parent
                total += self.returned(sel.selection_set, inner, value)
            elif isinstance(sel, FragmentSpreadNode):
                frag = self.fragments[sel.name.value]
                total += self.returned(frag.selection_set, self.schema.get_type(frag.type_condition.name.value), value)
        return total

    def _returned_field(self, node: FieldNode, parent: Any, child: Any) -> int:
        definition = getattr(parent, "fields", {}).get(node.name.value)
        if definition is None or child is None:
            return 0
        named = get_named_type(definition.type)
        if is_leaf_type(named):
            return 0
        if isinstance(named, GraphQLObjectType) and named.name.endswith("Connection"):
            count = max(len(child.get("edges") or []), len(child.get("nodes") or []))
            return 2 + count * self.selections(node.selection_set, named)
        return 1 + self.returned(node.selection_set, named, child)

    def _page_size(self, node: FieldNode, definition: GraphQLField) -> int:
        for arg in node.arguments or ():
            if arg.name.value in ("first", "last"):
                value = value_from_ast(arg.value, definition.args[arg.name.value].type, self.variables)
                if isinstance(value, int):
                    return max(value, 1)
        return 1


@dataclass
class Bucket:
    """The shop's cost bucket (a Standard plan's: 2000 points, 100 a second)."""

    maximum: float = 2000.0
    restore_rate: float = 100.0
    clock: Callable[[], float] = time.monotonic
    available: float = field(default=-1.0)
    _at: float = 0.0

    def __post_init__(self) -> None:
        if self.available < 0:
            self.available = self.maximum
        self._at = self.clock()

    def refill(self) -> float:
        """Top up for the time passed; the points available now."""
        now = self.clock()
        self.available = min(self.maximum, self.available + (now - self._at) * self.restore_rate)
        self._at = now
        return self.available

    def take(self, cost: int) -> bool:
        """Spend ``cost`` if it is available (False: throttled, nothing spent)."""
        if cost > self.refill():
            return False
        self.available -= cost
        return True

    def give_back(self, points: int) -> None:
        """Return the part of the requested cost the operation did not use."""
        self.available = min(self.maximum, self.available + points)

    def status(self) -> dict[str, Any]:
        """``throttleStatus`` as the API reports it."""
        return {
            "maximumAvailable": self.maximum,
            "currentlyAvailable": int(self.available),
            "restoreRate": self.restore_rate,
        }
