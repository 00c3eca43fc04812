"""The HTTP JSON API face in the registry (``bot.app.FACES``): ``/api/*`` over the port, always
on (a deployment without ``SIGNOFF_JWT_SECRET`` or ``SIGNOFF_JWKS_URL`` answers 401 to every
token). It answers in the request, so it accepts nothing for the worker and has no notifier: a
later answer waits in the conversation (``GET /api/conversations/{id}``), and a hand-off's
replies reach API customers there too (the relay's own end)."""

from __future__ import annotations

from bot.api.auth import AuthConfig, Authenticator
from bot.faces import Face, FaceKit, Plain

#: The conversations' channel and the face's name.
FACE = "api"


def face(kit: FaceKit) -> Face:
    return build(kit, AuthConfig.from_settings(kit.settings))


def build(kit: FaceKit, auth: AuthConfig) -> Face:
    """The API face with ``auth`` (tests give their own)."""
    from bot.api import routes

    state = routes.make_state(kit.port, kit.backend, Authenticator(auth, kit.backend, kit.port))
    return Plain(name=FACE, served=routes.routes(state), inner=state)
