"""A model outage (C1/C2): 429/529/5xx past the retries, then an open breaker, give the
user an honest reply, keep their message in the history, and escalate the case."""

from __future__ import annotations

import pytest

from agent.llm.anthropic import AnthropicClient, AnthropicConfig
from agent.llm.breaker import BreakerConfig, CircuitBreaker
from agent.wording import GIVE_UP_REPLY
from storage.db import Database
from tests.fakes.anthropic_api import FakeAnthropicAPI, api_error, text_turn
from tests.fakes.plugin import SdkSleeps
from tests.support import C7, seeded
from tests.test_loop_support import assert_history_valid, case_notes


@pytest.mark.parametrize("status", [429, 529, 500])
async def test_outage_past_retries_then_open_breaker_gives_an_honest_reply_and_escalates(
    db: Database, status: int, sdk_sleeps: SdkSleeps
) -> None:
    """Retries are spent (honouring retry-after), the breaker opens, and each affected turn
    answers with the fixed honest reply, keeps the user's words, and escalates once per turn.
    While the breaker is open nothing is sent to the provider."""
    now = [0.0]
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=1, cooldown_s=30), clock=lambda: now[0])
    async with FakeAnthropicAPI(lambda body: api_error(status, "down", retry_after="0.001")) as api:
        client = AnthropicClient(
            AnthropicConfig(model="claude-test", api_key="sk-test", base_url=api.base_url, max_retries=2),
            breaker=breaker,
        )
        h = await seeded(db, client)
        first = await h.runtime.chat(principal=C7, channel="api", message="Where is my order O-1042?")
        sent = len(api.requests)
        second = await h.runtime.chat(
            principal=C7, channel="api", message="Hello? Anyone there?", conversation_id=first.conversation_id
        )
        assert len(api.requests) == sent  # the open breaker sent nothing
        now[0] += 31  # cool-down over, the provider is back: the half-open trial goes through
        api.responder = lambda body: text_turn("Sorry for the wait — it was delivered.")
        third = await h.runtime.chat(
            principal=C7, channel="api", message="Still there?", conversation_id=first.conversation_id
        )
        await client.aclose()
    assert sent == 3 and sdk_sleeps.delays == [0.001, 0.001]
    assert [r.status for r in api.requests[:3]] == [status] * 3
    assert breaker.trips == 1
    for r in (first, second):
        assert (r.outcome, r.reply) == ("gave_up", GIVE_UP_REPLY)
    assert third.outcome == "answered" and breaker.state == "closed"
    history = await h.services.conversations.history(first.conversation_id)
    texts = [b.get("text") for m in history for b in m.content if m.role == "user"]
    assert "Where is my order O-1042?" in texts and "Hello? Anyone there?" in texts
    assert [m.role for m in history] == ["user", "assistant"] * 3
    assert await case_notes(db, first.conversation_id, "escalation") == 2
    reasons = [n.reason for n in h.notifier.of("escalated")]
    assert reasons == ["model_unavailable", "model_unavailable"]
    await assert_history_valid(h.runtime, first.conversation_id, C7)
    for run_id in (first.run_id, second.run_id):
        run = await h.services.conversations.get_run(run_id)
        assert run is not None and run.status == "escalated"


async def test_a_rejected_request_is_not_retried_and_still_ends_honestly(db: Database) -> None:
    """A 400 (our bug) is not retried, does not count against the provider, and the user still
    gets the honest reply and an escalation."""
    async with FakeAnthropicAPI(lambda body: api_error(400, "bad")) as api:
        client = AnthropicClient(AnthropicConfig(model="claude-test", api_key="sk-test", base_url=api.base_url))
        h = await seeded(db, client)
        r = await h.runtime.chat(principal=C7, channel="api", message="hi")
        await client.aclose()
    assert len(api.requests) == 1
    assert (r.outcome, r.reply) == ("gave_up", GIVE_UP_REPLY)
    assert client.breaker.consecutive_failures == 0
    assert h.notifier.of("escalated")[0].reason == "model_unavailable"
