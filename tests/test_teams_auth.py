"""Inbound Teams authentication: real RS256 validation by the Agents SDK against a local
JWKS, plus our pre-checks, the mandatory exp, the serviceurl binding and the host allow-list."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.teams.auth import AuthFailure, InboundAuthenticator, ServiceUrlPolicy, VerifiedCaller
from bot.teams.config import TeamsConfig, TeamsConfigError
from tests.fakes.bot_connector import APP_ID, TENANT_ID, TokenIssuer

TEAMS_URL = "https://smba.trafficmanager.net/amer/"
ENTRA_V2 = f"https://login.microsoftonline.com/{TENANT_ID}/v2.0"


@pytest.fixture
async def issuer() -> AsyncIterator[TokenIssuer]:
    async with TokenIssuer() as server:
        yield server


def make_auth(issuer: TokenIssuer, **overrides: object) -> InboundAuthenticator:
    config = TeamsConfig(
        app_id=APP_ID,
        tenant_id=TENANT_ID,
        botframework_jwks_url=issuer.jwks_url,
        entra_jwks_url=issuer.jwks_url,
        **overrides,
    )  # type: ignore[arg-type]
    return InboundAuthenticator(config)


async def refused(auth: InboundAuthenticator, header: str | None) -> AuthFailure:
    with pytest.raises(AuthFailure) as caught:
        await auth.verify(header)
    return caught.value


async def test_a_bot_framework_token_signed_by_the_jwks_key_is_accepted(issuer: TokenIssuer) -> None:
    """The SDK validator fetched the local JWKS and verified the RS256 signature."""
    caller = await make_auth(issuer).verify("Bearer " + issuer.mint(audience=APP_ID, service_url=TEAMS_URL))
    assert not caller.anonymous
    assert caller.service_url == TEAMS_URL
    assert caller.claims["aud"] == APP_ID
    assert [r.path for r in issuer.requests] == ["/keys"]


async def test_a_token_signed_by_another_key_is_refused(issuer: TokenIssuer) -> None:
    failure = await refused(
        make_auth(issuer), "Bearer " + issuer.mint(audience=APP_ID, service_url=TEAMS_URL, rogue=True)
    )
    assert failure.code == "bad_token"


async def test_an_expired_token_is_refused(issuer: TokenIssuer) -> None:
    token = issuer.mint(audience=APP_ID, service_url=TEAMS_URL, expires_in=-3600)
    assert (await refused(make_auth(issuer), "Bearer " + token)).code == "bad_token"


async def test_a_token_without_exp_is_refused_although_pyjwt_would_not_require_it(issuer: TokenIssuer) -> None:
    token = issuer.mint(audience=APP_ID, service_url=TEAMS_URL, drop=("exp",))
    assert (await refused(make_auth(issuer), "Bearer " + token)).code == "bad_token"


async def test_a_token_for_another_audience_is_refused_before_any_key_is_fetched(issuer: TokenIssuer) -> None:
    token = issuer.mint(audience="00000000-0000-0000-0000-000000000000", service_url=TEAMS_URL)
    await refused(make_auth(issuer), "Bearer " + token)
    assert issuer.requests == []


async def test_a_token_from_a_foreign_issuer_is_refused_before_any_key_is_fetched(issuer: TokenIssuer) -> None:
    token = issuer.mint(audience=APP_ID, service_url=TEAMS_URL, issuer="https://login.evil.example/")
    await refused(make_auth(issuer), "Bearer " + token)
    assert issuer.requests == []


async def test_an_hs256_token_is_refused_no_algorithm_confusion(issuer: TokenIssuer) -> None:
    token = issuer.mint(audience=APP_ID, service_url=TEAMS_URL, algorithm="HS256")
    await refused(make_auth(issuer), "Bearer " + token)


async def test_a_token_whose_kid_is_not_in_the_jwks_is_refused(issuer: TokenIssuer) -> None:
    token = issuer.mint(audience=APP_ID, service_url=TEAMS_URL, kid="unknown-key")
    await refused(make_auth(issuer), "Bearer " + token)


async def test_an_entra_token_of_our_tenant_is_accepted_and_a_mismatched_tid_is_refused(issuer: TokenIssuer) -> None:
    """The SDK always binds an Entra issuer's tenant to the tid claim."""
    auth = make_auth(issuer)
    ok = await auth.verify(
        "Bearer " + issuer.mint(audience=APP_ID, service_url=TEAMS_URL, issuer=ENTRA_V2, tid=TENANT_ID)
    )
    assert ok.claims["tid"] == TENANT_ID
    other = "99999999-9999-4999-8999-999999999999"
    await refused(auth, "Bearer " + issuer.mint(audience=APP_ID, service_url=TEAMS_URL, issuer=ENTRA_V2, tid=other))


@pytest.mark.parametrize("header", [None, "", "Basic dXNlcjpwYXNz", "Bearer", "Bearer a b", "bearer  ", "tokenonly"])
async def test_missing_or_malformed_authorization_headers_are_refused(issuer: TokenIssuer, header: str | None) -> None:
    failure = await refused(make_auth(issuer), header)
    assert failure.code in ("missing_token", "bad_token")
    assert issuer.requests == []


async def test_garbage_that_is_not_a_jwt_is_refused(issuer: TokenIssuer) -> None:
    await refused(make_auth(issuer), "Bearer not.a.jwt")


async def test_anonymous_requests_get_in_only_with_the_explicit_dev_flag(issuer: TokenIssuer) -> None:
    assert (await refused(make_auth(issuer), None)).code == "missing_token"
    caller = await make_auth(issuer, dev_allow_anonymous=True).verify(None)
    assert caller.anonymous
    # A token that is present is still checked under the dev flag.
    await refused(make_auth(issuer, dev_allow_anonymous=True), "Bearer not.a.jwt")


def signed(service_url: str) -> VerifiedCaller:
    return VerifiedCaller(anonymous=False, claims={"serviceurl": service_url, "exp": 1})


async def test_the_activity_service_url_must_be_the_one_the_token_names(issuer: TokenIssuer) -> None:
    auth = make_auth(issuer)
    auth.check_activity(signed(TEAMS_URL), TEAMS_URL)
    auth.check_activity(signed("https://SMBA.trafficmanager.net/amer/"), "https://smba.trafficmanager.net/emea/")
    with pytest.raises(AuthFailure) as caught:
        auth.check_activity(signed(TEAMS_URL), "https://smba.botframework.com/amer/")
    assert caught.value.code == "service_url_mismatch"
    with pytest.raises(AuthFailure):
        auth.check_activity(VerifiedCaller(anonymous=False, claims={"exp": 1}), TEAMS_URL)


async def test_a_service_url_off_the_allow_list_is_refused_even_when_the_token_names_it(issuer: TokenIssuer) -> None:
    """Anti-SSRF: the host validator is on whatever the token says."""
    auth = make_auth(issuer)
    for url in (
        "https://attacker.example/",
        "http://smba.trafficmanager.net/amer/",
        "https://10.0.0.7/",
        "http://127.0.0.1:8080/",
    ):
        with pytest.raises(AuthFailure) as caught:
            auth.check_activity(signed(url), url)
        assert caught.value.code == "service_url_not_allowed"


def test_the_service_url_policy_allows_microsoft_hosts_configured_hosts_and_configured_loopback_only() -> None:
    policy = ServiceUrlPolicy(
        TeamsConfig(app_id=APP_ID, tenant_id=TENANT_ID, service_url_allow=("bots.contoso.example", "http://127.0.0.1"))
    )
    assert policy.allows("https://smba.trafficmanager.net/amer/")
    assert policy.allows("https://eu.bots.contoso.example/x")
    assert policy.allows("http://127.0.0.1:39001/")
    assert not policy.allows("http://localhost:39001/")  # only the loopback name configured
    assert not policy.allows("http://user:pw@127.0.0.1:39001/")
    assert not policy.allows("https://contoso.example/")
    assert not policy.allows("ftp://smba.trafficmanager.net/")
    assert not policy.allows("https://smba.trafficmanager.net:99999/")


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"app_id": "not-a-guid"}, "SIGNOFF_TEAMS_APP_ID"),
        ({"tenant_id": "x"}, "SIGNOFF_TEAMS_TENANT_ID"),
        ({"service_url_allow": ("http://evil.example",)}, "SIGNOFF_TEAMS_SERVICE_URL_ALLOW"),
        ({"service_url_allow": ("127.0.0.1",)}, "SIGNOFF_TEAMS_SERVICE_URL_ALLOW"),
        ({"allowed_tenants": ("acme",)}, "SIGNOFF_TEAMS_ALLOWED_TENANTS"),
        ({"app_password": "s", "certificate_pfx": "/k.pfx"}, "SIGNOFF_TEAMS_APP_PASSWORD"),
    ],
)
def test_a_bad_setting_is_one_error_naming_the_variable(kwargs: dict[str, object], names: str) -> None:
    base: dict[str, object] = {"app_id": APP_ID, "tenant_id": TENANT_ID}
    with pytest.raises(TeamsConfigError, match=names):
        TeamsConfig(**{**base, **kwargs})  # type: ignore[arg-type]
