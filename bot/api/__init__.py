"""The HTTP JSON API face: routes, OpenAPI document, bearer-token auth, wording."""
