"""Fuzzing every endpoint (hypothesis): bodies generated from the request schemas and arbitrary
junk JSON/bytes/headers, valid and invalid tokens. Invariants: never a 5xx, every refusal is the
JSON error shape, and a refused request changes no row."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from agent.llm.base import ModelRequest
from agent.llm.testing import FunctionModel, tool_use_block
from bot.api.auth import make_token
from bot.api.openapi import SCHEMAS
from bot.email.parsing import sign
from tests.api_kit import EMAIL_SECRET, JWT_SECRET, bearer, client_for, counts
from tests.conftest import make_sqlite
from tests.support import C7, Harness, seeded

FUZZ = settings(
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
REFUND = {
    "order_id": "O-1042",
    "amount_minor": 18900,
    "currency": "USD",
    "reason_code": "damaged",
    "evidence": ["refund-policy@7#window"],
}
CANCEL = {"order_id": "O-1044", "reason_code": "customer_request", "evidence": ["cancellations@2#before-shipping"]}


def setup_script() -> list[Any]:
    """Two conversations: one left with a pending approval, one with a pending confirmation."""
    return [
        [tool_use_block("get_order", {"order_id": "O-1042"})],
        [tool_use_block("search_knowledge", {"query": "refund window"})],
        [tool_use_block("issue_refund", REFUND)],
        "Please confirm.",
        "It needs approval.",
        [tool_use_block("search_knowledge", {"query": "cancel an order before shipping", "kind": "policy"})],
        [tool_use_block("cancel_order", CANCEL)],
        "Please confirm the cancellation.",
    ]


@dataclass
class Env:
    loop: asyncio.AbstractEventLoop
    h: Harness
    client: TestClient
    ids: dict[str, str]
    statuses: Counter[int] = field(default_factory=Counter)

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)


def with_env(tmp_path: Path, body: Callable[[Env], None], *, expect: set[int]) -> None:
    """Run ``body`` against a fresh seeded server; ``expect``: statuses the fuzz must have reached."""
    loop = asyncio.new_event_loop()
    script = setup_script()

    def answer(_request: ModelRequest) -> Any:
        return script.pop(0) if script else "ok"

    async def start() -> Env:
        db = await make_sqlite(tmp_path / "fuzz.db")
        h = await seeded(db, FunctionModel(answer))
        first = await h.runtime.chat(principal=C7, channel="api", message="Refund O-1042")
        confirmed = await h.runtime.confirm(first.pending[0].id, actor=C7, accept=True)
        second = await h.runtime.chat(principal=C7, channel="api", message="Cancel O-1044")
        assert confirmed.approval is not None and second.pending
        cm = client_for(h)
        client = await cm.__aenter__()
        env = Env(
            loop=loop,
            h=h,
            client=client,
            ids={
                "conversation": first.conversation_id,
                "approval": confirmed.approval.id,
                "confirmation": second.pending[0].id,
                "cm": cm,
            },
        )  # type: ignore[dict-item]
        return env

    env = loop.run_until_complete(start())
    try:
        body(env)
        assert expect <= set(env.statuses), sorted(env.statuses.items())  # it got past the front door
    finally:
        loop.run_until_complete(env.ids["cm"].__aexit__(None, None, None))  # type: ignore[attr-defined]
        loop.run_until_complete(env.h.db.dispose())
        loop.close()


# -- strategies -----------------------------------------------------------------------------


def from_schema(s: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid under the (small) request schemas."""
    if "enum" in s:
        return st.sampled_from(s["enum"])
    kind = s.get("type")
    if isinstance(kind, list):
        return st.one_of(*[from_schema({**s, "type": k}) for k in kind])
    if kind == "object":
        props, required = s.get("properties", {}), set(s.get("required", []))
        return st.fixed_dictionaries(
            {k: from_schema(v) for k, v in props.items() if k in required},
            optional={k: from_schema(v) for k, v in props.items() if k not in required},
        )
    if kind == "string":
        top = min(s.get("maxLength", 80), 300)
        if s.get("pattern", r"\S") != r"\S":
            return st.from_regex(s["pattern"], fullmatch=True).filter(lambda x: len(x) <= top)
        return st.text(min_size=max(1, s.get("minLength", 0)), max_size=top).filter(lambda x: x.strip() != "")
    if kind == "integer":
        return st.integers(min_value=s.get("minimum"), max_value=s.get("maximum"))
    if kind == "null":
        return st.none()
    return st.nothing()


JUNK_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4),
    max_leaves=12,
)
#: What an HTTP client can put in a header value (visible ASCII, space, Latin-1 letters).
HEADER_CHARS = st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_categories=["Cc"])
TOKENS = st.one_of(
    st.sampled_from(
        [
            bearer("C-7", "customer"),
            bearer("C-8", "customer"),
            bearer("S-1", "rep"),
            bearer("S-3", "supervisor"),
            bearer("S-4", "supervisor"),
            bearer("C-999", "customer"),
            bearer("S-1", "supervisor"),
            {},
            {"Authorization": "Bearer"},
            {"Authorization": "Bearer " + make_token(JWT_SECRET, sub="C-7", role="customer", ttl_s=-600)},
            {
                "Authorization": "Bearer "
                + make_token("wrong-secret-wrong-secret-wrong-secret", sub="S-3", role="supervisor")
            },
        ]
    ),
    st.text(HEADER_CHARS, max_size=60).map(lambda t: {"Authorization": t}),
    st.text(HEADER_CHARS, max_size=60).map(lambda t: {"Authorization": f"Bearer {t}"}),
)
CONTENT_TYPES = st.sampled_from(
    [
        "application/json",
        "application/json; charset=utf-8",
        "text/plain",
        "multipart/form-data; boundary=zz",
        "application/x-www-form-urlencoded",
        "",
    ]
)


def bodies(schema: str) -> st.SearchStrategy[bytes]:
    valid = from_schema(SCHEMAS[schema])
    return st.one_of(
        valid.map(lambda d: json.dumps(d).encode()),
        st.tuples(valid, st.text(max_size=8), JUNK_JSON).map(lambda t: json.dumps({**t[0], t[1]: t[2]}).encode()),
        JUNK_JSON.map(lambda d: json.dumps(d).encode()),
        st.binary(max_size=300),
    )


def path_ids(env: Env) -> st.SearchStrategy[str]:
    real = [env.ids["conversation"], env.ids["approval"], env.ids["confirmation"]]
    return st.one_of(st.sampled_from(real), st.text(min_size=1, max_size=70).map(lambda t: quote(t, safe="")))


# -- the invariant ----------------------------------------------------------------------------


async def check(env: Env, method: str, path: str, *, headers: dict[str, str], data: bytes | None = None) -> None:
    before = await counts(env.h.db)
    r = await env.client.request(method, path, headers=headers, data=data)
    text = await r.text()
    event(f"{method} {r.status}")
    env.statuses[r.status] += 1
    assert r.status < 500, (method, path, r.status, text[:300])
    if r.status >= 400:
        body = json.loads(text)
        assert set(body) == {"error", "message"}, body
        assert await counts(env.h.db) == before, (method, path, r.status, body)


def _headers(token: dict[str, str], ctype: str) -> dict[str, str]:
    return {**token, **({"Content-Type": ctype} if ctype else {})}


C7_TOKEN, C8_TOKEN, SUP_TOKEN = bearer("C-7", "customer"), bearer("C-8", "customer"), bearer("S-3", "supervisor")
JSON = {"Content-Type": "application/json"}
GOOD_TOKENS = st.sampled_from(
    [
        bearer("C-7", "customer"),
        bearer("C-8", "customer"),
        bearer("S-1", "rep"),
        bearer("S-3", "supervisor"),
        bearer("S-4", "supervisor"),
    ]
)


def requests(valid: st.SearchStrategy[Any], schema: str) -> st.SearchStrategy[tuple[dict[str, str], bytes]]:
    """Half well-formed (a known person's token, JSON, a schema-valid body), half anything at all."""
    well_formed = st.tuples(GOOD_TOKENS, valid).map(
        lambda t: ({**t[0], "Content-Type": "application/json"}, json.dumps(t[1]).encode())
    )
    anything = st.tuples(TOKENS, CONTENT_TYPES, bodies(schema)).map(lambda t: (_headers(t[0], t[1]), t[2]))
    return st.one_of(well_formed, well_formed, anything)  # hypothesis explores junk eagerly: tilt the odds


def decision_body(schema: str) -> st.SearchStrategy[dict[str, Any]]:
    """Schema-valid decision bodies whose version is often the real one (1 or 2)."""
    return st.tuples(from_schema(SCHEMAS[schema]), st.sampled_from([1, 2, None])).map(
        lambda t: {**t[0], "version": t[1]} if t[1] else t[0]
    )


def test_fuzz_chat(tmp_path: Path) -> None:
    def body(env: Env) -> None:
        @FUZZ
        @given(req=requests(from_schema(SCHEMAS["ChatRequest"]), "ChatRequest"))
        @example(req=({**C7_TOKEN, **JSON}, b'{"message": "hello", "conversationId": null}'))
        @example(req=({**C7_TOKEN, **JSON}, b'{"message": "hello", "customerId": "C-8"}'))
        def run(req: tuple[dict[str, str], bytes]) -> None:
            env.run(check(env, "POST", "/api/chat", headers=req[0], data=req[1]))

        run()

    with_env(tmp_path, body, expect={200, 403})


def test_fuzz_confirmations(tmp_path: Path) -> None:
    def body(env: Env) -> None:
        @FUZZ
        @given(
            req=requests(st.just({}), "ConfirmRequest"),
            action=st.sampled_from(["confirm", "decline"]),
            ident=path_ids(env),
        )
        @example(req=({**C8_TOKEN, **JSON}, b"{}"), action="confirm", ident=env.ids["confirmation"])
        @example(req=({**C7_TOKEN, **JSON}, b"{}"), action="confirm", ident=env.ids["confirmation"])
        @example(req=({**C7_TOKEN, **JSON}, b"{}"), action="decline", ident=env.ids["confirmation"])
        def run(req: tuple[dict[str, str], bytes], action: str, ident: str) -> None:
            env.run(check(env, "POST", f"/api/confirmations/{ident}/{action}", headers=req[0], data=req[1]))

        run()

    with_env(tmp_path, body, expect={200, 404, 409})


def test_fuzz_approval_decisions(tmp_path: Path) -> None:
    def body(env: Env) -> None:
        @FUZZ
        @given(ident=path_ids(env), action=st.sampled_from(["approve", "reject"]), pick=st.data())
        @example(ident=env.ids["approval"], action="approve", pick=({**C7_TOKEN, **JSON}, b'{"version": 1}'))
        @example(ident=env.ids["approval"], action="approve", pick=({**SUP_TOKEN, **JSON}, b'{"version": 7}'))
        @example(ident=env.ids["approval"], action="approve", pick=({**SUP_TOKEN, **JSON}, b'{"version": 1}'))
        @example(ident=env.ids["approval"], action="reject", pick=({**SUP_TOKEN, **JSON}, b'{"version": 2}'))
        def run(ident: str, action: str, pick: Any) -> None:
            schema = "ApproveRequest" if action == "approve" else "RejectRequest"
            headers, data = pick if isinstance(pick, tuple) else pick.draw(requests(decision_body(schema), schema))
            env.run(check(env, "POST", f"/api/approvals/{ident}/{action}", headers=headers, data=data))

        run()

    with_env(tmp_path, body, expect={200, 403, 409})


def test_fuzz_reads(tmp_path: Path) -> None:
    query = st.one_of(
        from_schema(SCHEMAS["ApprovalsQuery"]), st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=3)
    )

    def body(env: Env) -> None:
        @FUZZ
        @given(
            token=GOOD_TOKENS | TOKENS,
            ident=path_ids(env),
            q=query,
            which=st.sampled_from(["list", "approval", "conversation", "openapi", "healthz", "junk"]),
        )
        @example(token=SUP_TOKEN, ident="x", q={"status": "pending"}, which="list")
        @example(token=C7_TOKEN, ident=env.ids["conversation"], q={}, which="conversation")
        @example(token=bearer("C-8", "customer"), ident=env.ids["conversation"], q={}, which="conversation")
        def run(token: dict[str, str], ident: str, q: dict[str, str], which: str) -> None:
            path = {
                "list": "/api/approvals?" + urlencode(q),
                "approval": f"/api/approvals/{ident}",
                "conversation": f"/api/conversations/{ident}",
                "openapi": "/api/openapi.json",
                "healthz": "/healthz",
                "junk": f"/api/{ident}",
            }[which]
            env.run(check(env, "GET", path, headers=token))

        run()

    with_env(tmp_path, body, expect={200, 404})


SENDERS = st.sampled_from(
    [
        "maya.chen@example.com",
        "Maya Chen <MAYA.CHEN@example.com>",
        "jonas.weber@example.de",
        "evil@attacker.example",
        "a@b, maya.chen@example.com",
        "",
        "maya.chen@example.com.evil",
    ]
)
EMAIL_FIELDS = st.fixed_dictionaries(
    {"from": SENDERS | st.text(max_size=30)},
    optional={
        "to": st.text(max_size=30),
        "subject": st.text(max_size=40),
        "text": st.text(max_size=200),
        "headers": st.text(max_size=200) | JUNK_JSON,
        "SPF": st.sampled_from(["pass", "fail", "softfail", "none"]),
        "dkim": st.sampled_from(["{@example.com : pass}", "{@example.com : fail}", "none"]) | JUNK_JSON,
        "Message-Id": st.text(max_size=40).map(lambda t: f"<{t}@x>"),
        "References": st.text(max_size=60),
        "envelope": st.text(max_size=40) | JUNK_JSON,
    },
)


def test_fuzz_email_inbound(tmp_path: Path) -> None:
    """Signed junk reaches the parser: malformed, forged or failing mail is refused with no trace."""

    def body(env: Env) -> None:
        @FUZZ
        @given(
            fields=EMAIL_FIELDS,
            shape=st.sampled_from(["json", "json", "form", "bytes"]),
            signed=st.sampled_from([True, True, False]),
            raw=st.binary(max_size=200),
            ctype=CONTENT_TYPES,
        )
        @example(
            fields={"from": "Maya <maya.chen@example.com>", "text": "hi", "Message-Id": "<fz-1@x>"},
            shape="json",
            signed=True,
            raw=b"",
            ctype="",
        )
        @example(
            fields={"from": "maya.chen@example.com", "text": "hi", "Message-Id": "<fz-1@x>"},
            shape="form",
            signed=True,
            raw=b"",
            ctype="",
        )
        @example(fields={"from": "evil@attacker.example", "text": "hi"}, shape="json", signed=True, raw=b"", ctype="")
        @example(fields={"from": "maya.chen@example.com", "SPF": "fail"}, shape="json", signed=True, raw=b"", ctype="")
        @example(fields={"from": 5}, shape="json", signed=True, raw=b"", ctype="")
        @example(fields={"from": "maya.chen@example.com"}, shape="json", signed=False, raw=b"", ctype="")
        def run(fields: dict[str, Any], shape: str, signed: bool, raw: bytes, ctype: str) -> None:
            if shape == "json":
                data, ctype = json.dumps(fields).encode(), "application/json"
            elif shape == "form":
                flat = {k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()}
                data, ctype = urlencode(flat).encode(), "application/x-www-form-urlencoded"
            else:
                data = raw
            ts = str(int(time.time()))
            headers = {"Content-Type": ctype} if ctype else {}
            if signed:
                headers |= {"X-Signoff-Timestamp": ts, "X-Signoff-Signature": sign(EMAIL_SECRET, data, ts)}
            env.run(check(env, "POST", "/email/inbound", headers=headers, data=data))

        run()

    with_env(tmp_path, body, expect={200, 401, 403, 422})
