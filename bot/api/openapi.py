"""The HTTP API's contract: request/response JSON Schemas and the OpenAPI 3.1 document.

The validator in ``bot.api`` checks request bodies against exactly these
schemas (Draft 2020-12), so the document and the behaviour cannot drift apart.
``tests/test_openapi.py`` checks that every route the server registers is
documented and every documented route exists.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from bot.api.auth import ID_PATTERN
from bot.web import STATUS

MAX_MESSAGE_CHARS = 4000
MAX_COMMENT_CHARS = 2000
MAX_VERSION = 2**31 - 1
APPROVAL_STATUSES = ["pending", "approved", "rejected", "expired", "superseded"]

_ID: dict[str, Any] = {"type": "string", "pattern": ID_PATTERN}
_NONBLANK = r"\S"
_OBJ = {"type": "object"}

#: Request schemas (validated) and response schemas (documented), by component name.
SCHEMAS: dict[str, dict[str, Any]] = {
    "ChatRequest": {
        "type": "object",
        "additionalProperties": False,
        "required": ["message"],
        "properties": {
            "conversationId": {
                "type": ["string", "null"],
                "pattern": ID_PATTERN,
                "description": "null (or absent) starts a new conversation.",
            },
            "message": {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_CHARS, "pattern": _NONBLANK},
            "customerId": {**_ID, "description": "Staff only: the account a new conversation is bound to."},
        },
    },
    "ConfirmRequest": {
        "type": "object",
        "additionalProperties": False,
        "properties": {},
        "description": "No fields; an empty body is the same as {}.",
    },
    "ApproveRequest": {
        "type": "object",
        "additionalProperties": False,
        "required": ["version"],
        "properties": {
            "version": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_VERSION,
                "description": "The approval's version you decided on (optimistic locking).",
            },
            "comment": {"type": "string", "maxLength": MAX_COMMENT_CHARS},
        },
    },
    "RejectRequest": {
        "type": "object",
        "additionalProperties": False,
        "required": ["version", "comment"],
        "properties": {
            "version": {"type": "integer", "minimum": 1, "maximum": MAX_VERSION},
            "comment": {"type": "string", "minLength": 1, "maxLength": MAX_COMMENT_CHARS, "pattern": _NONBLANK},
        },
    },
    "HandoffRequest": {
        "type": "object",
        "additionalProperties": False,
        "properties": {},
        "description": "No fields; an empty body is the same as {}.",
    },
    "HandoffResponse": {
        "type": "object",
        "required": ["handoff", "reply"],
        "properties": {
            "handoff": {
                "type": "object",
                "required": ["id", "state"],
                "properties": {
                    "id": {"type": "string"},
                    "state": {"enum": ["waiting", "taken", "returned", "closed"]},
                    "name": {"type": "string", "description": "The person who owns it, once taken."},
                },
            },
            "reply": {"type": "string", "description": "When a person will reply (from the support hours)."},
        },
    },
    "ApprovalsQuery": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "status": {"type": "string", "enum": APPROVAL_STATUSES},
            "limit": {"type": "string", "pattern": r"^(?:[1-9][0-9]?|1[0-9]{2}|200)$"},
        },
    },
    "Error": {
        "type": "object",
        "required": ["error", "message"],
        "properties": {"error": {"type": "string", "enum": sorted(STATUS)}, "message": {"type": "string"}},
    },
    "Pending": {
        "type": "object",
        "required": ["kind", "id", "summary"],
        "properties": {"kind": {"enum": ["confirmation", "approval"]}, "id": _ID, "summary": {"type": "string"}},
    },
    "ChatResponse": {
        "type": "object",
        "required": ["conversationId", "reply", "iterations", "inputTokens", "outputTokens", "pending"],
        "properties": {
            "conversationId": _ID,
            "reply": {"type": "string"},
            "iterations": {"type": "integer"},
            "inputTokens": {"type": "integer"},
            "outputTokens": {"type": "integer"},
            "pending": {"type": "array", "items": {"$ref": "#/components/schemas/Pending"}},
        },
    },
    "Confirmation": {
        "type": "object",
        "required": ["id", "status", "version", "tool", "summary", "conversationId"],
        "properties": {
            "id": _ID,
            "status": {"enum": ["pending", "confirmed", "declined", "superseded", "consumed"]},
            "version": {"type": "integer"},
            "tool": {"type": "string"},
            "arguments": {},
            "summary": {"type": "string"},
            "conversationId": _ID,
            "createdAt": {"type": "string", "format": "date-time"},
            "decidedAt": {"type": ["string", "null"], "format": "date-time"},
            "view": {
                "type": "object",
                "description": "The confirmation as every face shows it: open or not, and what came of it.",
                "required": ["open", "status", "awaitingApproval", "outcome"],
                "properties": {
                    "open": {"type": "boolean"},
                    "status": {"type": "string"},
                    "awaitingApproval": {"type": "boolean"},
                    "outcome": {"type": ["object", "null"], "description": "{kind, label, reference}"},
                },
            },
        },
    },
    "ConfirmResponse": {
        "type": "object",
        "required": ["confirmation", "result", "approval", "reply"],
        "properties": {
            "confirmation": {"$ref": "#/components/schemas/Confirmation"},
            "result": {
                "type": ["object", "null"],
                "description": "The action's result; {status: PENDING_APPROVAL, approvalId} when it waits.",
            },
            "approval": {"oneOf": [{"$ref": "#/components/schemas/Approval"}, {"type": "null"}]},
            "reply": {"type": ["string", "null"]},
        },
    },
    "Approval": {
        "type": "object",
        "required": ["id", "status", "version"],
        "properties": {
            "id": _ID,
            "status": {"enum": APPROVAL_STATUSES},
            "version": {"type": "integer"},
            "tool": {"type": "string"},
            "arguments": {},
            "summary": {"type": "string"},
            "customerId": {"type": ["string", "null"]},
            "requester": {"type": "string"},
            "requiredRole": {"type": "string"},
            "approvalsRequired": {"type": "integer"},
            "decisions": {"type": "array"},
            "rationale": _OBJ,
            "evidence": {"type": "array"},
            "result": {},
            "expiresAt": {"type": "string", "format": "date-time"},
            "view": {"$ref": "#/components/schemas/ApprovalView"},
        },
    },
    "ApprovalView": {
        "type": "object",
        "description": "Staff only: the approval as every face shows it now (open or not, figures, reason, outcome).",
        "required": ["state", "open", "amount", "ceiling", "aggregate", "reason", "reasonText", "outcome"],
        "properties": {
            "state": {"enum": ["open", "expired", "approved", "rejected", "superseded"]},
            "open": {"type": "boolean"},
            "amount": {"type": ["string", "null"], "description": "e.g. 189.00 USD"},
            "ceiling": {"type": ["string", "null"]},
            "aggregate": {"type": ["string", "null"]},
            "reason": {"type": ["string", "null"], "description": "the gate's routing reason"},
            "reasonText": {"type": ["string", "null"]},
            "outcome": {"type": ["object", "null"], "description": "{kind, label, reference}"},
        },
    },
    "ApprovalList": {
        "type": "object",
        "required": ["approvals"],
        "properties": {"approvals": {"type": "array", "items": {"$ref": "#/components/schemas/Approval"}}},
    },
    "DecideResponse": {
        "type": "object",
        "required": ["approval", "result"],
        "properties": {
            "approval": {"$ref": "#/components/schemas/Approval"},
            "result": {"type": ["object", "null"], "description": "e.g. {status: REFUNDED, ...}"},
        },
    },
    "RenderedMessage": {
        "type": "object",
        "required": ["seq", "role", "text", "tools"],
        "properties": {
            "seq": {"type": "integer"},
            "role": {"enum": ["user", "assistant", "event", "person"]},
            "text": {"type": "string"},
            "name": {"type": "string", "description": "person messages: who wrote it (a hand-off)."},
            "tools": {
                "type": "array",
                "items": {"type": "object", "properties": {"name": {"type": "string"}, "outcome": {"type": "string"}}},
            },
        },
    },
    "Conversation": {
        "type": "object",
        "required": ["id", "channel", "status", "customerId", "messages", "pending"],
        "properties": {
            "id": _ID,
            "channel": {"type": "string"},
            "status": {"type": "string"},
            "customerId": {"type": ["string", "null"]},
            "createdAt": {"type": "string"},
            "principal": _OBJ,
            "messages": {"type": "array", "items": {"$ref": "#/components/schemas/RenderedMessage"}},
            "pending": {"type": "array", "items": {"$ref": "#/components/schemas/Pending"}},
            "blocks": {"type": "array", "description": "Staff only: the raw content blocks."},
        },
    },
    "Health": {"type": "object", "properties": {"status": {"enum": ["ok"]}}},
    "EmailAccepted": {
        "type": "object",
        "required": ["status"],
        "properties": {
            "status": {"enum": ["processed", "duplicate"]},
            "conversationId": {"type": "string"},
            "replySent": {"type": "boolean"},
        },
    },
}


@dataclass(frozen=True, kw_only=True)
class Operation:
    """One documented route."""

    method: str
    path: str
    operation_id: str
    summary: str
    response: str
    request: str | None = None
    query: str | None = None
    roles: tuple[str, ...] = ("customer", "rep", "supervisor")
    errors: tuple[int, ...] = (400, 401, 403, 404, 413, 415, 422)
    bearer: bool = True
    #: Authenticated by the inbound-email HMAC headers instead of a bearer token.
    signed: bool = False
    content_type: str = "application/json"


_DECIDE_ERRORS = (400, 401, 403, 404, 409, 410, 413, 415, 422)

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        method="post",
        path="/api/chat",
        operation_id="chat",
        request="ChatRequest",
        response="ChatResponse",
        errors=(400, 401, 403, 404, 409, 413, 415, 422, 429),
        summary="Send a message; starts a conversation when conversationId is null. 429 (rate_limited): "
        "a per-customer limit of the policy (new conversations per hour, model tokens per day).",
    ),
    Operation(
        method="post",
        path="/api/confirmations/{id}/confirm",
        operation_id="confirm",
        request="ConfirmRequest",
        response="ConfirmResponse",
        errors=_DECIDE_ERRORS,
        summary="Confirm the exact action proposed to you (the conversation's acting principal).",
    ),
    Operation(
        method="post",
        path="/api/confirmations/{id}/decline",
        operation_id="decline",
        request="ConfirmRequest",
        response="ConfirmResponse",
        errors=_DECIDE_ERRORS,
        summary="Decline the action proposed to you; nothing is done.",
    ),
    Operation(
        method="get",
        path="/api/approvals",
        operation_id="listApprovals",
        query="ApprovalsQuery",
        response="ApprovalList",
        roles=("supervisor",),
        errors=(401, 403, 422),
        summary="Approvals by status (default pending), newest first.",
    ),
    Operation(
        method="get",
        path="/api/approvals/{id}",
        operation_id="getApproval",
        response="Approval",
        roles=("rep", "supervisor"),
        errors=(401, 403, 404),
        summary="One approval.",
    ),
    Operation(
        method="post",
        path="/api/approvals/{id}/approve",
        operation_id="approve",
        request="ApproveRequest",
        response="DecideResponse",
        roles=("supervisor",),
        errors=_DECIDE_ERRORS,
        summary="Approve at a version; the action runs after the last required approval.",
    ),
    Operation(
        method="post",
        path="/api/approvals/{id}/reject",
        operation_id="reject",
        request="RejectRequest",
        response="DecideResponse",
        roles=("supervisor",),
        errors=_DECIDE_ERRORS,
        summary="Reject at a version, with a comment.",
    ),
    Operation(
        method="get",
        path="/api/conversations/{id}",
        operation_id="getConversation",
        response="Conversation",
        errors=(401, 403, 404),
        summary="A conversation rendered for people (raw blocks for staff only).",
    ),
    Operation(
        method="post",
        path="/api/conversations/{id}/handoff",
        operation_id="talkToPerson",
        request="HandoffRequest",
        response="HandoffResponse",
        roles=("customer",),
        errors=(400, 401, 403, 404, 413, 415, 422),
        summary="Talk to a person: hands the conversation to the support team (Take over in Slack or "
        "Teams). While a person owns it, their replies appear in the conversation's messages "
        '(role "person", with their name) and the agent does not answer.',
    ),
    Operation(
        method="get",
        path="/api/openapi.json",
        operation_id="openapi",
        response="OpenAPI",
        bearer=False,
        roles=(),
        errors=(),
        summary="This document.",
    ),
    Operation(
        method="get",
        path="/healthz",
        operation_id="healthz",
        response="Health",
        bearer=False,
        roles=(),
        errors=(503,),
        summary="200 when the database answers.",
    ),
    Operation(
        method="get",
        path="/metrics",
        operation_id="metrics",
        response="Metrics",
        bearer=False,
        roles=(),
        errors=(404,),
        content_type="text/plain",
        summary="Prometheus text format.",
    ),
    Operation(
        method="post",
        path="/email/inbound",
        operation_id="emailInbound",
        response="EmailAccepted",
        bearer=False,
        signed=True,
        roles=(),
        errors=(400, 401, 403, 413, 415, 422, 503),
        summary="Inbound-parse webhook (JSON or multipart/form-data), HMAC-signed: "
        "X-Signoff-Signature: sha256=HEX of '<X-Signoff-Timestamp>.' + raw body.",
    ),
)


def validator_schema(name: str) -> dict[str, Any]:
    """A request schema as a standalone Draft 2020-12 document."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **SCHEMAS[name]}


def _response(op: Operation) -> dict[str, Any]:
    if op.response == "OpenAPI":
        return {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}
    if op.content_type == "text/plain":
        return {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}
    return {
        "description": "OK",
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{op.response}"}}},
    }


def _operation(op: Operation) -> dict[str, Any]:
    out: dict[str, Any] = {"operationId": op.operation_id, "summary": op.summary, "responses": {"200": _response(op)}}
    if op.roles:
        out["description"] = "Roles: " + ", ".join(op.roles) + "."
    out["security"] = [{"bearer": []}] if op.bearer else [{"emailSignature": []}] if op.signed else []
    params: list[dict[str, Any]] = []
    if "{id}" in op.path:
        params.append({"name": "id", "in": "path", "required": True, "schema": _ID})
    if op.query:
        for name, schema in SCHEMAS[op.query]["properties"].items():
            params.append({"name": name, "in": "query", "required": False, "schema": schema})
    if params:
        out["parameters"] = params
    if op.request:
        out["requestBody"] = {
            "required": op.request != "ConfirmRequest",
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{op.request}"}}},
        }
    for status in op.errors:
        out["responses"][str(status)] = {"$ref": f"#/components/responses/E{status}"}
    return out


def document(*, server_url: str | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 document for every route this server registers."""
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method] = _operation(op)
    statuses = sorted({s for op in OPERATIONS for s in op.errors})
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "signoff",
            "version": "1",
            "description": "Customer-support agent API. The model proposes; our code decides. "
            "Every error is {error, message}.",
        },
        "paths": paths,
        "components": {
            "schemas": copy.deepcopy(SCHEMAS),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "Claims: sub, role (customer|rep|supervisor), exp.",
                },
                "emailSignature": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-Signoff-Signature",
                    "description": "sha256=HEX(HMAC-SHA256(SIGNOFF_EMAIL_SECRET, "
                    "'<X-Signoff-Timestamp>.' + raw body)); the "
                    "timestamp must be within 5 minutes.",
                },
            },
            "responses": {
                f"E{s}": {
                    "description": f"HTTP {s}",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                }
                for s in statuses
            },
        },
        "security": [{"bearer": []}],
    }
    if server_url:
        doc["servers"] = [{"url": server_url}]
    return doc


__all__ = ["MAX_MESSAGE_CHARS", "OPERATIONS", "Operation", "SCHEMAS", "document", "validator_schema"]
