"""Tracing at the composition root: the OpenTelemetry SDK with an OTLP exporter when
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set, and
nothing at all otherwise — no provider, no exporter, no instrumentation, and the agent's
spans (:mod:`agent.tracing`) stay the API's free no-ops.

The SDK reads every other ``OTEL_*`` variable itself (headers, protocol options,
sampler, batch sizes, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``). Besides our
own spans, the official instrumentations add outbound aiohttp calls (the Slack Web API,
local fakes) and SQL statements; the Anthropic SDK adds its own ``anthropic.messages.create``
span under each model call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from storage.db import Database

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


@dataclass(frozen=True, kw_only=True)
class Tracing:
    """The installed provider; :meth:`flush` exports what is buffered (the app's ``close``)."""

    provider: TracerProvider

    async def flush(self, timeout_s: float = 10.0) -> None:
        """Export buffered spans without blocking the event loop."""
        await asyncio.to_thread(self.provider.force_flush, int(timeout_s * 1000))


def exporting(env: Mapping[str, str]) -> bool:
    """Whether the environment asks for OTLP export (and has not disabled the SDK)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def install_tracing(env: Mapping[str, str], db: Database) -> Tracing | None:
    """Install the SDK once per process when :func:`exporting`; instrument ``db``'s engines.

    Returns None, having touched nothing (not even imported the SDK), when no endpoint is configured.
    """
    if not exporting(env):
        return None
    from bot.otel_export import install

    return Tracing(provider=install(db))


__all__ = ["Tracing", "exporting", "install_tracing"]
