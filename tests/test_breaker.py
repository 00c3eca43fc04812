"""The circuit breaker, with a hand-driven clock: no sleeps."""

from __future__ import annotations

import asyncio

import pytest

from agent.errors import ModelUnavailable
from agent.llm.breaker import BreakerConfig, CircuitBreaker, CircuitOpen


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Boom(Exception):
    pass


async def ok() -> str:
    return "ok"


async def fail() -> str:
    raise Boom("down")


def make(threshold: int = 3, cooldown: float = 30.0) -> tuple[CircuitBreaker, Clock, list[str]]:
    clock = Clock()
    changes: list[str] = []
    breaker = CircuitBreaker(
        BreakerConfig(failure_threshold=threshold, cooldown_s=cooldown),
        clock=clock,
        on_change=changes.append,
    )
    return breaker, clock, changes


async def fail_n(breaker: CircuitBreaker, n: int) -> None:
    for _ in range(n):
        with pytest.raises(Boom):
            await breaker.call(fail)


def test_defaults_are_five_failures_and_thirty_seconds() -> None:
    """The default config opens after 5 failures and cools down for 30 s."""
    assert BreakerConfig() == BreakerConfig(failure_threshold=5, cooldown_s=30.0)
    assert CircuitBreaker().state == "closed"


async def test_stays_closed_below_threshold_and_success_resets_count() -> None:
    """Failures must be consecutive: a success in between resets the count."""
    breaker, _, changes = make(threshold=3)
    await fail_n(breaker, 2)
    assert await breaker.call(ok) == "ok"
    await fail_n(breaker, 2)
    assert breaker.state == "closed"
    assert breaker.consecutive_failures == 2
    assert changes == []


async def test_opens_after_threshold_and_rejects_without_calling() -> None:
    """N consecutive failures open the circuit; calls are then rejected unsent."""
    breaker, _, changes = make(threshold=3)
    await fail_n(breaker, 3)
    assert breaker.state == "open"
    assert breaker.trips == 1
    assert changes == ["open"]
    called = False

    async def spy() -> str:
        nonlocal called
        called = True
        return "sent"

    with pytest.raises(CircuitOpen) as info:
        await breaker.call(spy)
    assert not called
    assert isinstance(info.value, ModelUnavailable)
    assert info.value.reason == "circuit_open"


async def test_half_opens_after_cooldown_and_a_good_trial_closes() -> None:
    """After the cool-down one trial passes; its success closes the circuit."""
    breaker, clock, changes = make(threshold=2, cooldown=30)
    await fail_n(breaker, 2)
    clock.now += 29.9
    assert breaker.state == "open"
    with pytest.raises(CircuitOpen):
        await breaker.call(ok)
    clock.now += 0.1
    assert breaker.state == "half_open"
    assert await breaker.call(ok) == "ok"
    assert breaker.state == "closed"
    assert changes == ["open", "half_open", "closed"]
    assert breaker.consecutive_failures == 0


async def test_failed_trial_reopens_for_a_full_cooldown() -> None:
    """A failed half-open trial re-opens the circuit (a second trip) and restarts the clock."""
    breaker, clock, changes = make(threshold=2, cooldown=10)
    await fail_n(breaker, 2)
    clock.now += 10
    await fail_n(breaker, 1)
    assert breaker.state == "open"
    assert breaker.trips == 2
    assert changes == ["open", "half_open", "open"]
    clock.now += 9
    with pytest.raises(CircuitOpen):
        await breaker.call(ok)


async def test_half_open_admits_only_one_trial_at_a_time() -> None:
    """While the trial is in flight, other callers are rejected immediately."""
    breaker, clock, _ = make(threshold=1, cooldown=5)
    await fail_n(breaker, 1)
    clock.now += 5
    gate = asyncio.Event()
    started = asyncio.Event()

    async def slow() -> str:
        started.set()
        await gate.wait()
        return "trial"

    trial = asyncio.create_task(breaker.call(slow))
    await started.wait()
    with pytest.raises(CircuitOpen):
        await breaker.call(ok)
    gate.set()
    assert await trial == "trial"
    assert breaker.state == "closed"


async def test_cancelled_trial_frees_the_slot() -> None:
    """A cancelled trial is neither success nor failure; the next caller may try."""
    breaker, clock, _ = make(threshold=1, cooldown=5)
    await fail_n(breaker, 1)
    clock.now += 5
    started = asyncio.Event()

    async def hang() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    trial = asyncio.create_task(breaker.call(hang))
    await started.wait()
    trial.cancel()
    with pytest.raises(asyncio.CancelledError):
        await trial
    assert await breaker.call(ok) == "ok"
    assert breaker.state == "closed"


async def test_exceptions_not_counted_as_failures_prove_the_dependency_is_up() -> None:
    """``is_failure`` False: re-raised, but counted as an answer (resets the count)."""
    breaker, _, _ = make(threshold=2)
    await fail_n(breaker, 1)

    async def rejected() -> str:
        raise ValueError("400")

    with pytest.raises(ValueError):
        await breaker.call(rejected, is_failure=lambda exc: not isinstance(exc, ValueError))
    assert breaker.consecutive_failures == 0
    await fail_n(breaker, 1)
    assert breaker.state == "closed"


async def test_late_failure_while_open_does_not_extend_cooldown() -> None:
    """A call admitted before opening that fails later neither re-trips nor restarts the clock."""
    breaker, clock, _ = make(threshold=1, cooldown=10)
    breaker.acquire()  # a slow call in flight
    await fail_n(breaker, 1)
    clock.now += 6
    breaker.record_failure()
    assert breaker.trips == 1
    clock.now += 4
    assert breaker.state == "half_open"
