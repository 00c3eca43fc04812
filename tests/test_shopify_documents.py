"""Every operation signoff sends is a .graphql document of the package, valid against the
vendored Admin API 2026-10 schema; no GraphQL is assembled in code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from graphql import parse, validate

from shopify import documents

ROOT = Path(__file__).resolve().parent.parent
NAMES = documents.operation_names()


def test_the_package_has_the_operations_the_backend_sends() -> None:
    assert {"Customer", "CustomersByEmail", "Order", "OrdersByName", "CustomerOrders", "Return", "Job",
            "RefundCreate", "OrderCancel", "OrderUpdate", "ReturnRequest", "CustomerUpdate", "ShopCheck",
            "WebhookSubscriptionCreate", "ShopPolicies", "Pages"} <= set(NAMES)  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_each_document_validates_against_the_vendored_schema(name: str) -> None:
    assert [e.message for e in validate(documents.schema(), documents.document(name))] == []


def test_a_wrong_field_is_caught_by_the_same_check() -> None:
    bad = parse("query Bad($id: ID!) { order(id: $id) { nme } }")
    assert validate(documents.schema(), bad) != []


def test_the_refund_carries_the_idempotent_directive_with_the_key() -> None:
    text = documents.text("RefundCreate")
    assert re.search(r"refundCreate\(input: \$input\) @idempotent\(key: \$key\)", text)


def test_only_the_fragments_an_operation_uses_are_sent() -> None:
    text = documents.text("Job")
    assert "fragment" not in text
    order = documents.text("Order")
    assert "fragment OrderFields on Order" in order and "fragment CustomerFields" not in order


def test_an_unknown_operation_is_an_error() -> None:
    with pytest.raises(KeyError):
        documents.document("DropTables")


_GRAPHQL_IN_CODE = re.compile(r"\b(query|mutation|fragment)\s+[A-Za-z_]\w*\s*[({]|\{\s*[a-z]\w*\s*(\(|\{)")


def _strings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_no_graphql_is_assembled_in_code() -> None:
    offenders = [
        f"{p.relative_to(ROOT)}: {s[:60]!r}"
        for p in sorted((ROOT / "shopify").rglob("*.py")) + sorted((ROOT / "bot").rglob("*.py"))
        for s in _strings(p)
        if _GRAPHQL_IN_CODE.search(s)
    ]
    assert offenders == []


def test_the_check_catches_a_planted_query_string() -> None:
    assert _GRAPHQL_IN_CODE.search("query Order($id: ID!) { order(id: $id) { id } }")
    assert _GRAPHQL_IN_CODE.search("{ shop { name } }")
    assert not _GRAPHQL_IN_CODE.search('email:"a@b.c"')
