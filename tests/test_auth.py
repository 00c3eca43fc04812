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
from bot.api.auth import AuthConfig, make_token
from storage.db import Database
from tests.api_kit import JWT_SECRET, client_for, counts, settings
from tests.support import Harness, seeded

PROBE = "/api/conversations/conv_missing"  # 404 once authenticated: no model, no state
ISS = "https://idp.example"


def claims(**over: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"sub": "C-7", "role": "customer", "iat": now, "exp": now + 600, **over}


def idp(payload: dict[str, Any]) -> dict[str, Any]:
    """Claims as an identity provider issues them for this API."""
    return {"aud": "signoff-api", "iss": ISS, **payload}


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


@pytest.mark.parametrize(
    "name,token",
    [
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
    ],
)
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
    for token in (
        make_token(JWT_SECRET, sub="C-7", role="customer", audience="other", issuer="https://idp.example"),
        make_token(JWT_SECRET, sub="C-7", role="customer", audience="signoff-api", issuer="https://evil"),
        make_token(JWT_SECRET, sub="C-7", role="customer", issuer="https://idp.example"),
        make_token(JWT_SECRET, sub="C-7", role="customer", audience="signoff-api"),
    ):
        status, body = await status_for(harness, token, auth=cfg)
        assert status == 401, body


@pytest.mark.parametrize("sub,role", [("C-999", "customer"), ("S-99", "rep"), ("S-1", "supervisor"), ("C-7", "rep")])
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
        rsa_jwk = {
            **RSAAlgorithm.to_jwk(self.rsa.public_key(), as_dict=True),
            "kid": "rsa-1",
            "alg": "RS256",
            "use": "sig",
        }
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
        return self.rsa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


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
    cfg = AuthConfig(jwks_url=url, audience="signoff-api", issuer=ISS)
    async with client_for(harness, auth=cfg) as client:
        for token in (
            keys.rs256(idp(claims())),
            keys.es256(idp(claims(sub="S-3", role="supervisor"))),
            keys.rs256(idp(claims())),
        ):
            r = await client.get(PROBE, headers={"Authorization": f"Bearer {token}"})
            assert r.status == 404, await r.text()
    assert keys.fetches == 1


async def test_jwks_refuses_confused_and_foreign_tokens(harness: Harness, jwks: tuple[Jwks, str]) -> None:
    """HS256 signed with the public key, an unknown kid, a foreign RSA key, alg none → all 401."""
    keys, url = jwks
    cfg = AuthConfig(jwks_url=url, audience="signoff-api", issuer=ISS)
    forger = jwt.PyJWS(algorithms=[])
    forger.register_algorithm("HS256", RawHMAC(RawHMAC.SHA256))  # the classic key-confusion token
    confused = forger.encode(json.dumps(idp(claims())).encode(), keys.public_pem(), algorithm="HS256")
    foreign = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    tokens = {
        "hs256 with the public key": confused,
        "unknown kid": keys.rs256(idp(claims()), kid="nope"),
        "foreign key": jwt.encode(idp(claims()), foreign, algorithm="RS256", headers={"kid": "rsa-1"}),
        "alg none": jwt.encode(idp(claims()), "", algorithm="none"),
        "hs256 secret token": hs(idp(claims())),
    }
    for name, token in tokens.items():
        status, body = await status_for(harness, token, auth=cfg)
        assert (status, body["error"]) == (401, "unauthorized"), name


async def test_in_production_staff_tokens_come_only_from_the_jwks_issuer(
    harness: Harness, jwks: tuple[Jwks, str]
) -> None:
    """One HS256 secret used to mint supervisor:S-3. In production it mints customer tokens at
    most: a staff-role HS256 token is 401, the same claims from the JWKS issuer are accepted."""
    keys, url = jwks
    idp_env = {"SIGNOFF_JWKS_URL": url, "SIGNOFF_JWT_AUDIENCE": "signoff-api", "SIGNOFF_JWT_ISSUER": ISS}
    production = settings(SIGNOFF_ENV="production", **idp_env)
    development = settings(SIGNOFF_ENV="development", **idp_env)
    for role, sub in (("supervisor", "S-3"), ("rep", "S-1")):
        shared = make_token(JWT_SECRET, sub=sub, role=role, audience="signoff-api", issuer=ISS)
        async with client_for(harness, production) as client:
            r = await client.get(PROBE, headers={"Authorization": f"Bearer {shared}"})
            assert (r.status, (await r.json())["error"]) == (401, "unauthorized")
            assert "identity provider" in (await r.json())["message"]
            idp_token = keys.rs256(idp(claims(sub=sub, role=role)))
            r = await client.get(PROBE, headers={"Authorization": f"Bearer {idp_token}"})
            assert r.status == 404, await r.text()
        async with client_for(harness, development) as client:  # `signoff token` in development
            r = await client.get(PROBE, headers={"Authorization": f"Bearer {shared}"})
            assert r.status == 404, await r.text()
    customer = make_token(JWT_SECRET, sub="C-7", role="customer", audience="signoff-api", issuer=ISS)
    async with client_for(harness, production) as client:
        r = await client.get(PROBE, headers={"Authorization": f"Bearer {customer}"})
        assert r.status == 404, await r.text()


async def test_jwks_unreachable_is_503(harness: Harness, jwks: tuple[Jwks, str]) -> None:
    keys, _url = jwks
    cfg = AuthConfig(jwks_url="http://127.0.0.1:9/jwks.json", jwks_timeout_s=1.0, audience="signoff-api", issuer=ISS)
    status, body = await status_for(harness, keys.rs256(idp(claims())), auth=cfg)
    assert (status, body["error"]) == (503, "unavailable")


# -- hardening: secret length, lifetime, aud/iss with a JWKS -----------------------------------


def test_a_short_hs256_secret_is_refused_at_start_up() -> None:
    """Fewer than 32 bytes of secret is a one-line ConfigError naming SIGNOFF_JWT_SECRET, in the
    settings and in the auth config itself."""
    from agent.errors import ConfigError
    from bot.settings import load_settings, reveal

    with pytest.raises(ConfigError, match=r"^SIGNOFF_JWT_SECRET: must be at least 32 bytes") as info:
        load_settings({"SIGNOFF_JWT_SECRET": "x" * 31})
    assert "\n" not in str(info.value)
    assert reveal(load_settings({"SIGNOFF_JWT_SECRET": "x" * 32}).signoff_jwt_secret) == "x" * 32
    with pytest.raises(ConfigError, match="SIGNOFF_JWT_SECRET"):
        AuthConfig(secret="short-secret")


@pytest.mark.parametrize(
    "name,payload",
    [
        ("exp - iat over 24h", claims(iat=int(time.time()), exp=int(time.time()) + 24 * 3600 + 60)),
        (
            "no iat, exp over 24h away",
            {k: v for k, v in claims(exp=int(time.time()) + 2 * 24 * 3600).items() if k != "iat"},
        ),
        ("iat in the past, exp a year on", claims(iat=int(time.time()) - 60, exp=int(time.time()) + 365 * 24 * 3600)),
        ("no exp at all", {k: v for k, v in claims().items() if k != "exp"}),
    ],
)
async def test_tokens_without_exp_or_living_past_the_maximum_lifetime_are_401(
    harness: Harness, name: str, payload: dict[str, Any]
) -> None:
    """A token must expire, and within SIGNOFF_JWT_MAX_TTL_S (default 24 h) of its issue."""
    status, body = await status_for(harness, hs(payload))
    assert (status, body["error"]) == (401, "unauthorized"), name


async def test_the_maximum_lifetime_is_configurable(harness: Harness) -> None:
    """A one-hour token passes the default and fails a 10-minute maximum."""
    token = make_token(JWT_SECRET, sub="C-7", role="customer", ttl_s=3600)
    assert (await status_for(harness, token))[0] == 404
    status, body = await status_for(harness, token, auth=AuthConfig(secret=JWT_SECRET, max_ttl_s=600))
    assert status == 401 and "lifetime" in body["message"]


def test_a_jwks_without_audience_and_issuer_is_refused_at_start_up() -> None:
    """With SIGNOFF_JWKS_URL, SIGNOFF_JWT_AUDIENCE and SIGNOFF_JWT_ISSUER are required (one line each)."""
    from agent.errors import ConfigError
    from bot.settings import load_settings

    url = "https://idp.example/.well-known/jwks.json"
    with pytest.raises(ConfigError, match=r"^SIGNOFF_JWT_AUDIENCE: required when SIGNOFF_JWKS_URL"):
        load_settings({"SIGNOFF_JWKS_URL": url, "SIGNOFF_JWT_ISSUER": ISS})
    with pytest.raises(ConfigError, match=r"^SIGNOFF_JWT_ISSUER: required when SIGNOFF_JWKS_URL"):
        load_settings({"SIGNOFF_JWKS_URL": url, "SIGNOFF_JWT_AUDIENCE": "signoff-api"})
    ok = load_settings({"SIGNOFF_JWKS_URL": url, "SIGNOFF_JWT_AUDIENCE": "signoff-api", "SIGNOFF_JWT_ISSUER": ISS})
    assert AuthConfig.from_settings(ok).issuer == ISS
    with pytest.raises(ConfigError):
        AuthConfig(jwks_url=url, audience="signoff-api")


async def test_jwks_tokens_lacking_aud_or_iss_are_401(harness: Harness, jwks: tuple[Jwks, str]) -> None:
    """An identity provider's token must name this API and its issuer."""
    keys, url = jwks
    cfg = AuthConfig(jwks_url=url, audience="signoff-api", issuer=ISS)
    no_aud = {k: v for k, v in idp(claims()).items() if k != "aud"}
    no_iss = {k: v for k, v in idp(claims()).items() if k != "iss"}
    for name, token in {
        "no aud": keys.rs256(no_aud),
        "no iss": keys.rs256(no_iss),
        "neither": keys.rs256(claims()),
    }.items():
        status, body = await status_for(harness, token, auth=cfg)
        assert (status, body["error"]) == (401, "unauthorized"), name
    assert (await status_for(harness, keys.rs256(idp(claims())), auth=cfg))[0] == 404


async def test_unknown_kids_do_not_hammer_the_jwks_endpoint(harness: Harness, jwks: tuple[Jwks, str]) -> None:
    """Tokens with made-up key ids force at most one refetch per cooldown (PyJWT's PyJWKClient)."""
    keys, url = jwks
    cfg = AuthConfig(jwks_url=url, audience="signoff-api", issuer=ISS, jwks_cooldown_s=300)
    async with client_for(harness, auth=cfg) as client:
        for i in range(10):
            token = keys.rs256(idp(claims()), kid=f"made-up-{i}")
            r = await client.get(PROBE, headers={"Authorization": f"Bearer {token}"})
            assert r.status == 401
    assert keys.fetches <= 2
