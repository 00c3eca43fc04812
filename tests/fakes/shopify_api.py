"""A strict fake of the Shopify GraphQL Admin API, version 2026-10 (issue 21).

``async with FakeShopifyAPI(seed_shop(dataset)) as shopify:`` then point the client at
``shopify.base_url`` (``SIGNOFF_SHOPIFY_ADMIN_URL``). Routes, as the service:

* ``POST /admin/oauth/access_token`` — the client credentials grant (form or JSON
  ``grant_type=client_credentials``, ``client_id``, ``client_secret``) → ``{"access_token",
  "scope", "expires_in": 86399}``; ``token_requests`` counts them.
* ``POST /admin/api/2026-10/graphql.json`` — ``X-Shopify-Access-Token`` required (else 401);
  any other version is 404. Every operation is parsed, validated against the real schema
  and its variables coerced (``operations`` records each; ``invalid_operations`` lists the
  ones the schema refused), costed against the bucket (``THROTTLED``), then executed over
  the in-memory shop. Each answer carries ``extensions.cost``.

Faults (:class:`Fault`) make the shop slow, fail before it applies an operation, or fail
after (a 502 for a refund that happened). The parts live in ``tests/fakes/shopify/``;
``python -m tests.fakes.shopify_api --port P`` serves the seeded demo shop from another process
(``tests.fakes.shopify.process.fake_process`` starts it for a test).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from graphql import FieldNode, OperationDefinitionNode, parse

from tests.fakes import FakeServer, RecordedRequest
from tests.fakes.shopify import admin, control
from tests.fakes.shopify.cost import MAX_QUERY_COST, Bucket, actual_cost, requested_cost
from tests.fakes.shopify.executor import run
from tests.fakes.shopify.mutations import Mutations, keys_in
from tests.fakes.shopify.schema import API_VERSION, Checked, OperationRecord, admin_schema, check_operation
from tests.fakes.shopify.state import Shop
from tests.fakes.shopify.webhooks import Webhook, compliance_webhook, deliver

#: Every operation a fake (not opened with ``allow_invalid``) refused in this process, in order:
#: ``tests.fakes.plugin`` fails the test during which one was refused.
REFUSED: list[OperationRecord] = []
#: A file the fake in another process (``python -m tests.fakes.shopify_api``) appends the
#: operations it refused to, one JSON line each (the plugin sets it for the whole test session).
REFUSED_FILE_ENV = "SIGNOFF_FAKE_SHOPIFY_REFUSED"
TOKEN_LIFETIME_S = 86399
INVALID_TOKEN = "[API] Invalid API key or access token (unrecognized login or wrong password)"
#: The access scopes a Dev Dashboard app for signoff is granted in the fake by default (a test
#: passes ``scopes=`` to see what a narrower grant is refused: ``ACCESS_DENIED``, and without
#: ``read_all_orders`` only the last 60 days of orders).
DEFAULT_SCOPES = (
    "read_customers",
    "write_customers",
    "read_orders",
    "write_orders",
    "read_all_orders",
    "read_returns",
    "write_returns",
    "read_fulfillments",
    "read_draft_orders",
    "write_draft_orders",
    "read_online_store_pages",
    "read_legal_policies",
)


@dataclass(kw_only=True)
class Fault:
    """A failure to inject into the next ``times`` operations that touch ``match`` (a root
    field such as ``refundCreate``, or an operation name).

    ``status`` answers that HTTP status — before anything is applied, or with
    ``after_apply=True`` after the shop applied it (the ambiguous 5xx). ``delay_s`` and
    ``hold`` (an event the test sets) make the shop slow; ``arrived`` is set when a
    matching operation has come in, so a test can act while it is in flight.
    """

    match: str
    status: int | None = None
    after_apply: bool = False
    delay_s: float = 0.0
    hold: asyncio.Event | None = None
    times: int = 1
    arrived: asyncio.Event = field(default_factory=asyncio.Event)


class FakeShopifyAPI(FakeServer):
    """The fake Admin API over one in-memory shop (see the module docstring)."""

    def __init__(
        self,
        shop: Shop | None = None,
        *,
        client_id: str = "fake-client-id",
        client_secret: str = "fake-client-secret",
        access_token: str | None = None,
        scopes: tuple[str, ...] = DEFAULT_SCOPES,
        bucket: Bucket | None = None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        allow_invalid: bool = False,
    ) -> None:
        super().__init__()
        self.allow_invalid = allow_invalid
        self.shop = shop or Shop()
        self.shop.scopes = scopes
        self.client_id, self.client_secret = client_id, client_secret
        self.clock = clock
        self.bucket = bucket or Bucket(clock=clock)
        self._now = now
        self.pinned: datetime | None = None
        self.mutations = Mutations(shop=self.shop, clock=self.now)
        self.tokens: dict[str, float] = {}  # token -> expiry on ``clock``
        if access_token is not None:
            self.tokens[access_token] = float("inf")
        self.token_requests = 0
        self.operations: list[OperationRecord] = []
        self.faults: list[Fault] = []
        self.version = API_VERSION
        admin_schema()  # build the schema now, not inside the first request

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/admin/oauth/access_token", self._token),
            web.post("/admin/api/{version}/graphql.json", self._graphql),
            web.get("/__fake__/operations", self._operations),
            *control.routes(self),
        ]

    def now(self) -> datetime:
        """The store's time: pinned by :meth:`pin_clock` (the evaluation's case clock), else ``now``."""
        return self.pinned or self._now()

    def pin_clock(self, at: datetime | None) -> None:
        self.pinned = at

    def reset(self, shop: Shop, *, job_polls: int | None = None) -> None:
        """Serve ``shop`` from now on (same credentials and scopes; no faults, a fresh bucket)."""
        shop.scopes = self.shop.scopes
        self.shop = shop
        self.mutations = Mutations(shop=shop, clock=self.now)
        if job_polls is not None:
            self.mutations.job_polls = job_polls
        self.faults.clear()
        self.bucket = Bucket(clock=self.clock)

    async def __aexit__(self, *exc_info: object) -> None:
        """Stop serving; a clean exit with operations the schema refused fails the test
        (unless ``allow_invalid``), so every suite that talks to the fake checks its documents."""
        await super().__aexit__(*exc_info)
        if exc_info[0] is None and not self.allow_invalid and self.invalid_operations:
            raise AssertionError(f"operations failed Admin API schema validation: {self.invalid_report()}")

    def invalid_report(self) -> list[dict[str, Any]]:
        """The refused operations as JSON-ready records (name, errors, query)."""
        return [{"name": op.name, "errors": list(op.errors), "query": op.query} for op in self.invalid_operations]

    # -- what tests read and steer ---------------------------------------------------------

    @property
    def invalid_operations(self) -> list[OperationRecord]:
        """Every operation the schema refused (a whole run should have none)."""
        return [op for op in self.operations if not op.valid]

    def operations_named(self, root_field: str) -> list[OperationRecord]:
        """The valid operations whose document calls ``root_field`` (e.g. ``refundCreate``)."""
        return [op for op in self.operations if op.valid and root_field in _root_fields_of(op.query)]

    def inject(self, fault: Fault) -> Fault:
        """Add a fault; returned so the test can wait on ``fault.arrived``."""
        self.faults.append(fault)
        return fault

    def staff_refund(self, order_id: int, amount_minor: int, note: str | None = None) -> Webhook:
        """A refund staff make in the Shopify admin; the ``refunds/create`` webhook it sends."""
        return admin.staff_refund(self.shop, order_id, amount_minor, self.mutations.clock(), note)

    def staff_cancel(self, order_id: int) -> Webhook:
        """A cancellation made in the Shopify admin; the ``orders/cancelled`` webhook it sends."""
        return admin.staff_cancel(self.shop, order_id, self.mutations.clock())

    def staff_return(self, order_id: int, note: str = "") -> Webhook:
        """A return requested through the Shopify admin; the ``returns/request`` webhook."""
        return admin.staff_return(self.shop, order_id, self.mutations.clock(), note)

    def staff_approve_return(self, return_id: int) -> Webhook:
        """Staff approve a requested return in the admin; the ``returns/approve`` webhook."""
        return admin.staff_approve_return(self.shop, return_id, self.mutations.clock())

    def staff_edit_note(self, order_id: int, note: str) -> Webhook:
        """Staff edit an order's note in the admin; the ``orders/updated`` webhook."""
        return admin.order_updated(self.shop, order_id, self.mutations.clock(), note)

    def take_emitted(self) -> list[Webhook]:
        """The webhooks the API's own writes caused since the last call (Shopify sends the
        app's ``refunds/create`` too: a receiver must not count them as staff actions)."""
        emitted, self.mutations.emitted[:] = list(self.mutations.emitted), []
        return emitted

    def compliance(self, topic: str, customer_id: int | None = None) -> Webhook:
        """A compliance webhook (``customers/data_request``, ``customers/redact``, ``shop/redact``)."""
        return compliance_webhook(self.shop, topic, self.mutations.clock(), customer_id)

    async def send_webhook(self, url: str, hook: Webhook, *, secret: str | None = None) -> int:
        """Deliver ``hook`` to ``url`` signed with ``secret`` (default: the app's client secret)."""
        return await deliver(url, hook, self.client_secret if secret is None else secret)

    def expire_tokens(self) -> None:
        """Every issued token expires now (a static admin token stays)."""
        for token, expiry in self.tokens.items():
            if expiry != float("inf"):
                self.tokens[token] = self.clock() - 1

    # -- routes -----------------------------------------------------------------------------

    async def _operations(self, request: web.Request) -> web.Response:
        """Not Shopify's: the operations seen so far, for a test driving the fake in another process."""
        ops = [
            {"name": op.name, "kind": op.kind, "valid": op.valid, "errors": list(op.errors), "variables": op.variables}
            for op in self.operations
        ]
        return web.json_response({"operations": ops, "invalid": len(self.invalid_operations)})

    async def _token(self, request: web.Request) -> web.Response:
        body = await _form_or_json(request)
        status, payload = self._grant(body)
        self._record(request, body, status)
        return web.json_response(payload, status=status)

    def _grant(self, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        self.token_requests += 1
        if body is None or body.get("grant_type") != "client_credentials":
            return 400, {
                "error": "unsupported_grant_type",
                "error_description": "grant_type must be client_credentials",
            }
        if body.get("client_id") != self.client_id:
            return 400, {"error": "invalid_client", "error_description": "Client ID not found"}
        if body.get("client_secret") != self.client_secret:
            return 401, {"error": "invalid_client", "error_description": "Client authentication failed"}
        token = f"shpca_{uuid.uuid4().hex}"
        self.tokens[token] = self.clock() + TOKEN_LIFETIME_S
        return 200, {"access_token": token, "scope": ",".join(self.shop.scopes), "expires_in": TOKEN_LIFETIME_S}

    async def _graphql(self, request: web.Request) -> web.Response:
        body: Any = None
        if request.match_info["version"] != self.version:
            status, payload = 404, {"errors": "Not Found"}
        elif not self._authorized(request):
            status, payload = 401, {"errors": INVALID_TOKEN}
        else:
            try:
                body = await request.json()
            except ValueError:
                body = None
            status, payload = await self._answer(body)
        self._record(request, body, status)
        return web.json_response(payload, status=status)

    def _authorized(self, request: web.Request) -> bool:
        expiry = self.tokens.get(request.headers.get("X-Shopify-Access-Token", ""))
        return expiry is not None and expiry > self.clock()

    async def _answer(self, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict):
            return 400, {"errors": {"query": "Required parameter missing or invalid"}}
        variables = body.get("variables")
        checked, errors, record = check_operation(body.get("query"), variables, body.get("operationName"))
        self.operations.append(record)
        if not record.valid and not self.allow_invalid:
            REFUSED.append(record)
        if checked is None:
            return 200, {"errors": errors}
        fault = self._take_fault(checked, record)
        if fault is not None:
            keys = keys_in(checked) - self.mutations.inflight
            self.mutations.inflight |= keys
            fault.arrived.set()
            try:
                if fault.hold is not None:
                    await fault.hold.wait()
                if fault.delay_s:
                    await asyncio.sleep(fault.delay_s)  # the slow shop itself, not a test waiting
            finally:
                self.mutations.inflight -= keys
            if fault.status is not None and not fault.after_apply:
                return fault.status, {"errors": f"fake fault: {fault.status} before applying"}
        status, payload = self._execute(checked, variables if isinstance(variables, dict) else {})
        if fault is not None and fault.status is not None and fault.after_apply:
            return fault.status, {"errors": f"fake fault: {fault.status} after applying"}
        return status, payload

    def _execute(self, checked: Checked, variables: dict[str, Any]) -> tuple[int, Any]:
        cost = requested_cost(admin_schema(), checked)
        if cost > MAX_QUERY_COST:
            message = f"Query cost is {cost}, which exceeds the single query max cost limit ({MAX_QUERY_COST})."
            return 200, {"errors": [{"message": message, "extensions": {"code": "MAX_COST_EXCEEDED", "cost": cost}}]}
        if not self.bucket.take(cost):
            return 200, {
                "errors": [{"message": "Throttled", "extensions": {"code": "THROTTLED"}}],
                "extensions": {"cost": {**self._cost(cost, 0), "actualQueryCost": None}},
            }
        result = run(checked, self.mutations, variables)
        payload: dict[str, Any] = {"data": result.data}
        if result.errors:
            payload["errors"] = [e.formatted for e in result.errors]
        actual = actual_cost(admin_schema(), checked, result.data)
        self.bucket.give_back(cost - actual)
        payload["extensions"] = {"cost": self._cost(cost, actual)}
        return 200, payload

    def _cost(self, requested: int, actual: int) -> dict[str, Any]:
        return {
            "requestedQueryCost": requested,
            "actualQueryCost": actual,
            "throttleStatus": self.bucket.status(),
        }

    def _take_fault(self, checked: Checked, record: OperationRecord) -> Fault | None:
        names = {sel.name.value for sel in checked.operation.selection_set.selections if hasattr(sel, "name")}
        names.add(record.name or "")
        for fault in self.faults:
            if fault.times > 0 and fault.match in names:
                fault.times -= 1
                return fault
        return None

    def _record(self, request: web.Request, body: Any, status: int) -> None:
        self.record(
            RecordedRequest(
                method=request.method,
                path=request.path,
                headers={k.lower(): v for k, v in request.headers.items()},
                body=body,
                status=status,
            )
        )


def _root_fields_of(query: str) -> set[str]:
    names: set[str] = set()
    for d in parse(query).definitions:
        if isinstance(d, OperationDefinitionNode):
            names |= {s.name.value for s in d.selection_set.selections if isinstance(s, FieldNode)}
    return names


async def _form_or_json(request: web.Request) -> dict[str, Any] | None:
    try:
        if request.content_type == "application/json":
            body = await request.json()
            return body if isinstance(body, dict) else None
        return {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
    except (ValueError, json.JSONDecodeError):
        return None


if __name__ == "__main__":
    from tests.fakes.shopify.process import main

    raise SystemExit(main())
