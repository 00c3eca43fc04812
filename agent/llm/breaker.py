"""A circuit breaker for calls to a dependency that can go away (a model provider).

Closed: calls pass, consecutive failures are counted. After ``failure_threshold``
consecutive failed calls it opens: calls are rejected at once with
:class:`CircuitOpen`. After ``cooldown_s`` it half-opens and lets exactly one
trial call through; the trial's outcome closes or re-opens it.

The breaker knows nothing about models: the caller says which exceptions count
as failures. The clock is injected so tests never sleep.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from agent.errors import ModelUnavailable

T = TypeVar("T")

BreakerState = Literal["closed", "open", "half_open"]


class CircuitOpen(ModelUnavailable):
    """The breaker is open (or its single half-open trial is in flight): nothing was sent."""

    def __init__(self, name: str, retry_in_s: float):
        super().__init__(f"circuit {name!r} is open; next trial in {retry_in_s:.1f}s", reason="circuit_open")
        self.retry_in_s = retry_in_s


@dataclass(frozen=True, kw_only=True)
class BreakerConfig:
    """When the breaker opens and how long it stays open."""

    failure_threshold: int = 5
    cooldown_s: float = 30.0


def _every_exception(_exc: BaseException) -> bool:
    return True


class CircuitBreaker:
    """Consecutive-failure circuit breaker with one half-open trial call.

    ``on_change(state)`` is called after every state transition (for metrics and
    logs); ``trips`` counts transitions into ``open``.
    """

    def __init__(
        self,
        config: BreakerConfig | None = None,
        *,
        name: str = "model",
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[BreakerState], None] | None = None,
    ) -> None:
        self.config = config or BreakerConfig()
        self.name = name
        self._clock = clock
        self._on_change = on_change
        self._state: BreakerState = "closed"
        self._failures = 0
        self._opened_at = 0.0
        self._trial_in_flight = False
        self.trips = 0

    @property
    def state(self) -> BreakerState:
        """The current state; an open breaker whose cool-down has passed reads ``half_open``."""
        if self._state == "open" and self._cooldown_left() <= 0:
            return "half_open"
        return self._state

    @property
    def consecutive_failures(self) -> int:
        """Failed calls since the last success."""
        return self._failures

    async def call(
        self,
        fn: Callable[[], Awaitable[T]],
        *,
        is_failure: Callable[[BaseException], bool] = _every_exception,
    ) -> T:
        """Run ``fn`` through the breaker.

        An exception for which ``is_failure`` returns False means the dependency
        answered (e.g. it rejected our malformed request): it counts as a success
        and is re-raised. Cancellation counts as neither.
        """
        self.acquire()
        try:
            result = await fn()
        except Exception as exc:
            if is_failure(exc):
                self.record_failure()
            else:
                self.record_success()
            raise
        except BaseException:
            self.release()
            raise
        self.record_success()
        return result

    def acquire(self) -> None:
        """Admit one call or raise :class:`CircuitOpen`.

        Every admitted call must end in exactly one of :meth:`record_success`,
        :meth:`record_failure` or :meth:`release`.
        """
        if self._state == "open":
            left = self._cooldown_left()
            if left > 0:
                raise CircuitOpen(self.name, left)
            self._set("half_open")
        if self._state == "half_open":
            if self._trial_in_flight:
                raise CircuitOpen(self.name, 0.0)
            self._trial_in_flight = True

    def record_success(self) -> None:
        """The admitted call got an answer: reset the count, close a half-open circuit."""
        self._trial_in_flight = False
        self._failures = 0
        if self._state != "closed":
            self._set("closed")

    def record_failure(self) -> None:
        """The admitted call failed: re-open a half-open circuit, or count toward opening."""
        self._trial_in_flight = False
        self._failures += 1
        if self._state == "open":
            return  # a call admitted before the circuit opened; do not extend the cool-down
        if self._state == "half_open" or self._failures >= self.config.failure_threshold:
            self._open()

    def release(self) -> None:
        """The admitted call ended without an outcome (cancelled): free the trial slot."""
        self._trial_in_flight = False

    def _open(self) -> None:
        self._opened_at = self._clock()
        self.trips += 1
        self._set("open")

    def _cooldown_left(self) -> float:
        return self._opened_at + self.config.cooldown_s - self._clock()

    def _set(self, state: BreakerState) -> None:
        self._state = state
        if self._on_change is not None:
            self._on_change(state)
