"""The OpenAPI 3.1 document: served without auth, describes every registered route (and only
those), and its request schemas are the very ones the validator enforces."""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_openapi

from agent.llm.testing import ScriptedModel
from bot.api.openapi import OPERATIONS, SCHEMAS, document
from bot.server import make_web_app
from storage.db import Database
from tests.api_kit import app_of, client_for
from tests.support import seeded


def registered(web_app: web.Application) -> set[tuple[str, str]]:
    out = set()
    for route in web_app.router.routes():
        info = route.resource.get_info() if route.resource else {}
        path = info.get("path") or info.get("formatter")
        if route.method != "HEAD" and path:
            out.add((route.method.lower(), path))
    return out


def refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(refs(v) for v in node.values())) if node else found
    if isinstance(node, list):
        return set().union(*(refs(v) for v in node)) if node else set()
    return set()


async def test_every_api_route_is_documented_and_vice_versa(db: Database) -> None:
    h = await seeded(db, ScriptedModel([]))
    web_app = make_web_app(app_of(h))
    routes = registered(web_app)
    documented = {(op.method, op.path) for op in OPERATIONS}
    api_routes = {r for r in routes if r[1].startswith("/api/")}
    assert api_routes == {d for d in documented if d[1].startswith("/api/")}
    assert documented <= routes  # /healthz, /metrics and /email/inbound too
    doc = document()
    assert {(m, p) for p, ops in doc["paths"].items() for m in ops} == documented


def test_document_is_openapi_31_with_resolvable_refs_and_valid_schemas() -> None:
    doc = document()
    assert doc["openapi"].startswith("3.1")
    validate_openapi(doc)  # the OpenAPI 3.1 meta-schema
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": doc["components"]["securitySchemes"]["bearer"]["description"],
    }
    for ref in refs(doc):
        assert ref.startswith("#/")
        node: Any = doc
        for part in ref[2:].split("/"):
            node = node[part]
    for schema in SCHEMAS.values():
        Draft202012Validator.check_schema(schema)
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["operationId"] and "200" in op["responses"], (method, path)
            if "{id}" in path:
                assert any(p["in"] == "path" and p["name"] == "id" for p in op["parameters"])
            if path.startswith("/api/") and path != "/api/openapi.json":
                assert op["security"] == [{"bearer": []}]
                assert "401" in op["responses"]
    assert len({op["operationId"] for ops in doc["paths"].values() for op in ops.values()}) == len(OPERATIONS)


def test_request_schemas_are_strict() -> None:
    """Every request body schema forbids unknown fields and bounds its strings."""
    for name in ("ChatRequest", "ConfirmRequest", "ApproveRequest", "RejectRequest", "ApprovalsQuery"):
        schema = SCHEMAS[name]
        assert schema["additionalProperties"] is False, name
        for prop in schema["properties"].values():
            if prop.get("type") == "string" or "string" in prop.get("type", []):
                assert "maxLength" in prop or "pattern" in prop or "enum" in prop, (name, prop)
    assert SCHEMAS["ChatRequest"]["properties"]["message"]["maxLength"] == 4000


async def test_validator_uses_the_documented_schemas(db: Database) -> None:
    """One source of truth: the validators check exactly the documented component schemas."""
    h = await seeded(db, ScriptedModel([]))
    (state,) = [f.inner for f in app_of(h).faces if f.name == "api"]  # type: ignore[attr-defined]
    for name, validator in state.validators.items():
        documented = dict(validator.schema)
        documented.pop("$schema")
        assert documented == SCHEMAS[name]
    assert {o.request for o in OPERATIONS if o.request} | {o.query for o in OPERATIONS if o.query} <= set(
        state.validators
    )


async def test_openapi_is_served_without_auth(db: Database) -> None:
    h = await seeded(db, ScriptedModel([]))
    async with client_for(h) as client:
        r = await client.get("/api/openapi.json")
        assert r.status == 200 and r.content_type == "application/json"
        assert await r.json() == document()


def test_documented_error_codes_cover_statuses() -> None:
    codes = SCHEMAS["Error"]["properties"]["error"]["enum"]
    for code in (
        "bad_request",
        "unauthorized",
        "forbidden",
        "not_found",
        "conflict",
        "expired",
        "too_large",
        "unsupported_media_type",
        "invalid",
    ):
        assert code in codes
    assert all(re.fullmatch(r"[a-z_]+", c) for c in codes)
