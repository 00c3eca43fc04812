"""`shopify/pages.py`: the shop's legal policies and published pages as neutral records."""

from __future__ import annotations

from shopify.pages import fetch_documents
from tests.shopify_backend_kit import fake_shop


async def test_policies_then_pages_with_their_html() -> None:
    async with fake_shop() as (api, backend):
        docs = await fetch_documents(backend.client)
        kinds = [(d.doc_id, d.kind) for d in docs]
        policies = [k for k in kinds if k[1] == "policy"]
        assert policies[:2] == [("refund-policy", "policy"), ("shipping-policy", "policy")]
        assert ("privacy-policy", "policy") in policies
        pages = [d for d in docs if d.kind == "help"]
        assert pages and all(d.doc_id.startswith("page-") and "<section" in d.body_html for d in pages)
        assert all(d.title for d in docs)
        assert api.operations_named("shopPolicies") or api.operations_named("shop")
