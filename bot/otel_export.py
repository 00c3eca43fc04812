"""The OpenTelemetry SDK side of :mod:`bot.telemetry`: imported only when export is configured
(the SDK, the OTLP exporter and the instrumentations cost ~16 MB of a process's memory)."""

from __future__ import annotations

import logging
import random
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

log = logging.getLogger("bot.telemetry")


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


def install(db: Database) -> TracerProvider:
    """Install the SDK once per process (a second app shares the first one's provider);
    instrument ``db``'s engines."""
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        agent_tracing.enable()
        return current  # a second app in this process shares the first one's
    provider = TracerProvider(resource=_resource(), id_generator=RunTraceIds())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    AioHttpClientInstrumentor().instrument(tracer_provider=provider)
    # The instrumentation declares sqlalchemy<2.1 but works on 2.1 (tests/test_tracing.py
    # asserts its statement spans); skip the declared-range check rather than lose them.
    SQLAlchemyInstrumentor().instrument(engines=_engines(db), tracer_provider=provider, skip_dep_check=True)
    agent_tracing.enable()
    log.info("tracing: exporting spans over OTLP")
    return provider


def _engines(db: Database) -> list[Any]:
    engines: list[Any] = [db.engine.sync_engine]
    if db.sync_writer is not None:
        engines.append(db.sync_writer.engine)
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


__all__ = ["RunTraceIds", "install"]
