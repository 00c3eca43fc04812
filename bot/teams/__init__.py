"""The Microsoft Teams face: inbound authentication, activity parsing, outbound
sending and card updates, Adaptive Cards, invoke responses and the app package.

Only this package imports the Microsoft 365 Agents SDK (``microsoft_agents``).
Nothing here calls the runtime: :func:`bot.teams.routes.teams_routes` hands each
authenticated, parsed activity to an injected ``accept`` callable.
"""
