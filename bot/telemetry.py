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
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import structlog
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor
from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator

from agent import tracing as agent_tracing
from storage.db import Database

log = logging.getLogger(__name__)

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


class RunTraceIds(IdGenerator):
    """Root spans started inside a run take the run's ``trace_id`` (the one the audit log and
    the JSON logs carry, bound by the runtime); anything else gets a random one."""

    def generate_span_id(self) -> int:
        return random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        bound = structlog.contextvars.get_contextvars().get("trace_id")
        if isinstance(bound, str) and len(bound) == 32:
            try:
                value = int(bound, 16)
            except ValueError:
                value = 0
            if value:
                return value
        return random.getrandbits(128) or 1

    def is_trace_id_random(self) -> bool:
        # Run trace ids are uuid4 hex: their low 56 bits are random, as samplers need.
        return True


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

    Returns None, having touched nothing, when no endpoint is configured.
    """
    if not exporting(env):
        return None
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        agent_tracing.enable()
        return Tracing(provider=current)  # a second app in this process shares the first one's
    provider = TracerProvider(resource=_resource(), id_generator=RunTraceIds())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    AioHttpClientInstrumentor().instrument(tracer_provider=provider)
    # The instrumentation declares sqlalchemy<2.1 but works on 2.1 (tests/test_tracing.py
    # asserts its statement spans); skip the declared-range check rather than lose them.
    SQLAlchemyInstrumentor().instrument(engines=_engines(db), tracer_provider=provider, skip_dep_check=True)
    agent_tracing.enable()
    log.info("tracing: exporting spans over OTLP")
    return Tracing(provider=provider)


def _engines(db: Database) -> list[Any]:
    engines: list[Any] = [db.engine.sync_engine]
    if db.sync_writer is not None:
        engines.extend(db.sync_writer.engines)
    return engines


def _resource() -> Resource:
    detected = Resource.create()
    named = str(detected.attributes.get(SERVICE_NAME, ""))
    attributes: dict[str, str] = {SERVICE_VERSION: _version()}
    if not named or named.startswith("unknown_service"):
        attributes[SERVICE_NAME] = "signoff"
    return Resource.create(attributes)


def _version() -> str:
    try:
        return version("signoff")
    except PackageNotFoundError:
        return "0"


__all__ = ["RunTraceIds", "Tracing", "exporting", "install_tracing"]
