"""The shop's legal policies and Online Store pages, for ``signoff knowledge sync``.

Neutral records the knowledge importer takes (it owns ids, versions and sections): a document
id, its title, its body HTML and its kind (``policy`` for the refund, shipping, privacy and
terms-of-service policies; ``help`` for published pages)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shopify.client import AdminClient

#: The policies signoff imports, by ``ShopPolicyType``, with the document id each becomes.
POLICY_IDS = {
    "REFUND_POLICY": "refund-policy",
    "SHIPPING_POLICY": "shipping-policy",
    "PRIVACY_POLICY": "privacy-policy",
    "TERMS_OF_SERVICE": "terms-of-service",
}
#: Pages read at most (50 a request).
MAX_PAGES = 500


@dataclass(frozen=True, kw_only=True)
class ShopDocument:
    """One policy or page of the shop."""

    doc_id: str
    title: str
    body_html: str
    kind: Literal["policy", "help"]


async def fetch_documents(client: AdminClient) -> list[ShopDocument]:
    """The shop's four legal policies (those it has) and its published pages, policies first."""
    out: list[ShopDocument] = []
    policies = (await client.execute("ShopPolicies"))["shop"]["shopPolicies"]
    for p in sorted(policies, key=lambda p: list(POLICY_IDS).index(p["type"]) if p["type"] in POLICY_IDS else 99):
        doc_id = POLICY_IDS.get(str(p.get("type")))
        if doc_id is not None and str(p.get("body") or "").strip():
            out.append(ShopDocument(doc_id=doc_id, title=str(p["title"]), body_html=str(p["body"]), kind="policy"))
    after: str | None = None
    seen = 0
    while seen < MAX_PAGES:
        page = (await client.execute("Pages", {"after": after}))["pages"]
        for node in page["nodes"]:
            seen += 1
            if node.get("isPublished") and str(node.get("body") or "").strip():
                out.append(
                    ShopDocument(
                        doc_id=f"page-{node['handle']}"[:64],
                        title=str(node["title"]),
                        body_html=str(node["body"]),
                        kind="help",
                    )
                )
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    return out
