"""The HTTP JSON API's routes: parse → authorize → call the runtime → render.

Nothing here decides: confirmations go to ``Runtime.confirm``, approvals to
the one decision function (``Runtime.decide``). A request is fully validated
(bearer token, JSON Schema, ids) before anything runs, so a rejected request
changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from jsonschema import Draft202012Validator

from agent import queries
from agent.face_port import FacePort
from agent.outcomes import TurnResult
from agent.runtime import ConfirmResult
from agent.views import ApprovalView, ConfirmationView, OutcomeView, approval_view, confirmation_view
from bot.api import wording as say
from bot.api.auth import ID_PATTERN, Authenticator, Caller
from bot.api.openapi import SCHEMAS, document, validator_schema
from bot.web import ApiError, json_ok, jsonable, parse_json, read_limited, validate
from storage.records import Approval, Confirmation
from tools.backend import CommerceBackend
from tools.context import Principal

#: Largest API request body, in bytes.
MAX_BODY = 64 * 1024
_ID = re.compile(ID_PATTERN)
_JSON_TYPES = ("application/json",)


@dataclass(frozen=True, kw_only=True)
class ApiState:
    """What the handlers share: the port, the shop, the authenticator, the request validators."""

    port: FacePort
    backend: CommerceBackend
    auth: Authenticator
    validators: dict[str, Draft202012Validator]


def make_state(port: FacePort, backend: CommerceBackend, auth: Authenticator) -> ApiState:
    names = [n for n in SCHEMAS if n.endswith(("Request", "Query"))]
    validators = {n: Draft202012Validator(validator_schema(n)) for n in names}
    return ApiState(port=port, backend=backend, auth=auth, validators=validators)


Handler = Callable[[ApiState, web.Request], Awaitable[web.StreamResponse]]


def routes(st: ApiState) -> list[web.RouteDef]:
    """Every ``/api`` route over ``st`` (``bot.api.openapi.OPERATIONS`` documents the same set)."""

    def on(handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await handler(st, request)

        return handle

    return [
        web.get("/api/openapi.json", on(openapi_json)),
        web.post("/api/chat", on(chat)),
        web.post("/api/confirmations/{id}/confirm", on(confirm)),
        web.post("/api/confirmations/{id}/decline", on(decline)),
        web.get("/api/approvals", on(list_approvals)),
        web.get("/api/approvals/{id}", on(get_approval)),
        web.post("/api/approvals/{id}/approve", on(approve)),
        web.post("/api/approvals/{id}/reject", on(reject)),
        web.get("/api/conversations/{id}", on(get_conversation)),
        web.post("/api/conversations/{id}/handoff", on(talk_to_person)),
    ]


# -- handlers ------------------------------------------------------------------------------


async def openapi_json(st: ApiState, request: web.Request) -> web.Response:
    """The OpenAPI 3.1 document (no auth)."""
    return json_ok(document())


async def chat(st: ApiState, request: web.Request) -> web.Response:
    caller = await authenticate(st, request)
    body = await read_json(st, request, "ChatRequest")
    principal, conversation_id = await _bind(st, caller, body)
    result = await st.port.chat(
        principal=principal, channel="api", message=body["message"], conversation_id=conversation_id
    )
    return json_ok(render_turn(result))


async def confirm(st: ApiState, request: web.Request) -> web.Response:
    return await _answer(st, request, accept=True)


async def decline(st: ApiState, request: web.Request) -> web.Response:
    return await _answer(st, request, accept=False)


async def list_approvals(st: ApiState, request: web.Request) -> web.Response:
    caller = await authenticate(st, request)
    query = _query(st, request, "ApprovalsQuery")
    if caller.role != "supervisor":
        raise ApiError("forbidden", say.SUPERVISOR_ONLY)
    approvals = await st.port.approvals(status=query.get("status", "pending"), limit=int(query.get("limit", "100")))
    return json_ok({"approvals": [staff_approval(st, a) for a in approvals]})


async def get_approval(st: ApiState, request: web.Request) -> web.Response:
    caller = await authenticate(st, request)
    approval_id = path_id(request, say.NO_SUCH_APPROVAL)
    if not caller.is_staff:
        raise ApiError("forbidden", say.STAFF_ONLY)
    approval = await st.port.approval(approval_id)
    if approval is None:
        raise ApiError("not_found", say.NO_SUCH_APPROVAL)
    return json_ok(staff_approval(st, approval))


async def approve(st: ApiState, request: web.Request) -> web.Response:
    return await _decide(st, request, "approve", "ApproveRequest")


async def reject(st: ApiState, request: web.Request) -> web.Response:
    return await _decide(st, request, "reject", "RejectRequest")


async def get_conversation(st: ApiState, request: web.Request) -> web.Response:
    caller = await authenticate(st, request)
    conversation_id = path_id(request, say.NO_SUCH_CONVERSATION)
    view = await st.port.conversation_view(caller.principal, conversation_id)
    if view is None:
        raise ApiError("not_found", say.NO_SUCH_CONVERSATION)
    return json_ok(render_conversation(view, staff=caller.is_staff))


async def talk_to_person(st: ApiState, request: web.Request) -> web.Response:
    """The customer asks for a person: the hand-off opens (or the open one is returned)."""
    caller = await authenticate(st, request)
    conversation_id = path_id(request, say.NO_SUCH_CONVERSATION)
    await read_json(st, request, "HandoffRequest", optional=True)
    conv = await st.port.visible_conversation(caller.principal, conversation_id)
    if conv is None:
        raise ApiError("not_found", say.NO_SUCH_CONVERSATION)
    if caller.is_staff:
        raise ApiError("forbidden", say.CUSTOMERS_ONLY)
    h, told = await st.port.handoffs.ask_for_person(conv, by=caller.principal.key)
    handoff = {"id": h.id, "state": h.state, **({"name": h.owner_name} if h.state == "taken" and h.owner_name else {})}
    return json_ok({"handoff": handoff, "reply": told})


# -- the steps the handlers share ---------------------------------------------------------


async def _answer(st: ApiState, request: web.Request, *, accept: bool) -> web.Response:
    caller = await authenticate(st, request)
    confirmation_id = path_id(request, say.NO_SUCH_CONFIRMATION)
    await read_json(st, request, "ConfirmRequest", optional=True)
    conf = await st.port.confirmation(confirmation_id)
    if conf is None or await st.port.visible_conversation(caller.principal, conf.conversation_id) is None:
        raise ApiError("not_found", say.NO_SUCH_CONFIRMATION)  # someone else's looks exactly like a missing one
    result = await st.port.confirm(confirmation_id, actor=caller.principal, accept=accept, via="api")
    body = render_confirm(result, staff=caller.is_staff)
    shown = confirmation_view(result.confirmation, tool=st.port.tool(result.confirmation.tool))
    body["confirmation"]["view"] = confirmation_view_json(shown)
    if caller.is_staff and result.approval is not None:
        body["approval"] = staff_approval(st, result.approval)
    return json_ok(body)


async def _decide(st: ApiState, request: web.Request, decision: str, schema: str) -> web.Response:
    caller = await authenticate(st, request)
    approval_id = path_id(request, say.NO_SUCH_APPROVAL)
    body = await read_json(st, request, schema)
    if not caller.is_staff:  # customers learn nothing about approvals, not even that one exists
        raise ApiError("forbidden", say.SUPERVISOR_ONLY)
    decided = await st.port.decide(
        approval_id,
        expected_version=int(body["version"]),
        decision=decision,
        actor=caller.principal,
        comment=body.get("comment"),
        via={"surface": "api"},
    )
    return json_ok({"approval": staff_approval(st, decided.approval), "result": jsonable(decided.result)})


async def _bind(st: ApiState, caller: Caller, body: dict[str, Any]) -> tuple[Principal, str | None]:
    """The principal a chat runs as: the token's identity, bound to one account."""
    conversation_id, customer_id = body.get("conversationId"), body.get("customerId")
    if not caller.is_staff:
        if customer_id is not None and customer_id != caller.principal.customer_id:
            raise ApiError("forbidden", say.CUSTOMER_ID_STAFF_ONLY)
        return caller.principal, conversation_id
    me = caller.principal
    if conversation_id is not None:
        conv = await st.port.visible_conversation(me, conversation_id)
        if conv is None:
            raise ApiError("not_found", say.NO_SUCH_CONVERSATION)
        if customer_id is not None and customer_id != conv.customer_id:
            raise ApiError("invalid", say.CUSTOMER_ID_MISMATCH)
        return Principal(kind=me.kind, id=me.id, customer_id=conv.customer_id), conversation_id
    customer_id = customer_id or caller.default_customer
    if customer_id is None:
        raise ApiError("invalid", say.CUSTOMER_ID_REQUIRED)
    if await st.backend.get_customer(customer_id) is None:
        raise ApiError("not_found", say.NO_SUCH_CUSTOMER)
    return Principal(kind=me.kind, id=me.id, customer_id=customer_id), None


async def authenticate(st: ApiState, request: web.Request) -> Caller:
    return await st.auth.authenticate(request.headers.get("Authorization"))


def path_id(request: web.Request, missing: str) -> str:
    """The ``{id}`` path segment; an id that cannot exist is simply not found."""
    value = request.match_info.get("id", "")
    if not _ID.match(value):
        raise ApiError("not_found", missing)
    return value


# -- bodies -------------------------------------------------------------------------------


async def read_json(st: ApiState, request: web.Request, schema: str, *, optional: bool = False) -> dict[str, Any]:
    """Read, parse and validate a JSON body against ``bot.api.openapi.SCHEMAS[schema]``."""
    raw = await read_limited(request, MAX_BODY)
    if not raw.strip():
        if optional:
            return {}
        raise ApiError("bad_request", say.MALFORMED_JSON)
    if request.content_type not in _JSON_TYPES:
        raise ApiError("unsupported_media_type", say.WRONG_CONTENT_TYPE)
    data = parse_json(raw)
    validate(st.validators[schema], data)
    return data  # type: ignore[no-any-return]


def _query(st: ApiState, request: web.Request, schema: str) -> dict[str, str]:
    query = request.rel_url.query
    if len(set(query.keys())) != len(query):
        raise ApiError("invalid", "query: a parameter is repeated")
    data = dict(query)
    validate(st.validators[schema], data)
    return data


# -- rendering ----------------------------------------------------------------------------


def staff_approval(st: ApiState, a: Approval) -> dict[str, Any]:
    """The whole record, and ``view``: the approval as every face shows it now."""
    port = st.port
    return {**a.as_public(), "view": approval_view_json(approval_view(a, tool=port.tool(a.tool), now=port.clock()))}


def confirmation_view_json(v: ConfirmationView) -> dict[str, Any]:
    """The API's rendering of :class:`ConfirmationView`, as the cards show it: open or not, and
    what came of it."""
    return {
        "open": v.open,
        "status": v.status,
        "awaitingApproval": v.awaiting_approval,
        "outcome": _outcome_json(v.outcome),
    }


def _outcome_json(outcome: OutcomeView | None) -> dict[str, Any] | None:
    if outcome is None:
        return None
    return {"kind": outcome.kind, "label": outcome.label, "reference": outcome.reference}


def approval_view_json(v: ApprovalView) -> dict[str, Any]:
    """The API's rendering of :class:`ApprovalView` (Slack's and Teams' cards render the same
    view): open or not, its state, the figures by the one money formatter, the routing reason,
    the outcome."""
    return {
        "state": v.state,
        "open": v.open,
        "amount": v.amount,
        "ceiling": v.ceiling,
        "aggregate": v.aggregate,
        "reason": v.reason,
        "reasonText": v.reason_text,
        "outcome": _outcome_json(v.outcome),
    }


def render_turn(r: TurnResult) -> dict[str, Any]:
    return {
        "conversationId": r.conversation_id,
        "reply": r.reply,
        "iterations": r.iterations,
        "inputTokens": r.input_tokens,
        "outputTokens": r.output_tokens,
        "pending": [{"kind": p.kind, "id": p.id, "summary": p.summary} for p in r.pending],
    }


def render_confirmation(c: Confirmation) -> dict[str, Any]:
    return {
        "id": c.id,
        "status": c.status,
        "version": c.version,
        "tool": c.tool,
        "arguments": c.arguments,
        "summary": c.summary,
        "conversationId": c.conversation_id,
        "createdAt": c.created_at.isoformat(),
        "decidedAt": c.decided_at.isoformat() if c.decided_at else None,
    }


def render_approval(a: Approval, *, staff: bool) -> dict[str, Any]:
    """Staff see everything; the customer sees what is pending and its outcome, not the review file."""
    if staff:
        return a.as_public()
    return {
        "id": a.id,
        "status": a.status,
        "version": a.version,
        "tool": a.tool,
        "summary": a.summary,
        "result": a.result,
        "expiresAt": a.expires_at.isoformat(),
        "createdAt": a.created_at.isoformat(),
    }


def render_confirm(r: ConfirmResult, *, staff: bool) -> dict[str, Any]:
    result = jsonable(r.result)
    if result is None and r.approval is not None and r.approval.status == "pending":
        result = {"status": "PENDING_APPROVAL", "approvalId": r.approval.id}
    return {
        "confirmation": render_confirmation(r.confirmation),
        "result": result,
        "approval": render_approval(r.approval, staff=staff) if r.approval else None,
        "reply": r.reply,
    }


def render_conversation(view: queries.ConversationView, *, staff: bool) -> dict[str, Any]:
    c = view.conversation
    pending = [{"kind": "confirmation", "id": x.id, "summary": x.summary} for x in view.pending_confirmations]
    pending += [{"kind": "approval", "id": x.id, "summary": x.summary} for x in view.pending_approvals]
    out: dict[str, Any] = {
        "id": c.id,
        "channel": c.channel,
        "status": c.status,
        "customerId": c.customer_id,
        "createdAt": c.created_at.isoformat(),
        "principal": {"kind": c.principal_kind, "id": c.principal_id},
        "messages": [
            {
                "seq": m.seq,
                "role": m.role,
                "text": m.text,
                "tools": [{"name": t.name, "outcome": t.outcome} for t in m.tools],
                **({"name": m.name} if m.name else {}),
            }
            for m in view.messages
        ],
        "pending": pending,
    }
    if staff:
        out["blocks"] = [{"seq": m.seq, "role": m.role, "content": m.content} for m in view.history]
    return out


__all__ = ["MAX_BODY", "ApiState", "make_state", "read_limited", "routes"]
