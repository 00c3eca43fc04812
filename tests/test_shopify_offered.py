"""A tool the shop cannot do is not offered to the model with the Shopify backend."""

from __future__ import annotations

from pydantic import SecretStr

from agent.llm.testing import ScriptedModel
from agent.services import build_services
from shopify.auth import StaticToken
from shopify.backend import SUPPORTED_TOOLS
from shopify.client import AdminClient
from shopify.config import ShopifyConfig
from shopify.writes import ShopifyBackend
from storage.db import Database
from tools.catalogue import build_registry, supported_by

NOT_OFFERED = {"get_invoices", "retry_payment", "create_reorder", "send_message", "send_password_reset",
               "send_payment_link", "list_payment_methods"}  # fmt: skip


def test_the_registry_offers_only_what_the_backend_declares_and_keeps_the_runtimes_tools() -> None:
    full = build_registry()
    shop = build_registry(SUPPORTED_TOOLS)
    assert set(full.tools) - set(shop.tools) == NOT_OFFERED
    runtime = {"search_knowledge", "finish", "load_tools", "escalate_to_human", "get_case", "add_case_note"}
    assert runtime <= set(shop.tools) and not runtime & SUPPORTED_TOOLS  # offered as the runtime's own
    assert SUPPORTED_TOOLS <= set(full.tools)  # every declared tool is a catalogue tool
    specs = {s.name for s in shop.specs_for(["account", "orders", "returns", "billing"])}
    assert not specs & NOT_OFFERED


async def test_services_over_the_shopify_backend_offer_its_tools_and_the_sandbox_all(db: Database) -> None:
    config = ShopifyConfig(shop="s.myshopify.com", admin_url="http://127.0.0.1:9", access_token=SecretStr("t"))
    backend = ShopifyBackend(AdminClient(config, StaticToken(SecretStr("t"))))
    assert supported_by(backend) == SUPPORTED_TOOLS
    services = build_services(db=db, model=ScriptedModel([]), backend=backend)
    assert "issue_refund" in services.registry.tools and "get_invoices" not in services.registry.tools
    assert "get_invoices" not in services.gatekeeper.registry.tools
