"""The Shopify webhooks face in the registry (``bot.app.FACES``): only with a Shopify backend."""

from __future__ import annotations

from bot.faces import Face, FaceKit, Plain


def face(kit: FaceKit) -> Face | None:
    if kit.settings.signoff_backend != "shopify":
        return None
    from bot.shopify.face import FACE, ShopifyFace
    from shopify.writes import ShopifyBackend

    assert isinstance(kit.backend, ShopifyBackend)
    webhooks = ShopifyFace(config=kit.settings.shopify_config(), backend=kit.backend, port=kit.port)
    return Plain(name=FACE, handler=webhooks.handle, served=webhooks.routes())
