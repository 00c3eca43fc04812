"""Run-level errors. Tool-level outcomes are not exceptions: they become
``is_error`` tool results the model can act on (see ``tools.results``)."""

from __future__ import annotations

from typing import Literal


class AgentError(Exception):
    """Base of every error that ends or aborts a run."""


class StepLimitExceeded(AgentError):
    """The turn used its step cap without the model answering."""


class BudgetExceeded(AgentError):
    """The conversation's token budget or the turn's wall-time cap is spent."""


class ModelUnavailable(AgentError):
    """The model provider could not answer (retries exhausted, circuit open, 4xx bug)."""

    def __init__(self, message: str, *, reason: str = "unavailable", request_id: str | None = None):
        super().__init__(message)
        self.reason = reason
        self.request_id = request_id


class ApprovalExpired(AgentError):
    """A decision arrived for an approval whose ``expires_at`` has passed."""


class ConfigError(AgentError):
    """A setting or policy file is missing or malformed; the message names it."""


class Busy(AgentError):
    """Someone else is acting on this conversation, or on this customer's money, right now.

    Nothing was decided or done; the caller may try again. Faces see this, never the
    storage layer's own exceptions (the runtime translates them, see ``agent.boundary``).
    """


class Unavailable(AgentError):
    """The database is unavailable right now (a restart, a dropped connection, a read-only
    window). Nothing was decided by this call, or what was decided is carried on durably (a
    settled outcome, a confirmation's job); the caller may send the same request again after
    ``retry_after_s``. Faces answer 503 with ``Retry-After``."""

    def __init__(self, message: str = "The database is briefly unavailable; try again.", *, retry_after_s: int = 2):
        super().__init__(message)
        self.retry_after_s = retry_after_s


#: Why a decision cannot be taken; each maps to one HTTP status of the API.
DecisionCode = Literal["not_found", "forbidden", "own_request", "conflict", "expired", "invalid", "rate_limited"]


class DecisionError(AgentError):
    """A decision that cannot be taken; ``code`` maps to the HTTP status the API answers."""

    def __init__(self, code: DecisionCode, message: str):
        super().__init__(message)
        self.code: DecisionCode = code


class InProgress(DecisionError):
    """The action is being carried out right now by another process (its ledger claim is
    ``executing``): nothing new was decided, and its outcome follows once that claim is
    settled (by its holder, or by the worker's reconciliation pass). The API answers 409."""

    def __init__(self, message: str):
        super().__init__("conflict", message)


class LimitExceeded(DecisionError):
    """A per-principal limit of the policy (``limit`` names it) refuses this now; nothing was
    stored for it. The HTTP API answers 429."""

    def __init__(self, limit: str, message: str):
        super().__init__("rate_limited", message)
        self.limit = limit
