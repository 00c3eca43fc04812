"""pytest plugin: the model-call tripwire, on for every test; no telemetry export unless
a test sets it up itself; ``sdk_sleeps``, which records the vendor SDKs' retry waits; and the
Shopify schema check: a test during which the fake Admin API (in this process or in one it
started) refused an operation as invalid against the real schema fails, unless it is marked
``sends_invalid_shopify_operations`` (the fake's own tests, which send bad ones on purpose,
open the fake with ``allow_invalid=True`` instead).

Enable with ``pytest_plugins = ["tests.fakes.plugin"]`` in the root conftest.
A test that really must reach a non-loopback model opts in with
``@pytest.mark.allow_model_requests``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.llm.testing import allow_real_model_calls, block_real_model_calls

#: Variables that would make the composition root export spans (to a developer's collector).
OTEL_EXPORT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def pytest_configure(config: pytest.Config) -> None:
    """Register the opt-in marker."""
    config.addinivalue_line("markers", "allow_model_requests: let model clients call non-loopback hosts")
    config.addinivalue_line(
        "markers", "sends_invalid_shopify_operations: the fake Admin API may refuse this test's operations"
    )
    # The fake in another process reports what it refused here (one file per test process).
    refused = Path(tempfile.gettempdir()) / f"signoff-shopify-refused-{os.getpid()}.jsonl"
    refused.unlink(missing_ok=True)
    os.environ[REFUSED_FILE_ENV] = str(refused)
    config.addinivalue_line(
        "markers", "bundled_eval: runs the bundled eval suites on both backends (minutes; CI runs it)"
    )


@pytest.fixture(autouse=True)
def _model_call_tripwire(request: pytest.FixtureRequest) -> Iterator[None]:
    """Model clients refuse non-loopback base URLs unless the test opts in."""
    if request.node.get_closest_marker("allow_model_requests") is not None:
        with allow_real_model_calls():
            yield
    else:
        with block_real_model_calls():
            yield


@pytest.fixture(autouse=True)
def _no_telemetry_export(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never export spans to whatever collector the shell points at."""
    for name in OTEL_EXPORT_VARIABLES:
        monkeypatch.delenv(name, raising=False)


#: ``tests.fakes.shopify_api.REFUSED_FILE_ENV`` (not imported: most tests never load graphql-core).
REFUSED_FILE_ENV = "SIGNOFF_FAKE_SHOPIFY_REFUSED"


def refused_operations() -> list[dict[str, object]]:
    """Every operation a fake Admin API refused so far, in this process and in the fakes it started."""
    module = sys.modules.get("tests.fakes.shopify_api")
    here: list[dict[str, object]] = [
        {"name": op.name, "errors": list(op.errors), "query": op.query} for op in getattr(module, "REFUSED", ())
    ]
    path = Path(os.environ.get(REFUSED_FILE_ENV, "")) if os.environ.get(REFUSED_FILE_ENV) else None
    if path is not None and path.is_file():
        here += [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    return here


@pytest.fixture(autouse=True)
def _shopify_operations_are_valid(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test if an operation our code sent the fake Admin API failed schema validation."""
    seen = len(refused_operations())
    yield
    if request.node.get_closest_marker("sends_invalid_shopify_operations") is not None:
        return
    new = refused_operations()[seen:]
    if new:
        pytest.fail(f"operations failed Admin API schema validation: {new}", pytrace=False)


class SdkSleeps:
    """The waits the vendor SDKs' retry loops asked for, in order, instead of sleeping."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def sleep(self, delay: float) -> None:
        self.delays.append(round(delay, 6))


@pytest.fixture
def sdk_sleeps(monkeypatch: pytest.MonkeyPatch) -> SdkSleeps:
    """Record the ``anthropic`` and ``openai`` SDKs' retry waits instead of sleeping them.

    Both SDKs wait between attempts with ``anyio.sleep`` and take their jitter from
    ``random()`` in ``_base_client``; this replaces exactly those two names there (jitter
    0, so a backoff is its full step). ``monkeypatch`` fails loudly if an SDK upgrade
    renames them, which is when these contract tests must be looked at again.
    """
    import anthropic._base_client
    import openai._base_client

    sleeps = SdkSleeps()
    for module in (anthropic._base_client, openai._base_client):
        monkeypatch.setattr(module, "anyio", SimpleNamespace(sleep=sleeps.sleep))
        monkeypatch.setattr(module, "random", lambda: 0.0)
    return sleeps
