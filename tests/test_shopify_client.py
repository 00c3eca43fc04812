"""The Shopify client's own parts: money, ids, the cost bucket, tokens, throttling, secrets."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from pydantic import SecretStr

from shopify.auth import ClientCredentials, StaticToken
from shopify.client import AdminClient, ShopifyUnavailable
from shopify.config import ShopifyConfig, shopify_config
from shopify.ids import customer_gid, key_target, order_ref
from shopify.money import MoneyShapeError, from_minor, to_minor
from shopify.throttle import CostBucket, ThrottleStatus

SECRET = "shpss_very-secret-client-secret"
TOKEN = "shpat_the-live-access-token"


@pytest.mark.parametrize(
    ("amount", "currency", "minor"),
    [("18.90", "USD", 1890), ("18.9", "USD", 1890), ("500", "JPY", 500), ("1.234", "KWD", 1234), ("0.00", "EUR", 0)],
)
def test_money_converts_exactly_with_the_currency_exponent(amount: str, currency: str, minor: int) -> None:
    assert to_minor(amount, currency) == minor
    assert to_minor(from_minor(minor, currency), currency) == minor


@pytest.mark.parametrize(("amount", "currency"), [("1.005", "USD"), ("1.5", "JPY"), ("abc", "USD"), ("NaN", "USD")])
def test_money_that_is_not_a_whole_minor_unit_is_refused(amount: str, currency: str) -> None:
    with pytest.raises(MoneyShapeError):
        to_minor(amount, currency)


def test_ids() -> None:
    assert customer_gid("7") == "gid://shopify/Customer/7"
    assert customer_gid("gid://shopify/Customer/7") == "gid://shopify/Customer/7"
    assert customer_gid("gid://shopify/Order/7") is None and customer_gid("C-1") is None
    assert order_ref("#1001") == ("name", "#1001") == order_ref("1001")
    assert order_ref("gid://shopify/Order/55") == ("gid", "gid://shopify/Order/55")
    assert order_ref("O-1042") is None and order_ref("#10; drop") is None
    assert key_target("refund:#1001:1500:USD:-") == ("refund", "#1001")
    assert key_target("cancel:gid://shopify/Order/9") == ("cancel", "gid://shopify/Order/9")
    assert key_target("contact:gid://shopify/Customer/3:abc") == ("contact", "gid://shopify/Customer/3")
    assert key_target("nonsense") is None


def test_the_bucket_says_how_long_until_a_call_fits() -> None:
    bucket = CostBucket()
    assert bucket.wait_s(now=0.0) == 0.0
    bucket.observe(ThrottleStatus(maximum=1000, available=10, restore_rate=50), 110, now=100.0)
    assert bucket.wait_s(now=100.0) == pytest.approx(2.0)
    assert bucket.wait_s(now=101.0) == pytest.approx(1.0)
    assert bucket.wait_s(now=103.0) == 0.0


def test_config_errors_name_the_variable() -> None:
    base: dict[str, Any] = dict(shop="s.myshopify.com", api_version=None, client_id=None, client_secret=None,
                                access_token="t", webhook_secret=None, admin_url=None)  # fmt: skip
    with pytest.raises(ValueError, match=r"^SIGNOFF_SHOPIFY_SHOP:"):
        shopify_config(**{**base, "shop": None})
    with pytest.raises(ValueError, match=r"^SIGNOFF_SHOPIFY_SHOP:"):
        shopify_config(**{**base, "shop": "https://evil.example/"})
    with pytest.raises(ValueError, match=r"^SIGNOFF_SHOPIFY_API_VERSION:"):
        shopify_config(**{**base, "api_version": "latest"})
    with pytest.raises(ValueError, match=r"^SIGNOFF_SHOPIFY_CLIENT_ID:"):
        shopify_config(**{**base, "access_token": None})
    with pytest.raises(ValueError, match=r"^SIGNOFF_SHOPIFY_CLIENT_SECRET:"):
        shopify_config(**{**base, "client_id": "abc"})
    with pytest.raises(ValueError, match=r"^SIGNOFF_SHOPIFY_ADMIN_URL:"):
        shopify_config(**{**base, "admin_url": "ftp://x"})
    cfg = shopify_config(**{**base, "access_token": None, "client_id": "id", "client_secret": SECRET})
    assert cfg.webhook_secret is not None and cfg.webhook_secret.get_secret_value() == SECRET
    assert cfg.graphql_url == "https://s.myshopify.com/admin/api/2026-10/graphql.json"


class Shop:
    """A scripted Admin API endpoint: the token grant and GraphQL answers in order."""

    def __init__(self) -> None:
        self.grants = 0
        self.answers: list[tuple[int, dict[str, Any]]] = []
        self.seen_tokens: list[str] = []
        self.in_flight = self.max_in_flight = 0
        self.delay = 0.0

    async def token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("client_secret") != SECRET or form.get("grant_type") != "client_credentials":
            return web.json_response({"error": "invalid_client"}, status=401)
        self.grants += 1
        await asyncio.sleep(0.05)
        return web.json_response(
            {"access_token": f"{TOKEN}-{self.grants}", "scope": "read_orders", "expires_in": 86399}
        )

    async def graphql(self, request: web.Request) -> web.Response:
        self.seen_tokens.append(request.headers.get("X-Shopify-Access-Token", ""))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            status, body = self.answers.pop(0) if self.answers else (200, _ok())
            return web.json_response(body, status=status)
        finally:
            self.in_flight -= 1


def _ok(available: float = 990) -> dict[str, Any]:
    cost = {
        "requestedQueryCost": 10,
        "throttleStatus": {"maximumAvailable": 1000, "currentlyAvailable": available, "restoreRate": 50},
    }
    return {"data": {"job": {"id": "gid://shopify/Job/1", "done": True}}, "extensions": {"cost": cost}}


@pytest.fixture
async def shop() -> AsyncIterator[tuple[Shop, str]]:
    s = Shop()
    app = web.Application()
    app.router.add_post("/admin/oauth/access_token", s.token)
    app.router.add_post("/admin/api/2026-10/graphql.json", s.graphql)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield s, f"http://127.0.0.1:{port}"
    await runner.cleanup()


def _config(base: str, **kw: Any) -> ShopifyConfig:
    return ShopifyConfig(shop="s.myshopify.com", admin_url=base, client_id="cid", client_secret=SecretStr(SECRET), **kw)


async def test_concurrent_callers_share_one_token_request_and_it_is_renewed_before_expiry(
    shop: tuple[Shop, str],
) -> None:
    s, base = shop
    clock = [0.0]
    client = AdminClient(_config(base), StaticToken(SecretStr("x")))
    tokens = ClientCredentials(url=_config(base).token_url, client_id="cid", client_secret=SecretStr(SECRET),
                               session=client.session, monotonic=lambda: clock[0])  # fmt: skip
    got = await asyncio.gather(*(tokens.token() for _ in range(10)))
    assert s.grants == 1 and {t.get_secret_value() for t in got} == {f"{TOKEN}-1"}
    clock[0] = 86399 - 601  # still inside its life, before the renewal margin
    assert (await tokens.token()).get_secret_value() == f"{TOKEN}-1"
    clock[0] = 86399 - 599  # inside the margin: renewed before it expires
    assert (await tokens.token()).get_secret_value() == f"{TOKEN}-2"
    await client.close()


async def test_secrets_never_show_in_repr_errors_or_logs(
    shop: tuple[Shop, str], caplog: pytest.LogCaptureFixture
) -> None:
    s, base = shop
    caplog.set_level(logging.DEBUG)
    cfg = _config(base, access_token=SecretStr(TOKEN))
    client = AdminClient(cfg, StaticToken(SecretStr(TOKEN)))
    s.answers = [(502, {"errors": "bad gateway"})] * 3
    with pytest.raises(ShopifyUnavailable) as err:
        await client.execute("Job", {"id": "gid://shopify/Job/1"})
    creds = ClientCredentials(
        url=cfg.token_url, client_id="cid", client_secret=SecretStr(SECRET), session=client.session
    )
    shown = " ".join(
        [
            repr(cfg),
            str(cfg),
            repr(client),
            repr(creds),
            repr(StaticToken(SecretStr(TOKEN))),
            str(err.value),
            caplog.text,
        ]
    )
    assert SECRET not in shown and TOKEN not in shown
    assert s.seen_tokens == [TOKEN] * 3  # it was sent, as the header, and only there
    await client.close()


async def test_throttled_is_waited_out_not_failed(shop: tuple[Shop, str]) -> None:
    s, base = shop
    slept: list[float] = []
    clock = [0.0]

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    client = AdminClient(
        _config(base, access_token=SecretStr(TOKEN)),
        StaticToken(SecretStr(TOKEN)),
        sleep=sleep,
        monotonic=lambda: clock[0],
    )
    cost = {
        "requestedQueryCost": 100,
        "throttleStatus": {"maximumAvailable": 1000, "currentlyAvailable": 20, "restoreRate": 50},
    }
    throttled = {
        "errors": [{"message": "Throttled", "extensions": {"code": "THROTTLED"}}],
        "extensions": {"cost": cost},
    }
    s.answers = [(200, throttled), (200, throttled), (200, _ok())]
    data = await client.execute("Job", {"id": "gid://shopify/Job/1"})
    assert data["job"]["done"] is True
    assert slept == [pytest.approx(1.6), pytest.approx(1.6)]  # (100 - 20) / 50 each time, then it fits
    await client.close()


async def test_a_mutation_that_met_a_502_is_not_sent_again(shop: tuple[Shop, str]) -> None:
    s, base = shop
    client = AdminClient(_config(base, access_token=SecretStr(TOKEN)), StaticToken(SecretStr(TOKEN)))
    s.answers = [(502, {}), (200, _ok())]
    with pytest.raises(ShopifyUnavailable):
        await client.execute("RefundCreate", {"input": {"orderId": "gid://shopify/Order/1"}, "key": "k"})
    assert len(s.seen_tokens) == 1
    await client.close()


async def test_the_shops_concurrent_calls_are_bounded_and_the_loop_stays_free(shop: tuple[Shop, str]) -> None:
    s, base = shop
    s.delay = 0.1
    client = AdminClient(_config(base, access_token=SecretStr(TOKEN), max_concurrency=2), StaticToken(SecretStr(TOKEN)))
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    t = asyncio.create_task(ticker())
    await asyncio.gather(*(client.execute("Job", {"id": "gid://shopify/Job/1"}) for _ in range(6)))
    t.cancel()
    assert s.max_in_flight == 2
    assert ticks >= 15  # ~0.3 s of calls; the loop kept ticking throughout
    await client.close()
