"""Tracing driver: the canonical refund conversation in a process of its own, built by the
real composition root from the environment, so that ``OTEL_EXPORTER_OTLP_ENDPOINT`` is
read exactly as in production.

    python tests/tracing/canonical_driver.py DB_PATH

The model is the real ``AnthropicClient`` (``ANTHROPIC_BASE_URL`` points at the test's fake).
Prints one JSON line: the conversation, run trace id, approval id and what tracing was on.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from opentelemetry import trace  # noqa: E402

from bot.app import create_app  # noqa: E402
from bot.settings import load_settings  # noqa: E402
from sandbox.schema import upgrade  # noqa: E402
from tests.support import C7, SUP_A  # noqa: E402


async def main(db_path: str) -> None:
    url = f"sqlite+aiosqlite:///{db_path}"
    await upgrade(url)
    settings = load_settings()
    assert settings.signoff_database_url == url, settings.signoff_database_url
    app = await create_app(settings)
    rt = app.runtime
    first = await rt.chat(
        principal=C7, channel="api", message="Where is my order O-1042? It arrived damaged, refund it."
    )
    confirmed = await rt.confirm(first.pending[0].id, actor=C7, accept=True)
    approval = confirmed.approval
    assert approval is not None and approval.status == "pending", approval
    decided = await rt.decide(approval.id, expected_version=approval.version, decision="approve", actor=SUP_A)
    assert decided.result is not None and decided.result["status"] == "REFUNDED", decided.result
    await rt.resume(approval.id)
    run = await rt.s.conversations.get_run(first.run_id)
    assert run is not None
    print(
        json.dumps(
            {
                "conversation_id": first.conversation_id,
                "trace_id": run.trace_id,
                "approval_id": approval.id,
                "tracing": app.tracing is not None,
                "provider": type(trace.get_tracer_provider()).__name__,
            }
        )
    )
    await app.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
