"""The Shopify commerce backend: ``CommerceBackend`` over the GraphQL Admin API.

The only package that knows Shopify. Every operation is a ``.graphql`` document under
``operations/`` (checked against the vendored schema in ``schema/``)."""
