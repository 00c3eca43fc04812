"""The chat widget's line in the registry (``bot.app.FACES``): on with ``SIGNOFF_WIDGET=true``."""

from __future__ import annotations

from bot.faces import Face, FaceKit, Plain


def face(kit: FaceKit) -> Face | None:
    if not kit.settings.signoff_widget:
        return None
    from bot.api.auth import AuthConfig
    from bot.widget.config import FACE, WidgetConfig
    from bot.widget.face import WidgetFace

    widget = WidgetFace(
        WidgetConfig.from_settings(kit.settings), backend=kit.backend, auth=AuthConfig.from_settings(kit.settings)
    )
    widget.attach(kit.port)
    return Plain(name=FACE, handler=widget.handle, notifier=widget, served=widget.routes(), inner=widget)
