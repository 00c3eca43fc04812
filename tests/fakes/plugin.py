"""pytest plugin: the model-call tripwire, on for every test.

Enable with ``pytest_plugins = ["tests.fakes.plugin"]`` in the root conftest.
A test that really must reach a non-loopback model opts in with
``@pytest.mark.allow_model_requests``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent.llm.testing import allow_real_model_calls, block_real_model_calls


def pytest_configure(config: pytest.Config) -> None:
    """Register the opt-in marker."""
    config.addinivalue_line(
        "markers", "allow_model_requests: let model clients call non-loopback hosts"
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
