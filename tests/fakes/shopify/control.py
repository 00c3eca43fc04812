"""Not Shopify's: the routes that let ``signoff eval`` (``SIGNOFF_BACKEND=shopify``) give each
case run a fresh store, move the store's clock with the case's, and read the store back.

* ``POST /__fake__/shop`` ``{"dataset": {...}, "rebase_to": iso?, "now": iso?, "job_polls": n?}``
  replaces the store by one seeded from that sandbox dataset (:func:`seed.seed_shop`);
* ``POST /__fake__/now`` ``{"now": iso}`` sets the store's clock (``null``: the real time again);
* ``GET /__fake__/dataset``: the store as a sandbox dataset (:func:`export.export_dataset`).

A real store has none of them: that is how the evaluation tells it cannot reset one."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web

from sandbox.dataset import DatasetError, parse_dataset
from tests.fakes.shopify.export import export_dataset
from tests.fakes.shopify.seed import seed_shop

if TYPE_CHECKING:
    from tests.fakes.shopify_api import FakeShopifyAPI


def _time(value: Any) -> datetime | None:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None


def routes(api: FakeShopifyAPI) -> list[web.RouteDef]:
    """The control routes over ``api``."""

    async def shop(request: web.Request) -> web.Response:
        body = await request.json()
        try:
            dataset = parse_dataset(body.get("dataset"))
        except DatasetError as exc:
            return web.json_response({"errors": exc.errors}, status=422)
        api.pin_clock(_time(body.get("now")))
        api.reset(seed_shop(dataset, rebase_to=_time(body.get("rebase_to"))), job_polls=body.get("job_polls"))
        return web.json_response({"customers": len(api.shop.customers), "orders": len(api.shop.orders)})

    async def now(request: web.Request) -> web.Response:
        api.pin_clock(_time((await request.json()).get("now")))
        return web.json_response({"now": api.mutations.clock().isoformat()})

    async def dataset(request: web.Request) -> web.Response:
        return web.json_response(export_dataset(api.shop))

    return [web.post("/__fake__/shop", shop), web.post("/__fake__/now", now), web.get("/__fake__/dataset", dataset)]
