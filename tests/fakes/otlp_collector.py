"""A fake OpenTelemetry collector: OTLP/HTTP ``POST /v1/traces`` (protobuf, optionally
gzip), decoded into :class:`ExportedSpan` records. Binds 127.0.0.1 port 0 like the other
fakes; point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at :attr:`base_url`."""

from __future__ import annotations

import asyncio
import gzip
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tests.fakes import FakeServer, RecordedRequest


@dataclass(frozen=True, kw_only=True)
class ExportedSpan:
    """One span as the collector received it (ids as lower-case hex)."""

    name: str
    scope: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    status_code: int
    attributes: dict[str, Any]
    resource: dict[str, Any]


def _value(v: AnyValue) -> Any:
    field = v.WhichOneof("value")
    if field == "array_value":
        return [_value(x) for x in v.array_value.values]
    if field == "kvlist_value":
        return _attributes(v.kvlist_value.values)
    return getattr(v, field) if field else None


def _attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs if isinstance(kv, KeyValue)}


class FakeCollector(FakeServer):
    """``async with FakeCollector() as otlp:`` then read :attr:`spans`."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[ExportedSpan] = []
        self._span_arrived = asyncio.Event()

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/traces", self._traces)]

    async def _traces(self, request: web.Request) -> web.Response:
        raw = await request.read()
        if request.headers.get("content-encoding") == "gzip":
            raw = gzip.decompress(raw)
        message = ExportTraceServiceRequest()
        message.ParseFromString(raw)
        for rs in message.resource_spans:
            resource = _attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append(
                        ExportedSpan(
                            name=s.name,
                            scope=ss.scope.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                            kind=s.kind,
                            status_code=s.status.code,
                            attributes=_attributes(s.attributes),
                            resource=resource,
                        )
                    )
        self.record(
            RecordedRequest(
                method=request.method,
                path=request.path,
                status=200,
                body=None,
                headers={k.lower(): v for k, v in request.headers.items()},
            )
        )
        self._span_arrived.set()
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )

    def named(self, prefix: str) -> list[ExportedSpan]:
        """The spans whose name starts with ``prefix``, in arrival order."""
        return [s for s in self.spans if s.name.startswith(prefix)]
