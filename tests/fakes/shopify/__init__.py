"""The parts of the fake Shopify GraphQL Admin API (``tests/fakes/shopify_api.py`` is the
server): the real 2026-10 schema and validation, the in-memory shop, its seeding from the
sandbox dataset, resolvers, mutations, cost throttling and signed webhooks."""
