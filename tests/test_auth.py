"""JWT bearer auth: HS256 with a secret, RS256/ES256 against a JWKS; every bad token is a 401,
an unknown person a 403, and the principal always comes from the token."""

from __future__ import annotations

import base64
import json
import time
import warnings
from collections.abc import AsyncIterator
from typing import Any

import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, HMACAlgorithm, RSAAlgorithm

from agent.llm.testing import ScriptedModel
from bot.auth import AuthConfig, make_token
from storage.db import Database
from tests.api_kit import JWT_SECRET, client_for, counts
from tests.support import Harness, seeded

PROBE = "/api/conversations/conv_missing"  # 404 once authenticated: no model, no state


def claims(**over: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"sub": "C-7", "role": "customer", "iat": now, "exp": now + 600, **over}


def hs(payload: dict[str, Any], secret: str = JWT_SECRET) -> str:
    return jwt.encode(payload, secret, algorithm="HS256")


def hs512(payload: dict[str, Any]) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the secret is short for SHA-512; we only need it refused
        return jwt.encode(payload, JWT_SECRET, algorithm="HS512")


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.fixture
async def harness(db: Database) -> Harness:
    return await seeded(db, ScriptedModel([]))


async def status_for(h: Harness, token: str | None, **kw: Any) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with client_for(h, **kw) as client:
        r = await client.get(PROBE, headers=headers)
        return r.status, await r.json()


async def test_valid_hs256_token_authenticates(harness: Harness) -> None:
    """make_token (what `signoff token` prints) is accepted: the probe reaches the 404."""
    assert (await status_for(harness, make_token(JWT_SECRET, sub="C-7", role="customer")))[0] == 404
    assert (await status_for(harness, make_token(JWT_SECRET, sub="S-3", role="supervisor")))[0] == 404


@pytest.mark.parametrize("name,token", [
    ("missing", None),
    ("empty", ""),
    ("garbage", "not-a-jwt"),
    ("expired", hs(claims(exp=int(time.time()) - 3600))),
    ("no exp", hs({"sub": "C-7", "role": "customer"})),
    ("no sub", hs({k: v for k, v in claims().items() if k != "sub"})),
    ("no role", hs({k: v for k, v in claims().items() if k != "role"})),
    ("bad role", hs(claims(role="admin"))),
    ("sub not an id", hs(claims(sub="C-7; DROP TABLE"))),
    ("sub not a string", hs(claims(sub=7))),
    ("customer claim for another account", hs(claims(customer="C-8"))),
    ("wrong secret", hs(claims(), secret="another-secret-another-secret-12345")),
    ("alg none", jwt.encode(claims(), "", algorithm="none")),
    ("alg HS512 with the right secret", hs512(claims())),
])
async def test_bad_tokens_are_401(harness: Harness, name: str, token: str | None) -> None:
    status, body = await status_for(harness, token)
    assert (status, body["error"]) == (401, "unauthorized"), name


async def test_tampered_token_is_401(harness: Harness) -> None:
    """Changing the payload (customer C-7 → supervisor S-3) breaks the signature."""
    head, _payload, sig = make_token(JWT_SECRET, sub="C-7", role="customer").split(".")
    forged = b64(json.dumps(claims(sub="S-3", role="supervisor")).encode())
    assert (await status_for(harness, f"{head}.{forged}.{sig}"))[0] == 401


async def test_wrong_scheme_is_401(harness: Harness) -> None:
    token = make_token(JWT_SECRET, sub="C-7", role="customer")
    async with client_for(harness) as client:
        r = await client.get(PROBE, headers={"Authorization": f"Basic {token}"})
        assert r.status == 401


async def test_audience_and_issuer_are_enforced_when_configured(harness: Harness) -> None:
    cfg = AuthConfig(secret=JWT_SECRET, audience="signoff-api", issuer="https://idp.example")
    good = make_token(JWT_SECRET, sub="C-7", role="customer", audience="signoff-api", issuer="https://idp.example")
    assert (await status_for(harness, good, auth=cfg))[0] == 404
    for token in (make_token(JWT_SECRET, sub="C-7", role="customer", audience="other", issuer="https://idp.example"),
                  make_token(JWT_SECRET, sub="C-7", role="customer", audience="signoff-api", issuer="https://evil"),
                  make_token(JWT_SECRET, sub="C-7", role="customer", issuer="https://idp.example"),
                  make_token(JWT_SECRET, sub="C-7", role="customer", audience="signoff-api")):
        status, body = await status_for(harness, token, auth=cfg)
        assert status == 401, body


@pytest.mark.parametrize("sub,role", [("C-999", "customer"), ("S-99", "rep"), ("S-1", "supervisor"),
                                      ("C-7", "rep")])
async def test_unknown_people_and_wrong_roles_are_403(harness: Harness, sub: str, role: str) -> None:
    """A valid signature is not enough: the person must exist with exactly that role."""
    before = await counts(harness.db)
    status, body = await status_for(harness, make_token(JWT_SECRET, sub=sub, role=role))
    assert (status, body["error"]) == (403, "forbidden")
    assert await counts(harness.db) == before


async def test_no_auth_configured_refuses_everything(harness: Harness) -> None:
    status, body = await status_for(harness, make_token(JWT_SECRET, sub="C-7", role="customer"), auth=AuthConfig())
    assert (status, body["error"]) == (503, "unavailable")


# -- JWKS -----------------------------------------------------------------------------------

class RawHMAC(HMACAlgorithm):
    """HMAC that, unlike PyJWT's, accepts a PEM public key as the secret (an attacker's tool)."""

    def prepare_key(self, key: str | bytes) -> bytes:
        return key if isinstance(key, bytes) else key.encode()


class Jwks:
    """A JWKS endpoint on 127.0.0.1 that counts fetches."""

    def __init__(self) -> None:
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        rsa_jwk = {**RSAAlgorithm.to_jwk(self.rsa.public_key(), as_dict=True), "kid": "rsa-1", "alg": "RS256",
                   "use": "sig"}
        ec_jwk = {**ECAlgorithm.to_jwk(self.ec.public_key(), as_dict=True), "kid": "ec-1", "alg": "ES256", "use": "sig"}
        self.document = {"keys": [rsa_jwk, ec_jwk]}
        self.fetches = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.fetches += 1
        return web.json_response(self.document)

    def rs256(self, payload: dict[str, Any], kid: str = "rsa-1") -> str:
        return jwt.encode(payload, self.rsa, algorithm="RS256", headers={"kid": kid})

    def es256(self, payload: dict[str, Any]) -> str:
        return jwt.encode(payload, self.ec, algorithm="ES256", headers={"kid": "ec-1"})

    def public_pem(self) -> bytes:
        return self.rsa.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo)


@pytest.fixture
async def jwks() -> AsyncIterator[tuple[Jwks, str]]:
    keys = Jwks()
    app = web.Application()
    app.router.add_get("/.well-known/jwks.json", keys.handle)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    yield keys, str(server.make_url("/.well-known/jwks.json"))
    await server.close()


async def test_jwks_rs256_and_es256_happy_path_with_caching(harness: Harness, jwks: tuple[Jwks, str]) -> None:
    """RS256 and ES256 tokens verify against the JWKS. The keys are fetched in a thread: the JWKS
    server runs on this same event loop, so a blocking fetch would deadlock this test."""
    keys, url = jwks
    cfg = AuthConfig(jwks_url=url, audience="signoff-api")
    async with client_for(harness, auth=cfg) as client:
        for token in (keys.rs256(claims(aud="signoff-api")), keys.es256(claims(aud="signoff-api", sub="S-3",
                                                                              role="supervisor")),
                      keys.rs256(claims(aud="signoff-api"))):
            r = await client.get(PROBE, headers={"Authorization": f"Bearer {token}"})
            assert r.status == 404, await r.text()
    assert keys.fetches == 1


async def test_jwks_refuses_confused_and_foreign_tokens(harness: Harness, jwks: tuple[Jwks, str]) -> None:
    """HS256 signed with the public key, an unknown kid, a foreign RSA key, alg none → all 401."""
    keys, url = jwks
    cfg = AuthConfig(jwks_url=url)
    forger = jwt.PyJWS(algorithms=[])
    forger.register_algorithm("HS256", RawHMAC(RawHMAC.SHA256))  # the classic key-confusion token
    confused = forger.encode(json.dumps(claims()).encode(), keys.public_pem(), algorithm="HS256")
    foreign = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    tokens = {
        "hs256 with the public key": confused,
        "unknown kid": keys.rs256(claims(), kid="nope"),
        "foreign key": jwt.encode(claims(), foreign, algorithm="RS256", headers={"kid": "rsa-1"}),
        "alg none": jwt.encode(claims(), "", algorithm="none"),
        "hs256 secret token": hs(claims()),
    }
    for name, token in tokens.items():
        status, body = await status_for(harness, token, auth=cfg)
        assert (status, body["error"]) == (401, "unauthorized"), name


async def test_jwks_unreachable_is_503(harness: Harness, jwks: tuple[Jwks, str]) -> None:
    keys, _url = jwks
    cfg = AuthConfig(jwks_url="http://127.0.0.1:9/jwks.json", jwks_timeout_s=1.0)
    status, body = await status_for(harness, keys.rs256(claims()), auth=cfg)
    assert (status, body["error"]) == (503, "unavailable")
