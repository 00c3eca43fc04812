"""The Teams face in the registry (``bot.app.FACES``): on when ``SIGNOFF_TEAMS_APP_ID`` and
``_TENANT_ID`` are set (the Agents SDK, a second's import, is loaded only then). Outbound
tokens: MSAL client credentials, or the development token (loopback connectors only). With an
approvals conversation it is a staff surface (approval cards, escalations)."""

from __future__ import annotations

from bot.faces import Face, FaceKit, Plain
from bot.settings import reveal


def face(kit: FaceKit) -> Face | None:
    s = kit.settings
    config = s.teams_config()
    if config is None:
        return None
    from bot.teams.face import FACE, TeamsFace, approvals_reference
    from bot.teams.handoff import relays
    from bot.teams.notifier import TeamsNotifier
    from bot.teams.sender import TeamsSender, dev_token_connections, msal_connections

    dev_token = reveal(s.signoff_teams_dev_outbound_token)
    connections = dev_token_connections(config, dev_token) if dev_token else msal_connections(config)
    sender = TeamsSender(config, connections=connections, loopback_only=dev_token is not None)
    conversation, service_url = s.signoff_teams_approvals_conversation, s.signoff_teams_service_url
    ref = approvals_reference(config, conversation, service_url) if conversation and service_url else None
    teams = TeamsFace(config, sender=sender, backend=kit.backend, approvals_reference=ref, clock=kit.clock)
    teams.attach(kit.port)
    return Plain(
        name=FACE,
        handler=teams.handle,
        notifier=TeamsNotifier(teams),
        staff=ref is not None,
        served=teams.routes(),
        inner=teams,
        relays=lambda relay: relays(relay, teams, staff=ref is not None),
    )
